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

    /// Creates a zone value.
    public init(database: DatabaseID, zoneID: ZoneID, incarnation: UUID, changeCounter: Int64) {
        self.database = database
        self.zoneID = zoneID
        self.incarnation = incarnation
        self.changeCounter = changeCounter
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

    /// Creates the payload.
    public init(database: DatabaseID, zoneID: ZoneID, incarnation: UUID) {
        self.database = database
        self.zoneID = zoneID
        self.incarnation = incarnation
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
    case create(ZoneID)
    /// Delete the zone and everything in it.
    case delete(ZoneID)
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
        case deleted(ZoneDeleted)
    }

    /// Decides a command against the current zone (nil when the zone does not exist).
    public static func decide(
        _ command: ZoneCommand, database: DatabaseID, current: Zone?, lastSequence: Int64, newIncarnation: UUID
    ) throws(StratusError) -> Outcome {
        switch command {
        case .create(let zoneID):
            if let current { return .unchanged(current) }
            let zone = Zone(database: database, zoneID: zoneID, incarnation: newIncarnation, changeCounter: lastSequence + 1)
            return .changed(events: [.created(ZoneCreated(database: database, zoneID: zoneID, incarnation: newIncarnation))], after: zone)
        case .delete(let zoneID):
            guard let current else {
                throw StratusError(.zoneNotFound, "Zone '\(zoneID.zoneName)' does not exist")
            }
            return .changed(events: [.deleted(ZoneDeleted(database: database, zoneID: zoneID, incarnation: current.incarnation))], after: nil)
        }
    }
}
