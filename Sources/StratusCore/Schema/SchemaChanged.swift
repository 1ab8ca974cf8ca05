/// A container environment's schema changed: a development save added record types or fields, or
/// an operator deployed, imported or reset a schema.
public struct SchemaChanged: EventPayload {
    public static let eventType: EventType = "schema.changed"
    public static let schemaVersion = 1

    /// What changed it.
    public enum Cause: String, Sendable, Hashable, Codable {
        /// A development save brought new record types or fields.
        case save
        /// `stratus schema deploy`: development copied to production.
        case deploy
        /// `stratus schema import`: a schema file became development's schema.
        case `import`
        /// `stratus schema reset`: production copied to development.
        case reset
    }

    public var container: String
    public var environment: Environment
    public var cause: Cause
    /// For a save: the record types it created, and for existing types the fields it added (only
    /// those). Bounded by the fields one record type may have.
    public var added: [RecordTypeSchema]
    /// For a deploy, an import or a reset: the names of the record types the schema now has (the
    /// schema itself is read from its environment; a whole schema could exceed an event's size).
    public var recordTypes: [String]

    /// Creates the payload.
    public init(container: String, environment: Environment, cause: Cause, added: [RecordTypeSchema] = [], recordTypes: [String] = []) {
        self.container = container
        self.environment = environment
        self.cause = cause
        self.added = added
        self.recordTypes = recordTypes
    }

    /// The event log key of a container environment's schema events (one key, so they stay in order).
    public static func key(container: String, environment: Environment) -> ZoneKey {
        ZoneKey(rawValue: [container, environment.rawValue, "_schema"].joined(separator: "/"))
    }
}
