import Foundation
import PostgresNIO
import StratusCore
import Synchronization

/// Ends the work on a pooled connection when the connection closes.
///
/// The database client never completes a statement sent on a connection that has already closed
/// (the statement's promise is dropped with the failed write): when PostgreSQL goes away between two
/// statements of one request — a ROLLBACK after a failed statement, the next statement of a
/// transaction — that request would wait for ever. So every leased piece of work runs in a task of
/// its own, watched: when its connection closes the task is cancelled, given `grace` to end (a
/// statement in flight fails at once), and then abandoned, and the caller is answered
/// `TRY_AGAIN_LATER`. An abandoned task holds only its closed connection and waits on nothing that
/// can wake it; one per stuck statement, only while the database is going away.
///
/// One watch per connection, registered on the connection's close once (not once per lease, which
/// would pile callbacks on a long-lived connection).
package final class ConnectionWatches: Sendable {
    private let watches = Mutex<[PostgresConnection.ID: ConnectionWatch]>([:])
    package let grace: Duration

    package init(grace: Duration) {
        self.grace = grace
    }

    /// How many connections are watched: those leased at least once and not yet closed.
    package var count: Int { watches.withLock { $0.count } }

    /// Runs `work` on `connection` until it ends, or until the connection closes and `grace` passes.
    package func run<T: Sendable>(
        on connection: PostgresConnection, retryAfter: Int, _ work: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        let watch = watch(connection)
        let outcome = OneShot<T>()
        let unavailable = PostgresErrors.unavailable(retryAfter)
        // Not a child task: a statement stuck on a closed connection never ends, and a task group
        // (or a service's) would wait for it for ever. The caller awaits it until the close and
        // the grace; only the abandoned statement's task outlives its caller.
        let task = Task {
            do {
                outcome.resume(with: .success(try await work(connection)))
            } catch let error where connection.isClosed && !(error is StratusError) {
                // Whatever ended it (the cancellation below, a failed statement), the cause is the close.
                outcome.resume(with: .failure(unavailable))
            } catch {
                outcome.resume(with: .failure(error))
            }
        }
        let grace = grace
        let stop = watch.onClose {
            task.cancel()
            // The grace period on the connection's event loop, not in a task of its own.
            _ = LoopTimer.schedule(after: grace, on: connection.eventLoop) {
                if outcome.resume(with: .failure(unavailable)) {
                    ConnectionMetrics.abandonedStatements.increment()
                }
            }
        }
        defer { watch.remove(stop) }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in outcome.start(continuation) }
        } onCancel: {
            task.cancel()
        }
    }

    private func watch(_ connection: PostgresConnection) -> ConnectionWatch {
        let (watch, isNew) = watches.withLock { watches in
            if let watch = watches[connection.id] { return (watch, false) }
            let watch = ConnectionWatch()
            watches[connection.id] = watch
            return (watch, true)
        }
        if isNew {
            let id = connection.id
            connection.closeFuture.whenComplete { [weak self] _ in
                self?.watches.withLock { watches in
                    if watches[id] === watch { watches[id] = nil }
                }
                watch.close()
            }
        }
        return watch
    }
}

/// The calls running on one connection, told when it closes.
/// (Its bookkeeping: `WatchState`.)
final class ConnectionWatch: Sendable {
    private let state = Mutex(WatchState<@Sendable () -> Void>())

    /// Calls `handler` once when the connection closes (at once if it has). Returns the key to remove it.
    func onClose(_ handler: @escaping @Sendable () -> Void) -> Int {
        guard let key = state.withLock({ $0.add(handler) }) else {
            handler()
            return 0
        }
        return key
    }

    func remove(_ key: Int) {
        state.withLock { _ = $0.remove(key) }
    }

    func close() {
        for handler in state.withLock({ $0.close() }) { handler() }
    }
}

/// A result delivered at most once to a continuation that may be attached before or after it
/// (its bookkeeping: `OneShotState`).
package final class OneShot<T: Sendable>: Sendable {
    private let state = Mutex(OneShotState<CheckedContinuation<T, any Error>, Result<T, any Error>>())

    package init() {}

    /// Attaches the continuation; resumes it at once when the result is already here.
    package func start(_ continuation: CheckedContinuation<T, any Error>) {
        if case .deliver(let result) = state.withLock({ $0.start(continuation) }) { continuation.resume(with: result) }
    }

    /// Delivers `result` unless one was delivered already: true when this one was.
    @discardableResult
    package func resume(with result: Result<T, any Error>) -> Bool {
        switch state.withLock({ $0.resume(result) }) {
        case .ignored: return false
        case .kept: return true
        case .deliver(let continuation):
            continuation.resume(with: result)
            return true
        }
    }
}
