import Logging
import StratusCore
import StratusPostgres

/// The indexer's projection: the query index (every record's queryable document) and its directory of live zones.
public struct IndexerProjection: Projection {
    public let name = "stratus-indexer"
    /// Whether it maintains the query index too, or only the zone directory (when a new index
    /// generation is built beside it, see `IndexerReplay`).
    let includesRecords: Bool

    /// Creates the projection; `includesRecords: false` leaves the query index alone.
    public init(includesRecords: Bool = true) { self.includesRecords = includesRecords }

    public func apply(_ event: EventEnvelope, in transaction: Transaction, logger: Logger) async throws {
        switch event.type {
        case .zoneCreated:
            try await IndexZoneStore.upsert(event.decode(ZoneCreated.self), event: event, in: transaction)
        case .zoneDeleted:
            let deleted = try event.decode(ZoneDeleted.self)
            try await IndexZoneStore.remove(deleted, event: event, in: transaction)
            if includesRecords { try await QueryIndexStore.apply(deleted, event: event, in: transaction) }
        case RecordSaved.eventType where includesRecords:
            try await QueryIndexStore.apply(event.decode(RecordSaved.self), event: event, in: transaction)
        case RecordDeleted.eventType where includesRecords:
            try await QueryIndexStore.apply(event.decode(RecordDeleted.self), event: event, in: transaction)
        default:
            break
        }
    }

    public func reset(in transaction: Transaction, logger: Logger) async throws {
        try await IndexZoneStore.reset(in: transaction)
        if includesRecords { try await QueryIndexStore.reset(in: transaction) }
    }
}

/// A worker whose own effects are not built yet: it consumes, checkpoints and logs every event, so
/// the pipeline to it is exercised and its position is real when its effects arrive.
public struct ObserverProjection: Projection {
    public let name: String

    /// Creates an observer under a worker name.
    public init(name: String) { self.name = name }

    public func apply(_ event: EventEnvelope, in transaction: Transaction, logger: Logger) async throws {
        logger.info("event received", metadata: ["event": "\(event.id)", "type": "\(event.type)", "zone": "\(event.zoneKey)"])
    }

    public func reset(in transaction: Transaction, logger: Logger) async throws {}
}
