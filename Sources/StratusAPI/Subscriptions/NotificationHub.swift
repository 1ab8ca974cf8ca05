import Foundation
import Logging
import ServiceLifecycle
import StratusPostgres
import Synchronization

/// Wakes the couriers (long polls and WebSockets) of a user when the worker logs a notification for
/// them: one listening connection per API process, whatever the number of waiting clients.
public final class NotificationHub: Service, Sendable {
    let notifications: NotificationStore
    let logger: Logger
    private let waiters = Mutex<[String: [ObjectIdentifier: Wakeup]]>([:])

    /// Creates the hub over the store.
    public init(store: PostgresStore, logger: Logger) {
        self.notifications = NotificationStore(store: store)
        self.logger = logger
    }

    /// Listens until shutdown, listening again after a lost connection (waking everybody then, since
    /// a notification may have gone by unheard).
    public func run() async throws {
        try await cancelWhenGracefulShutdown { [self] in
            while !Task.isCancelled {
                do {
                    try await notifications.listen(logger: logger) { [self] key in wake(key) }
                } catch where !Task.isCancelled {
                    logger.warning("notification listener lost its connection; listening again", metadata: ["error": "\(error)"])
                }
                wake("")
                try? await Task.sleep(for: .milliseconds(500))
            }
        }
    }

    /// A registration for the next notification of one user. Register before reading the log, then
    /// wait: a notification logged in between is not missed.
    public final class Wakeup: Sendable {
        private let state = Mutex<(fired: Bool, continuation: CheckedContinuation<Void, Never>?)>((false, nil))

        func fire() {
            let continuation = state.withLock { state -> CheckedContinuation<Void, Never>? in
                state.fired = true
                defer { state.continuation = nil }
                return state.continuation
            }
            continuation?.resume()
        }

        /// Waits until fired, `timeout` passes, or the task is cancelled.
        public func wait(timeout: Duration) async {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { [self] in
                    await withTaskCancellationHandler {
                        await withCheckedContinuation { continuation in
                            let resumeNow = state.withLock { state -> Bool in
                                if state.fired { return true }
                                state.continuation = continuation
                                return false
                            }
                            if resumeNow { continuation.resume() }
                        }
                    } onCancel: { [self] in fire() }
                }
                group.addTask { try? await Task.sleep(for: timeout) }
                await group.next()
                group.cancelAll()
            }
        }
    }

    /// Registers for the next notification of `key` (`container/environment/subscriber`); call
    /// `cancel` when done waiting.
    public func register(_ key: String) -> Wakeup {
        let wakeup = Wakeup()
        waiters.withLock { $0[key, default: [:]][ObjectIdentifier(wakeup)] = wakeup }
        return wakeup
    }

    /// Forgets a registration.
    public func cancel(_ wakeup: Wakeup, key: String) {
        waiters.withLock { waiters in
            waiters[key]?[ObjectIdentifier(wakeup)] = nil
            if waiters[key]?.isEmpty == true { waiters[key] = nil }
        }
    }

    /// Wakes the waiters of `key`; everybody's for "".
    func wake(_ key: String) {
        let woken: [Wakeup] = waiters.withLock { waiters in
            if key.isEmpty { return waiters.values.flatMap(\.values) }
            return Array(waiters[key]?.values ?? [:].values)
        }
        for wakeup in woken { wakeup.fire() }
    }

    /// How many clients wait (for /metrics and tests).
    public var waiting: Int { waiters.withLock { $0.values.reduce(0) { $0 + $1.count } } }
}
