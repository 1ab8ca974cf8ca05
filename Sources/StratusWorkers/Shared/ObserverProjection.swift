import Logging
import StratusCore
import StratusPostgres
import Synchronization

/// A worker whose own effects are not built yet: it consumes and checkpoints every event, so the
/// pipeline to it is exercised and its position is real when its effects arrive. Each event is
/// logged at debug level only; at info level it says at most once per `summaryInterval`, when
/// events arrived, how many it received. Nobody waits for its (absent) effects: background urgency.
public struct ObserverProjection: Projection {
    public let name: String
    public let urgency = ProjectionUrgency.background
    let summary: EventTally

    /// Creates an observer under a worker name.
    public init(name: String, summaryInterval: Duration = .seconds(60)) {
        self.name = name
        summary = EventTally(interval: summaryInterval)
    }

    public func apply(_ event: EventEnvelope, in transaction: Transaction, logger: Logger) async throws {
        logger.debug("event received", metadata: ["event": "\(event.id)", "type": "\(event.type)", "zone": "\(event.zoneKey)"])
        if let tally = summary.count() {
            logger.info("events received", metadata: ["events": "\(tally.events)", "seconds": "\(Int(tally.seconds.rounded()))"])
        }
    }

    public func reset(in transaction: Transaction, logger: Logger) async throws {}
}

/// Counts events and says, at most once per interval, how many arrived since it last said so.
final class EventTally: Sendable {
    let interval: Duration
    private let state: Mutex<(count: Int, since: ContinuousClock.Instant)>

    init(interval: Duration, now: ContinuousClock.Instant = .now) {
        self.interval = interval
        state = Mutex((0, now))
    }

    /// Counts one event; returns the count and the seconds it covers when the interval has passed
    /// (and starts a new one), nil otherwise.
    func count(now: ContinuousClock.Instant = .now) -> (events: Int, seconds: Double)? {
        state.withLock { state in
            state.count += 1
            let elapsed = now - state.since
            guard elapsed >= interval else { return nil }
            defer { state = (0, now) }
            return (state.count, elapsed / .seconds(1))
        }
    }
}
