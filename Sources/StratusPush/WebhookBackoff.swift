/// How long to wait before the next webhook attempt: exponential, capped, with full jitter
/// (uniform between zero and the cap), so receivers that failed together are not retried together.
public enum WebhookBackoff {
    /// The wait after `attempt` (1 for the first) failed: uniform in `0...min(maximum, base·2^(attempt−1))`,
    /// drawn from `jitter`.
    public static func delay<Random: RandomNumberGenerator>(
        afterAttempt attempt: Int, base: Duration, maximum: Duration, jitter: inout Random
    ) -> Duration {
        let ceiling = ceiling(afterAttempt: attempt, base: base, maximum: maximum)
        guard ceiling > .zero else { return .zero }
        let fraction = Double(jitter.next() >> 11) / Double(UInt64(1) << 53)  // [0, 1)
        return ceiling * fraction
    }

    /// `delay` with the system's random source.
    public static func delay(afterAttempt attempt: Int, base: Duration, maximum: Duration) -> Duration {
        var random = SystemRandomNumberGenerator()
        return delay(afterAttempt: attempt, base: base, maximum: maximum, jitter: &random)
    }

    /// The upper bound of the wait after `attempt`: `min(maximum, base·2^(attempt−1))`.
    public static func ceiling(afterAttempt attempt: Int, base: Duration, maximum: Duration) -> Duration {
        guard base > .zero, maximum > .zero else { return .zero }
        // Past 2^62 the product overflows; by then the cap has long been reached.
        let exponent = min(max(attempt, 1) - 1, 62)
        let factor = Double(UInt64(1) << UInt64(exponent))
        if base / .seconds(1) * factor >= maximum / .seconds(1) { return maximum }
        return base * factor
    }
}
