import Foundation

/// When the client sends a request again: only for errors the server calls passing
/// (`TRY_AGAIN_LATER`, `THROTTLED`, `ZONE_BUSY`) or when no answer came, at most `maxAttempts`
/// times in all, waiting at least the server's `retryAfter`, else exponentially longer from
/// `baseDelay` up to `maxDelay`, each wait stretched by a random part of `jitter` so that many
/// devices told the same thing do not come back at the same moment.
public struct RetryPolicy: Sendable, Hashable {
    public var maxAttempts: Int
    /// Seconds.
    public var baseDelay: Double
    /// Seconds; a server's `retryAfter` longer than this is still honoured.
    public var maxDelay: Double
    /// The largest fraction a wait is stretched by (0: no jitter).
    public var jitter: Double

    public init(maxAttempts: Int = 4, baseDelay: Double = 0.25, maxDelay: Double = 30, jitter: Double = 0.5) {
        self.maxAttempts = max(1, maxAttempts)
        self.baseDelay = max(0, baseDelay)
        self.maxDelay = max(0, maxDelay)
        self.jitter = min(max(0, jitter), 1)
    }

    /// Never retry.
    public static let none = RetryPolicy(maxAttempts: 1)

    /// The wait in seconds before attempt `attempt + 1` after attempt `attempt` (1-based) failed
    /// with `retryAfter`; `random` is in 0..<1.
    public func delay(afterAttempt attempt: Int, retryAfter: Int?, random: Double) -> Double {
        let exponent = min(max(attempt - 1, 0), 30)
        let backoff = min(maxDelay, baseDelay * Double(1 << exponent))
        let floor = retryAfter.map { Double(max($0, 0)) } ?? 0
        let wait = max(floor, backoff)
        return wait * (1 + jitter * min(max(random, 0), 1))
    }

    /// Whether attempt `attempt` (1-based), which failed with `error`, is tried again.
    public func shouldRetry(_ error: StratusKitError, afterAttempt attempt: Int) -> Bool {
        error.isRetryable && attempt < maxAttempts
    }
}
