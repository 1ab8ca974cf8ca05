import Logging
import PostgresNIO

/// Waiting for the next commit that appends events (the notification on `EventLog.channel`), for a
/// process with nothing to do until then. It listens only while it waits, on a connection of its own
/// (never one of the pool's): a listener that stayed would be woken by every commit of a busy database.
public struct CommitNotifications: Sendable {
    let store: PostgresStore

    /// Creates the waiter.
    public init(store: PostgresStore) { self.store = store }

    /// How a wait ended.
    public enum Outcome: Sendable, Equatable {
        /// The event log's last id was not `lastID`: events were appended since the caller last looked
        /// (or it never looked). It did not wait; the id is the one it read.
        case changed(lastID: Int64)
        /// A commit appended events while it waited.
        case notified
        /// Nothing was appended until `timeout` (or the task was cancelled).
        case timedOut
        /// Events the relay has not yet published were in the event log (only with
        /// `unpublishedRecheck`): it waited at most that long, and the caller looks again without
        /// taking the log's last id as seen, since their publication notifies nobody.
        case unpublished
    }

    /// Starts listening, then reads the event log's last id: when it is not `lastID`, returns at once,
    /// since a commit made before the listening began would otherwise go unnoticed; when it is, calls
    /// `waiting` and waits for a notification or `timeout`.
    ///
    /// With `unpublishedRecheck`, for a caller that reads the events from the broker (a worker):
    /// while the relay has events to publish (after a PostgreSQL restart, or while the broker is
    /// away) it returns `.unpublished` after a notification or that long, whichever comes first, and
    /// never `.changed`: an id taken as seen while its events were not at the broker yet would let
    /// the caller wait for the next commit while they reach the broker unnoticed.
    public func wait(
        unlessLastIDIsNot lastID: Int64?, timeout: Duration, unpublishedRecheck: Duration? = nil, logger: Logger,
        waiting: @escaping @Sendable () -> Void = {}
    ) async throws -> Outcome {
        try await store.withDedicatedConnection { connection in
            try await connection.listen(on: EventLog.channel) { notifications in
                let rows = try await connection.query(
                    "SELECT coalesce(max(id), 0)::bigint, EXISTS (SELECT 1 FROM unpublished_events) FROM events", logger: logger)
                var current: Int64 = 0
                var unpublished = false
                for try await (id, pending) in rows.decode((Int64, Bool).self) { (current, unpublished) = (id, pending) }
                let recheck = unpublished ? unpublishedRecheck : nil
                if recheck == nil, current != lastID { return .changed(lastID: current) }
                let timeout = min(timeout, recheck ?? timeout)
                waiting()
                return await withTaskGroup(of: Outcome.self) { group in
                    group.addTask {
                        do {
                            for try await _ in notifications { return .notified }
                        } catch {}
                        return .timedOut
                    }
                    group.addTask {
                        try? await Task.sleep(for: timeout)
                        return .timedOut
                    }
                    let outcome = await group.next() ?? .timedOut
                    group.cancelAll()
                    return recheck == nil ? outcome : .unpublished
                }
            }
        }
    }
}
