import Foundation

/// A custom zone's current state as the write path sees it.
public struct Zone: Sendable, Hashable, Codable {
    /// The database the zone lives in.
    public var database: DatabaseID
    /// The zone's name and owner.
    public var zoneID: ZoneID
    /// Changes on every re-creation, so tokens and ids of an older incarnation can be told apart.
    public var incarnation: UUID
    /// The zone change counter: the sequence of the zone's latest event.
    public var changeCounter: Int64
    /// Seconds a record created in the zone without an expiration of its own is given to live (a
    /// Stratus extension, docs/ttl.md); nil: none.
    public var defaultTimeToLive: Int64?

    /// Creates a zone value.
    public init(database: DatabaseID, zoneID: ZoneID, incarnation: UUID, changeCounter: Int64, defaultTimeToLive: Int64? = nil) {
        self.database = database
        self.zoneID = zoneID
        self.incarnation = incarnation
        self.changeCounter = changeCounter
        self.defaultTimeToLive = defaultTimeToLive
    }

    /// The zone's stable key.
    public var key: ZoneKey { ZoneKey(database: database, zoneName: zoneID.zoneName) }
}

/// `zone.created`: a zone (incarnation) came into existence.
public struct ZoneCreated: EventPayload {
    public static let eventType: EventType = .zoneCreated
    public static let schemaVersion = 1
    /// The database of the zone.
    public var database: DatabaseID
    /// The zone's name and owner.
    public var zoneID: ZoneID
    /// The new incarnation.
    public var incarnation: UUID
    /// The zone's default time to live in seconds, when it was created with one (absent in older events).
    public var defaultTimeToLive: Int64?

    /// Creates the payload.
    public init(database: DatabaseID, zoneID: ZoneID, incarnation: UUID, defaultTimeToLive: Int64? = nil) {
        self.database = database
        self.zoneID = zoneID
        self.incarnation = incarnation
        self.defaultTimeToLive = defaultTimeToLive
    }
}

/// `zone.updated`: a live zone's settings changed (today its default time to live); its records
/// are untouched.
public struct ZoneUpdated: EventPayload {
    public static let eventType: EventType = .zoneUpdated
    public static let schemaVersion = 1
    /// The database of the zone.
    public var database: DatabaseID
    /// The zone's name and owner.
    public var zoneID: ZoneID
    /// The zone's incarnation (unchanged).
    public var incarnation: UUID
    /// The zone's default time to live in seconds from now on; nil: none.
    public var defaultTimeToLive: Int64?

    /// Creates the payload.
    public init(database: DatabaseID, zoneID: ZoneID, incarnation: UUID, defaultTimeToLive: Int64?) {
        self.database = database
        self.zoneID = zoneID
        self.incarnation = incarnation
        self.defaultTimeToLive = defaultTimeToLive
    }
}

/// `zone.deleted`: a zone incarnation and all its records are gone.
public struct ZoneDeleted: EventPayload {
    public static let eventType: EventType = .zoneDeleted
    public static let schemaVersion = 1
    /// The database of the zone.
    public var database: DatabaseID
    /// The zone's name and owner.
    public var zoneID: ZoneID
    /// The incarnation that was deleted.
    public var incarnation: UUID

    /// Creates the payload.
    public init(database: DatabaseID, zoneID: ZoneID, incarnation: UUID) {
        self.database = database
        self.zoneID = zoneID
        self.incarnation = incarnation
    }
}

/// What a client asks of a zone in `zones/modify`.
public enum ZoneCommand: Sendable, Hashable {
    /// Create the zone; creating a zone that exists returns it unchanged, as CloudKit does.
    /// `defaultTimeToLive` (a Stratus extension): nil: not sent (a new zone has none, an existing
    /// one keeps its own); .some(nil): none; .some(seconds): that default, for a new zone or an
    /// existing one (a change: `zone.updated`).
    case create(ZoneID, defaultTimeToLive: Int64?? = nil)
    /// Delete the zone and everything in it.
    case delete(ZoneID)

    /// The zone the command is about.
    public var zoneID: ZoneID {
        switch self {
        case .create(let zoneID, _), .delete(let zoneID): zoneID
        }
    }
}

/// The pure decision for a zone command: given the zone's current state, what to answer and which events to append.
public enum ZoneDecision {
    /// The outcome of a decision.
    public enum Outcome: Sendable, Hashable {
        /// Nothing changes; answer with this zone.
        case unchanged(Zone)
        /// Append these events; the zone afterwards (nil when deleted).
        case changed(events: [ZonePayload], after: Zone?)
    }

    /// A zone event payload.
    public enum ZonePayload: Sendable, Hashable {
        case created(ZoneCreated)
        case updated(ZoneUpdated)
        case deleted(ZoneDeleted)
    }

    /// Decides a command against the current zone (nil when the zone does not exist).
    public static func decide(
        _ command: ZoneCommand, database: DatabaseID, current: Zone?, lastSequence: Int64, newIncarnation: UUID
    ) throws(StratusError) -> Outcome {
        switch command {
        case .create(let zoneID, let defaultTimeToLive):
            if let current {
                guard let wanted = defaultTimeToLive, wanted != current.defaultTimeToLive else { return .unchanged(current) }
                var after = current
                after.defaultTimeToLive = wanted
                after.changeCounter = lastSequence + 1
                return .changed(events: [.updated(ZoneUpdated(
                    database: database, zoneID: current.zoneID, incarnation: current.incarnation, defaultTimeToLive: wanted))], after: after)
            }
            let ttl = defaultTimeToLive ?? nil
            let zone = Zone(database: database, zoneID: zoneID, incarnation: newIncarnation, changeCounter: lastSequence + 1, defaultTimeToLive: ttl)
            return .changed(events: [.created(ZoneCreated(
                database: database, zoneID: zoneID, incarnation: newIncarnation, defaultTimeToLive: ttl))], after: zone)
        case .delete(let zoneID):
            guard let current else {
                throw StratusError(.zoneNotFound, "Zone '\(zoneID.zoneName)' does not exist")
            }
            return .changed(events: [.deleted(ZoneDeleted(database: database, zoneID: zoneID, incarnation: current.incarnation))], after: nil)
        }
    }
}
