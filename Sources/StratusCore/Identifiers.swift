/// A CloudKit environment: development and production data never mix.
public enum Environment: String, Sendable, Codable, CaseIterable {
    case development
    case production
}

/// Which database of a container a request addresses.
public enum DatabaseScope: String, Sendable, Codable, CaseIterable {
    case `public`
    case `private`
    case shared
}

/// One database: a container's environment, a scope and, for private and shared databases, its owner.
public struct DatabaseID: Sendable, Hashable, Codable {
    /// The container identifier, e.g. `iCloud.com.example.notes`.
    public var container: String
    /// The environment the database lives in.
    public var environment: Environment
    /// Public, private or shared.
    public var scope: DatabaseScope
    /// The owning user's record name; the public database is owned by `_public`.
    public var owner: String

    /// The owner name the public database uses.
    public static let publicOwner = "_public"

    /// Creates a database identifier.
    public init(container: String, environment: Environment, scope: DatabaseScope, owner: String) {
        self.container = container
        self.environment = environment
        self.scope = scope
        self.owner = scope == .public ? Self.publicOwner : owner
    }

    /// `container/environment/scope/owner`: what a database sync token is bound to.
    public var key: String { [container, environment.rawValue, scope.rawValue, owner].joined(separator: "/") }
}

/// A zone within a database, as CloudKit names it: a zone name and its owner's record name.
public struct ZoneID: Sendable, Hashable, Codable {
    /// The zone name, e.g. `_defaultZone` or `Notes`.
    public var zoneName: String
    /// The record name of the zone's owner.
    public var ownerRecordName: String

    /// The name of the zone every database has.
    public static let defaultZoneName = "_defaultZone"
    /// What a client may name a zone's owner to mean the database's own owner.
    public static let defaultOwnerName = "__defaultOwner__"

    /// Creates a zone identifier.
    public init(zoneName: String, ownerRecordName: String) {
        self.zoneName = zoneName
        self.ownerRecordName = ownerRecordName
    }

    /// Whether this is the database's default zone (no zone-wide change counter, no atomic batches).
    public var isDefaultZone: Bool { zoneName == Self.defaultZoneName }

    /// Checks a client-supplied zone name: 1–255 characters of letters, digits, `-`, `_` and `.`,
    /// not starting with `_` (names starting with `_` are reserved for the system).
    public static func validate(zoneName: String) throws(StratusError) {
        guard !zoneName.isEmpty, zoneName.utf8.count <= 255 else {
            throw StratusError(.badRequest, "zoneName must be 1 to 255 characters")
        }
        guard zoneName.unicodeScalars.allSatisfy({ $0.isASCII && (isAlphanumeric($0) || "-_.".unicodeScalars.contains($0)) }) else {
            throw StratusError(.badRequest, "zoneName '\(zoneName.prefix(64))' may contain only letters, digits, '-', '_' and '.'")
        }
        guard !zoneName.hasPrefix("_") else {
            throw StratusError(.badRequest, "zoneName '\(zoneName.prefix(64))' is reserved: names starting with '_' belong to the system")
        }
    }

    private static func isAlphanumeric(_ scalar: Unicode.Scalar) -> Bool {
        ("a"..."z").contains(scalar) || ("A"..."Z").contains(scalar) || ("0"..."9").contains(scalar)
    }
}

/// The stable key of a zone across its incarnations: the Kafka message key and the event log's zone key.
///
/// A deleted and re-created zone keeps its key (so its events stay in one partition, in order) but
/// gets a new incarnation.
public struct ZoneKey: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The key's text form: `container/environment/scope/owner/zoneName`.
    public var rawValue: String

    /// Builds the key of a zone in a database.
    public init(database: DatabaseID, zoneName: String) {
        rawValue = [database.container, database.environment.rawValue, database.scope.rawValue, database.owner, zoneName]
            .joined(separator: "/")
    }

    /// Wraps an existing key's text.
    public init(rawValue: String) { self.rawValue = rawValue }

    public var description: String { rawValue }
}
