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
