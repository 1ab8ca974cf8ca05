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

    /// The query index: a load of records must not leave its queries planned without statistics.
    public var statisticsTable: String? { includesRecords ? "query_index.records" : nil }

    public func apply(_ event: EventEnvelope, in transaction: Transaction, logger: Logger) async throws {
        switch event.type {
        case .zoneCreated:
            try await IndexZoneStore.upsert(event.decode(ZoneCreated.self), event: event, in: transaction)
        case .zoneDeleted:
            let deleted = try event.decode(ZoneDeleted.self)
            try await IndexZoneStore.remove(deleted, event: event, in: transaction)
            if includesRecords { try await QueryIndexStore.apply(deleted, event: event, in: transaction) }
        case RecordSaved.eventType where includesRecords:
            try await QueryIndexStore.apply(indexed: [(RecordSaved.indexed(event), event.id)], in: transaction)
        case RecordDeleted.eventType where includesRecords:
            try await QueryIndexStore.apply(RecordDeleted.withoutImage(event), event: event, in: transaction)
        default:
            break
        }
    }

    /// A batch in order, except that each run of consecutive record saves, and each run of record
    /// deletions, goes to the index as one statement. A save is read for the index only
    /// (`RecordSaved.indexed`: the record's JSON kept as the event holds it, the previous image
    /// unread), as a rebuild reads it.
    public func apply(_ events: [EventEnvelope], in transaction: Transaction, logger: Logger) async throws {
        guard includesRecords else {
            for event in events { try await apply(event, in: transaction, logger: logger) }
            return
        }
        try await apply(events, in: transaction, logger: logger, readingSave: RecordSaved.indexed, saves: { run in
            try await QueryIndexStore.apply(indexed: run.map { ($0.saved, $0.event.id) }, in: transaction)
        }, deletions: { run in
            try await QueryIndexStore.apply(deletions: run, in: transaction)
        })
    }

    public func reset(in transaction: Transaction, logger: Logger) async throws {
        try await IndexZoneStore.reset(in: transaction)
        if includesRecords { try await QueryIndexStore.reset(in: transaction) }
    }
}
