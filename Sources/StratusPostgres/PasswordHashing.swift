import Dispatch
import StratusCore
import Synchronization

/// Password hashing off Swift's cooperative threads. A PBKDF2 hash costs a tenth of a second or more
/// of CPU; run inline it would hold one of the few cooperative threads (one per core) and stall
/// every request behind it. Here hashes run one at a time on a queue of their own, so a burst of
/// sign-ins delays only sign-ins; beyond `maxWaiting` queued hashes a sign-in is `TRY_AGAIN_LATER`.
enum PasswordHashing {
    private static let queue = DispatchQueue(label: "stratus.password-hashing")
    private static let waiting = Atomic<Int>(0)
    /// Hashes that may wait for the queue at once.
    static let maxWaiting = 64

    /// Runs `body` on the hashing queue and returns its result.
    static func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        guard waiting.add(1, ordering: .relaxed).newValue <= maxWaiting else {
            waiting.subtract(1, ordering: .relaxed)
            throw StratusError(.tryAgainLater, "Too many sign-ins are in progress; retry shortly", retryAfter: 1)
        }
        defer { waiting.subtract(1, ordering: .relaxed) }
        return try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try body() }) }
        }
    }
}
