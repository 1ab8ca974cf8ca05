/// The JSON lines of an export archive besides the records (whose lines are CloudKit's record
/// dictionaries): users, zones and subscriptions, each read back with every member checked.

/// A user of the container's directory. No password hash, session or linked account leaves the
/// server: an imported user signs in again after `stratus user password` or a provider's sign-in.
public struct ArchiveUser: Sendable, Hashable {
    public var userRecordName: String
    public var login: String
    public var emailAddress: String?
    public var givenName: String?
    public var familyName: String?
    public var discoverable: Bool

    /// Creates a user line.
    public init(userRecordName: String, login: String, emailAddress: String?, givenName: String?, familyName: String?, discoverable: Bool) {
        self.userRecordName = userRecordName
        self.login = login
        self.emailAddress = emailAddress
        self.givenName = givenName
        self.familyName = familyName
        self.discoverable = discoverable
    }

    /// The line.
    public var json: JSONValue {
        var members: [String: JSONValue] = ["userRecordName": .string(userRecordName), "login": .string(login), "discoverable": .bool(discoverable)]
        if let emailAddress { members["emailAddress"] = .string(emailAddress) }
        if let givenName { members["givenName"] = .string(givenName) }
        if let familyName { members["familyName"] = .string(familyName) }
        return .object(members)
    }

    /// Reads a line.
    public init(_ json: JSONValue) throws(StratusError) {
        let line = ArchiveLine(json, file: ArchiveLayout.users)
        self.init(
            userRecordName: try line.name("userRecordName"), login: try line.name("login"), emailAddress: try line.optional("emailAddress"),
            givenName: try line.optional("givenName"), familyName: try line.optional("familyName"), discoverable: json["discoverable"] == .bool(true))
    }
}

/// A zone: its environment, database and owner, its name, its default time to live, and the file
/// of its records.
public struct ArchiveZone: Sendable, Hashable {
    public var environment: Environment
    /// `private` or `public`.
    public var scope: DatabaseScope
    public var owner: String
    public var zoneName: String
    public var defaultTimeToLive: Int64?
    /// The archive paths of its records' parts (`ArchiveLayout.records`), in order.
    public var records: [String]

    /// Creates a zone line.
    public init(environment: Environment, scope: DatabaseScope, owner: String, zoneName: String, defaultTimeToLive: Int64?, records: [String]) {
        self.environment = environment
        self.scope = scope
        self.owner = owner
        self.zoneName = zoneName
        self.defaultTimeToLive = defaultTimeToLive
        self.records = records
    }

    /// The line.
    public var json: JSONValue {
        var members: [String: JSONValue] = [
            "environment": .string(environment.rawValue), "database": .string(scope.rawValue), "owner": .string(owner),
            "zoneName": .string(zoneName), "records": .array(records.map { .string($0) }),
        ]
        if let defaultTimeToLive { members["defaultTimeToLive"] = .int(defaultTimeToLive) }
        return .object(members)
    }

    /// Reads a line: a private or public database's zone (the shared database holds none of its own),
    /// the public database's only zone being its default one.
    public init(_ json: JSONValue) throws(StratusError) {
        let line = ArchiveLine(json, file: ArchiveLayout.zones)
        let environment = try line.environment()
        let scope = try line.scope()
        let zoneName = try line.name("zoneName")
        if zoneName != ZoneID.defaultZoneName {
            do { try ZoneID.validate(zoneName: zoneName) } catch { throw ArchiveProblem.refuse("\(ArchiveLayout.zones): \(error.reason)") }
        }
        guard scope == .private || zoneName == ZoneID.defaultZoneName else {
            throw ArchiveProblem.refuse("\(ArchiveLayout.zones): the public database has only its default zone")
        }
        guard case .array(let paths)? = json["records"], paths.count <= 100_000 else {
            throw ArchiveProblem.refuse("\(ArchiveLayout.zones): a zone's records are not a list of paths")
        }
        var records: [String] = []
        for path in paths {
            guard let path = path.stringValue else { throw ArchiveProblem.refuse("\(ArchiveLayout.zones): a zone's records are not a list of paths") }
            try ArchivePath.check(path)
            records.append(path)
        }
        var ttl: Int64?
        switch json["defaultTimeToLive"] {
        case nil, .null?: ttl = nil
        case .int(let seconds)? where (1...RecordExpiration.maxTimeToLive).contains(seconds): ttl = seconds
        default: throw ArchiveProblem.refuse("\(ArchiveLayout.zones): defaultTimeToLive is not a number of seconds in range")
        }
        self.init(environment: environment, scope: scope, owner: try line.name("owner"), zoneName: zoneName, defaultTimeToLive: ttl, records: records)
    }
}

extension ArchiveZone {
    /// The zone's database in `container` of the target, its owner renamed by `mapping` (the public
    /// database's owner stays `_public`).
    public func database(in container: String, mapping: ArchiveUserMapping) -> DatabaseID {
        DatabaseID(container: container, environment: environment, scope: scope, owner: mapping(owner))
    }

    /// Whom a record of the zone is saved as: a private database's owner; in the public database,
    /// where records belong to their creators, the record's creator (already renamed).
    public func writer(ofRecordCreatedBy creator: String, in database: DatabaseID) -> String {
        scope == .public ? creator : database.owner
    }

    /// Whose records of the zone a user's export holds: every record of their private database,
    /// only those they created in the public one (nil: every record).
    public func exportedCreator(user: String?) -> String? {
        scope == .public ? user : nil
    }
}

/// A subscription: the database it is in, who made it, and its definition as stored.
public struct ArchiveSubscription: Sendable, Hashable {
    public var environment: Environment
    public var scope: DatabaseScope
    public var owner: String
    public var subscriber: String
    public var definition: JSONValue

    /// Creates a subscription line.
    public init(environment: Environment, scope: DatabaseScope, owner: String, subscriber: String, definition: JSONValue) {
        self.environment = environment
        self.scope = scope
        self.owner = owner
        self.subscriber = subscriber
        self.definition = definition
    }

    /// The line.
    public var json: JSONValue {
        .object([
            "environment": .string(environment.rawValue), "database": .string(scope.rawValue), "owner": .string(owner),
            "subscriber": .string(subscriber), "subscription": definition,
        ])
    }

    /// Reads a line; the definition itself is checked as a subscription when it is loaded.
    public init(_ json: JSONValue) throws(StratusError) {
        let line = ArchiveLine(json, file: ArchiveLayout.subscriptions)
        guard case .object? = json["subscription"] else { throw ArchiveProblem.refuse("\(ArchiveLayout.subscriptions): a line has no subscription") }
        self.init(
            environment: try line.environment(), scope: try line.scope(), owner: try line.name("owner"), subscriber: try line.name("subscriber"),
            definition: json["subscription"] ?? .null)
    }
}

extension ArchiveSubscription {
    /// The subscription's database in `container` of the target, its owner renamed by `mapping`.
    public func database(in container: String, mapping: ArchiveUserMapping) -> DatabaseID {
        DatabaseID(container: container, environment: environment, scope: scope, owner: mapping(owner))
    }
}

/// Reads members of one line, refusing with the file's name.
struct ArchiveLine {
    let json: JSONValue
    let file: String

    init(_ json: JSONValue, file: String) {
        self.json = json
        self.file = file
    }

    /// A non-empty string member of at most 255 bytes.
    func name(_ key: String) throws(StratusError) -> String {
        guard let value = json[key]?.stringValue, !value.isEmpty, value.utf8.count <= 255, !value.utf8.contains(0) else {
            throw ArchiveProblem.refuse("\(file): a line has no \(key) of 1 to 255 bytes")
        }
        return value
    }

    func optional(_ key: String) throws(StratusError) -> String? {
        switch json[key] {
        case nil, .null?: return nil
        default: return try name(key)
        }
    }

    func environment() throws(StratusError) -> Environment {
        guard let value = json["environment"]?.stringValue, let environment = Environment(rawValue: value) else {
            throw ArchiveProblem.refuse("\(file): a line's environment is not development or production")
        }
        return environment
    }

    func scope() throws(StratusError) -> DatabaseScope {
        guard let value = json["database"]?.stringValue, let scope = DatabaseScope(rawValue: value), scope != .shared else {
            throw ArchiveProblem.refuse("\(file): a line's database is not private or public")
        }
        return scope
    }
}

/// Splits a file's bytes into lines as they arrive, refusing a line longer than the limit, so a
/// file is read in bounded memory whatever its size.
public struct ArchiveLineSplitter: Sendable {
    let file: String
    let maxLineBytes: Int
    var pending: [UInt8] = []

    /// A splitter for `file`'s lines.
    public init(file: String, maxLineBytes: Int) {
        self.file = file
        self.maxLineBytes = maxLineBytes
    }

    /// The lines `chunk` completes (without their newline; empty lines skipped).
    public mutating func feed(_ chunk: some Collection<UInt8>) throws(StratusError) -> [[UInt8]] {
        var lines: [[UInt8]] = []
        for byte in chunk {
            if byte == UInt8(ascii: "\n") {
                if !pending.isEmpty { lines.append(pending) }
                pending.removeAll(keepingCapacity: true)
            } else {
                guard pending.count < maxLineBytes else {
                    throw ArchiveProblem.refuse("\(ClientText.excerpt(file)) has a line longer than \(maxLineBytes) bytes")
                }
                pending.append(byte)
            }
        }
        return lines
    }

    /// The last line, which an export ends with a newline: refused when it does not (a truncated file).
    public func finish() throws(StratusError) {
        guard pending.isEmpty else { throw ArchiveProblem.refuse("\(ClientText.excerpt(file)) ends inside a line") }
    }

    /// Parses a line as JSON.
    public static func parse(_ line: [UInt8], file: String) throws(StratusError) -> JSONValue {
        do { return try JSONParser.parse(line) } catch { throw ArchiveProblem.refuse("\(ClientText.excerpt(file)) has a line that is not JSON (\(error))") }
    }
}
