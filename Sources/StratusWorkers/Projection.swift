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
    /// Deletes everything the projection owns, before a rebuild.
    func reset(in transaction: Transaction, logger: Logger) async throws
}
