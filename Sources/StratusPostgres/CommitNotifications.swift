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
    }

    /// Starts listening, then reads the event log's last id: when it is not `lastID`, returns at once,
    /// since a commit made before the listening began would otherwise go unnoticed; when it is, calls
    /// `waiting` and waits for a notification or `timeout`.
    public func wait(
        unlessLastIDIsNot lastID: Int64?, timeout: Duration, logger: Logger, waiting: @escaping @Sendable () -> Void = {}
    ) async throws -> Outcome {
        try await store.withDedicatedConnection { connection in
            try await connection.listen(on: EventLog.channel) { notifications in
                let rows = try await connection.query("SELECT coalesce(max(id), 0)::bigint FROM events", logger: logger)
                var current: Int64 = 0
                for try await id in rows.decode(Int64.self) { current = id }
                guard current == lastID else { return .changed(lastID: current) }
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
                    return outcome
                }
            }
        }
    }
}
