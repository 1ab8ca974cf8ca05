import Logging
import StratusCore
import StratusPostgres
import Synchronization

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
            try await QueryIndexStore.apply(event.decode(RecordSaved.self), event: event, in: transaction)
        case RecordDeleted.eventType where includesRecords:
            try await QueryIndexStore.apply(RecordDeleted.withoutImage(event), event: event, in: transaction)
        default:
            break
        }
    }

    /// A batch in order, except that each run of consecutive record saves, and each run of record
    /// deletions, goes to the index as one statement.
    public func apply(_ events: [EventEnvelope], in transaction: Transaction, logger: Logger) async throws {
        guard includesRecords else {
            for event in events { try await apply(event, in: transaction, logger: logger) }
            return
        }
        try await apply(events, in: transaction, logger: logger, saves: { run in
            try await QueryIndexStore.apply(saves: run, in: transaction)
        }, deletions: { run in
            try await QueryIndexStore.apply(deletions: run, in: transaction)
        })
    }

    public func reset(in transaction: Transaction, logger: Logger) async throws {
        try await IndexZoneStore.reset(in: transaction)
        if includesRecords { try await QueryIndexStore.reset(in: transaction) }
    }
}

/// A worker whose own effects are not built yet: it consumes and checkpoints every event, so the
/// pipeline to it is exercised and its position is real when its effects arrive. Each event is
/// logged at debug level only; at info level it says at most once per `summaryInterval`, when
/// events arrived, how many it received. Nobody waits for its (absent) effects: background urgency.
public struct ObserverProjection: Projection {
    public let name: String
    public let urgency = ProjectionUrgency.background
    let summary: EventTally

    /// Creates an observer under a worker name.
    public init(name: String, summaryInterval: Duration = .seconds(60)) {
        self.name = name
        summary = EventTally(interval: summaryInterval)
    }

    public func apply(_ event: EventEnvelope, in transaction: Transaction, logger: Logger) async throws {
        logger.debug("event received", metadata: ["event": "\(event.id)", "type": "\(event.type)", "zone": "\(event.zoneKey)"])
        if let tally = summary.count() {
            logger.info("events received", metadata: ["events": "\(tally.events)", "seconds": "\(Int(tally.seconds.rounded()))"])
        }
    }

    public func reset(in transaction: Transaction, logger: Logger) async throws {}
}

/// Counts events and says, at most once per interval, how many arrived since it last said so.
final class EventTally: Sendable {
    let interval: Duration
    private let state: Mutex<(count: Int, since: ContinuousClock.Instant)>

    init(interval: Duration, now: ContinuousClock.Instant = .now) {
        self.interval = interval
        state = Mutex((0, now))
    }

    /// Counts one event; returns the count and the seconds it covers when the interval has passed
    /// (and starts a new one), nil otherwise.
    func count(now: ContinuousClock.Instant = .now) -> (events: Int, seconds: Double)? {
        state.withLock { state in
            state.count += 1
            let elapsed = now - state.since
            guard elapsed >= interval else { return nil }
            defer { state = (0, now) }
            return (state.count, elapsed / .seconds(1))
        }
    }
}
