import Logging
import StratusCore
import StratusPostgres

/// What a worker maintains from the event log: a pure reaction to each event, written through the
/// PostgreSQL adapter inside the transaction that also advances the worker's checkpoint.
public protocol Projection: Sendable {
    /// The worker's name: its consumer group and checkpoint owner, e.g. `stratus-indexer`.
    var name: String { get }
    /// Applies one event. Called at most once per sequenced event; unsequenced events may come again,
    /// so their effects must be idempotent.
    func apply(_ event: EventEnvelope, in transaction: Transaction, logger: Logger) async throws
    /// Applies events, in order, in one transaction: a worker's batch, each event once (same rules as
    /// one at a time). A projection whose statements can serve many events at once (sets, caches
    /// within the transaction) does so here; the default applies them one by one.
    func apply(_ events: [EventEnvelope], in transaction: Transaction, logger: Logger) async throws
    /// Deletes everything the projection owns, before a rebuild.
    func reset(in transaction: Transaction, logger: Logger) async throws
    /// Whether somebody waits for the projection's effects after a commit; decides how often its
    /// worker asks the broker for new events.
    var urgency: ProjectionUrgency { get }
    /// The table the projection fills in bursts, whose planner statistics its worker keeps fresh
    /// (`PlannerStatistics`); nil for none.
    var statisticsTable: String? { get }
}

/// How soon a projection's effects must follow the commit of an event.
public enum ProjectionUrgency: Sendable {
    /// Clients wait for it (the query index): its worker's fetches wait at the broker only briefly
    /// (`STRATUS_KAFKA_FETCH_WAIT_MS`), which bounds the commit-to-query lag.
    case interactive
    /// Nobody waits for it yet: its worker's fetches may wait long
    /// (`STRATUS_KAFKA_BACKGROUND_FETCH_WAIT_MS`), so it asks the broker far less often.
    case background
}

extension Projection {
    /// Interactive unless a projection says otherwise.
    public var urgency: ProjectionUrgency { .interactive }

    /// None unless a projection names one.
    public var statisticsTable: String? { nil }

    /// One by one.
    public func apply(_ events: [EventEnvelope], in transaction: Transaction, logger: Logger) async throws {
        for event in events { try await apply(event, in: transaction, logger: logger) }
    }
}

extension Projection {
    /// Applies a batch in order, except that each run of consecutive record deletions goes to
    /// `deletions` at once (a collector's or a cascade's deletions come hundreds at a time, and one
    /// statement per run costs what one per deletion would cost a hundredfold). Every other event,
    /// and whatever follows a run, is applied after the run, so the order a record's events take
    /// holds.
    ///
    /// Runs of consecutive record saves go to `saves` the same way, each read by `readingSave`
    /// (each projection reads only what it needs); a save it reads as nil concerns the projection
    /// not at all and is passed over. A run of deletions is read without the image of each record's
    /// last fields (`RecordDeleted.withoutImage`): no projection that takes runs needs it.
    func apply<Save>(
        _ events: [EventEnvelope], in transaction: Transaction, logger: Logger,
        readingSave: (EventEnvelope) throws -> Save?,
        saves: ([(saved: Save, event: EventEnvelope)]) async throws -> Void,
        deletions: ([(deleted: RecordDeleted, event: EventEnvelope)]) async throws -> Void
    ) async throws {
        var deleted: [(deleted: RecordDeleted, event: EventEnvelope)] = []
        var saved: [(saved: Save, event: EventEnvelope)] = []
        func flush() async throws {
            if !deleted.isEmpty { try await deletions(deleted) }
            if !saved.isEmpty { try await saves(saved) }
            deleted.removeAll()
            saved.removeAll()
        }
        for event in events {
            if event.type == RecordDeleted.eventType {
                if !saved.isEmpty { try await flush() }
                deleted.append((try RecordDeleted.withoutImage(event), event))
            } else if event.type == RecordSaved.eventType {
                if !deleted.isEmpty { try await flush() }
                if let save = try readingSave(event) { saved.append((save, event)) }
            } else {
                try await flush()
                try await apply(event, in: transaction, logger: logger)
            }
        }
        try await flush()
    }
}
