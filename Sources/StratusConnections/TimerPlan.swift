/// When the connection runtime's timers run, decided without a clock or an event loop
/// (`LoopTimer` and `ConnectionPool` schedule them).
public enum TimerPlan {
    /// A repeated timer: first after `initialDelay`, then every `interval`.
    public struct Repeating: Sendable, Equatable {
        public var initialDelay: Duration
        public var interval: Duration

        public init(initialDelay: Duration, interval: Duration) {
            self.initialDelay = initialDelay
            self.interval = interval
        }
    }

    /// When a pool sweeps its idle connections (`PoolState.closeIdle(now:)`): first after the idle
    /// timeout, then every half of it, so a connection is closed at most half a timeout late; never
    /// when every connection is kept open (nothing could be closed).
    public static func idleSweep(_ settings: PoolState.Settings) -> Repeating? {
        guard settings.minConnections < settings.maxConnections else { return nil }
        return Repeating(initialDelay: settings.idleTimeout, interval: settings.idleTimeout / 2)
    }

    /// `duration` in whole nanoseconds for an event loop's timer: a negative one is none, and one
    /// longer than a timer holds is the longest it holds.
    public static func nanoseconds(_ duration: Duration) -> Int64 {
        guard duration > .zero else { return 0 }
        let (seconds, attoseconds) = duration.components
        let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        guard !overflow else { return .max }
        let (total, overflowAgain) = whole.addingReportingOverflow(attoseconds / 1_000_000_000)
        return overflowAgain ? .max : total
    }
}
