import Foundation
import Logging
import Metrics
import ServiceLifecycle
import StratusCore
import StratusPostgres
import StratusPush
import Synchronization
import Tracing

/// Sends one claimed delivery over its channel (webhook, APNs) and says what became of it.
public protocol PushChannel: Sendable {
    /// The channel name in `notification_deliveries.channel`.
    var name: String { get }
    /// One attempt; never throws: every failure is an outcome.
    func send(_ delivery: DeliveryStore.Due) async -> DeliveryStore.Result
}

/// How the dispatcher sends.
public struct DeliveryConfiguration: Sendable {
    /// Deliveries in flight at once.
    public var concurrency = 32
    /// Deliveries in flight for one target (a webhook, a device), so a slow receiver holds only a few slots.
    public var perTarget = 4
    /// Attempts before a delivery is dead-lettered.
    public var maxAttempts = 8
    /// The first retry's delay; each further one doubles, with full jitter.
    public var backoffBase: Duration = .seconds(1)
    /// The longest delay between attempts.
    public var backoffMaximum: Duration = .seconds(300)
    /// How long a claimed delivery is reserved for its sender.
    public var lease: Duration = .seconds(60)
    /// The longest the dispatcher sleeps without looking for due deliveries.
    public var idleWake: Duration = .seconds(30)
    /// How often it looks for new deliveries while others are in flight.
    public var busyPoll: Duration = .milliseconds(250)

    /// The defaults.
    public init() {}
}

/// Sends the notification log's pending deliveries: claims the due ones, sends them concurrently,
/// records each outcome (retries with exponential backoff and jitter, dead-lettering after
/// `maxAttempts`). Evaluation never waits for it, and one slow receiver never holds up others.
public final class DeliveryDispatcher: Service, Sendable {
    let deliveries: DeliveryStore
    let store: PostgresStore
    let channels: [String: any PushChannel]
    let configuration: DeliveryConfiguration
    let logger: Logger
    let closing: @Sendable () async -> Void
    private let lastCounts = Mutex<ContinuousClock.Instant?>(nil)

    /// Creates a dispatcher over the channels it can send on (deliveries of other channels wait);
    /// `closing` runs when it stops (to close the channels' clients).
    public init(store: PostgresStore, channels: [any PushChannel], configuration: DeliveryConfiguration = .init(), logger: Logger,
                closing: @escaping @Sendable () async -> Void = {}) {
        self.closing = closing
        self.store = store
        self.deliveries = DeliveryStore(store: store)
        self.channels = Dictionary(channels.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        self.configuration = configuration
        self.logger = logger
    }

    public func run() async throws {
        try await cancelWhenGracefulShutdown { [self] in
            while !Task.isCancelled {
                do {
                    try await dispatch()
                } catch where Task.isCancelled {
                    // Graceful shutdown cancels the loop wherever it waits: that is its end, not a
                    // failure (a service that throws makes the whole process exit with one). A
                    // delivery cut off mid-send is claimed again when its lease runs out.
                    break
                } catch {
                    logger.warning("delivery dispatch failed; trying again", metadata: ["error": "\(PostgresStore.describe(error))"])
                    try? await Task.sleep(for: .seconds(1))
                }
            }
        }
        await closing()
    }

    /// Keeps up to `concurrency` deliveries in flight, claiming more as soon as slots free up, and
    /// never more than `perTarget` for one target: a receiver that answers slowly (or never, until
    /// the sender's timeout) holds only its own slots while everybody else's deliveries go on.
    func dispatch() async throws {
        try await withThrowingTaskGroup(of: String?.self) { group in
            var inFlight: [String: Int] = [:]
            var total = 0
            var ticking = false
            while !Task.isCancelled {
                let free = configuration.concurrency - total
                if free > 0 {
                    let saturated = inFlight.filter { $0.value >= configuration.perTarget }.map(\.key)
                    let due = try await deliveries.claim(
                        limit: free, perTarget: configuration.perTarget, excluding: saturated, lease: configuration.lease, logger: logger)
                    for delivery in due {
                        inFlight[delivery.target, default: 0] += 1
                        total += 1
                        group.addTask { [self] in
                            try await attempt(delivery)
                            return delivery.target
                        }
                    }
                    if !due.isEmpty { continue }
                }
                if total == 0 {
                    try await idle()
                    continue
                }
                // Something is in flight: go on when one finishes, or look for new deliveries shortly.
                if !ticking {
                    ticking = true
                    group.addTask { [interval = configuration.busyPoll] in
                        try await Task.sleep(for: interval)
                        return nil
                    }
                }
                guard let finished = try await group.next() else { continue }
                if let target = finished {
                    total -= 1
                    inFlight[target, default: 1] -= 1
                    if inFlight[target] == 0 { inFlight[target] = nil }
                } else {
                    ticking = false
                }
            }
        }
    }

    /// One attempt, in a span of the trace of the write that caused the notification when it has one.
    func attempt(_ delivery: DeliveryStore.Due) async throws {
        guard let context = TraceContext.context(continuing: delivery.traceParent) else { return try await send(delivery) }
        let span = startSpan("deliver \(delivery.channel)", context: context, ofKind: .producer)
        defer { span.end() }
        if span.isRecording {
            span.attributes["stratus.notification.id"] = delivery.notificationID.uuidString.lowercased()
            span.attributes["stratus.delivery.attempt"] = delivery.attempts + 1
        }
        try await InstrumentationContext.$current.withValue(span.context) { try await send(delivery) }
    }

    private func send(_ delivery: DeliveryStore.Due) async throws {
        guard let channel = channels[delivery.channel] else {
            try await deliveries.complete(delivery, .retry(reason: "no \(delivery.channel) sender in this process", delay: configuration.backoffMaximum), logger: logger)
            return
        }
        var result = await channel.send(delivery)
        let attempts = delivery.attempts + 1
        if case .retry(let reason, let delay) = result {
            if attempts >= configuration.maxAttempts {
                result = .dead(reason: "gave up after \(attempts) attempts: \(reason)")
            } else {
                result = .retry(reason: reason, delay: max(delay, WebhookBackoff.delay(afterAttempt: attempts, base: configuration.backoffBase, maximum: configuration.backoffMaximum)))
            }
        }
        let dimensions = [("channel", delivery.channel)]
        switch result {
        case .delivered:
            Counter(label: "stratus_notification_deliveries_total", dimensions: dimensions + [("outcome", "delivered")]).increment()
            // From the notification's logging to its acknowledgement: what a receiver waited.
            Gauge(label: "stratus_notification_delivery_lag_seconds", dimensions: dimensions)
                .record(max(0, Date().timeIntervalSince1970 - Double(delivery.loggedAt) / 1000))
        case .retry:
            Counter(label: "stratus_notification_deliveries_total", dimensions: dimensions + [("outcome", "retry")]).increment()
        case .dead(let reason), .unregistered(let reason):
            Counter(label: "stratus_notification_deliveries_total", dimensions: dimensions + [("outcome", "dead")]).increment()
            logger.warning("delivery given up", metadata: [
                "channel": "\(delivery.channel)", "notification": "\(delivery.notificationID)", "reason": "\(reason)",
            ])
        }
        try await deliveries.complete(delivery, result, logger: logger)
    }

    /// Publishes the subscription and pending-delivery counts (at most once per `idleWake`).
    func recordCounts() async throws {
        let now = ContinuousClock.now
        guard lastCounts.withLock({ last in
            if let previous = last, now - previous < configuration.idleWake { return false }
            last = now
            return true
        }) else { return }
        for (type, count) in try await SubscriptionStore(store: store).counts(logger: logger) {
            Gauge(label: "stratus_subscriptions", dimensions: [("type", type)]).record(count)
        }
        for (channel, states) in try await deliveries.counts(logger: logger) {
            Gauge(label: "stratus_notification_deliveries_pending", dimensions: [("channel", channel)]).record(states["pending"] ?? 0)
        }
    }

    /// Waits for a commit that added deliveries, the next due retry, or `idleWake`.
    func idle() async throws {
        try await recordCounts()
        try await deliveries.waitForDeliveries(upTo: configuration.idleWake, logger: logger)
    }
}
