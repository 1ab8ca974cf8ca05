/// Who a caller of the public database is, for the security roles: `_world` holds for everyone,
/// `_icloud` for a signed-in user (or a server key acting as its user), `_creator` for the creator
/// of the record at hand, and custom roles for the users an operator assigned them to.
public struct RoleHolder: Sendable, Hashable {
    /// The caller's user record name; nil for a caller with only the API token.
    public var userRecordName: String?
    /// The custom roles assigned to the caller in the environment.
    public var roles: Set<String>

    /// Creates a holder.
    public init(userRecordName: String?, roles: Set<String> = []) {
        self.userRecordName = userRecordName
        self.roles = roles
    }

    /// Whether the caller holds `role` for a record created by `creator` (nil: no record yet).
    public func holds(_ role: String, creator: String?) -> Bool {
        switch role {
        case "_world": true
        case "_icloud": userRecordName != nil
        case "_creator": userRecordName != nil && creator == userRecordName
        default: roles.contains(role)
        }
    }
}

extension RecordTypeSchema {
    /// Whether a caller may `permission` a record of this type created by `creator` (nil: creating
    /// one): some grant gives it to a role the caller holds. WRITE includes READ (a creator reads
    /// and writes its records with the default `GRANT WRITE TO "_creator"`).
    public func permits(_ permission: SchemaPermission, to holder: RoleHolder, creator: String?) -> Bool {
        grants.contains { grant in
            (grant.permissions.contains(permission) || (permission == .read && grant.permissions.contains(.write)))
                && holder.holds(grant.role, creator: creator)
        }
    }

    /// Whether any grant of this type names a custom role: only then does a check need the caller's roles.
    public var grantsCustomRoles: Bool { grants.contains { !Schema.builtInRoles.contains($0.role) } }
}

/// Which records of a record type a caller of the public database may read.
public enum ReadScope: Sendable, Hashable {
    /// Every record: a role the caller holds has READ (or WRITE) on the type.
    case all
    /// Only the records the caller created: READ reaches the caller only through `_creator`.
    case own
    /// None.
    case none
}

extension RecordTypeSchema {
    /// Which of this type's records `holder` may read: all when a grant of READ (or WRITE, which
    /// includes it) names a role the holder holds for any record; its own when only `_creator` does.
    public func readScope(for holder: RoleHolder) -> ReadScope {
        let reading = grants.filter { $0.permissions.contains(.read) || $0.permissions.contains(.write) }
        if reading.contains(where: { $0.role != "_creator" && holder.holds($0.role, creator: nil) }) { return .all }
        if holder.userRecordName != nil, reading.contains(where: { $0.role == "_creator" }) { return .own }
        return .none
    }
}

/// The READ grants of the record types one public-database read returns, with the reader: read
/// once per request, then asked per record.
public struct PublicReadGrants: Sendable, Hashable {
    /// The record types the schema has, among those asked for.
    public var types: [String: RecordTypeSchema]
    /// The reader, with the custom roles it holds.
    public var holder: RoleHolder

    /// Creates the grants.
    public init(types: [String: RecordTypeSchema], holder: RoleHolder) {
        self.types = types
        self.holder = holder
    }

    /// Which records of `recordType` the reader may read; a type the schema lacks has CloudKit's
    /// default grants (everyone reads), as for writes.
    public func scope(of recordType: String) -> ReadScope {
        (types[recordType] ?? RecordTypeSchema(name: recordType, grants: RecordTypeSchema.defaultGrants)).readScope(for: holder)
    }

    /// Whether the reader may read `record`.
    public func mayRead(_ record: Record) -> Bool {
        switch scope(of: record.recordType) {
        case .all: true
        case .own: record.created.userRecordName == holder.userRecordName
        case .none: false
        }
    }
}
