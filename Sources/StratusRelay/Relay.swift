import Foundation
import Logging
import Metrics
import ServiceLifecycle
import StratusCore
import StratusKafka
import StratusPostgres
import Tracing

/// How the relay publishes.
public struct RelayConfiguration: Sendable {
    /// The topic zone events go to.
    public var topic: String = "stratus.zone-events"
    /// Partitions the relay creates the topic with.
    public var partitions: Int = 8
    /// How long the broker keeps a message of the topic the relay creates (its `retention.ms`), the
    /// event log's retention window; nil leaves the broker's default.
    public var retention: Duration?
    /// Events read and sent per round.
    public var batchSize: Int = 500
    /// How long to wait for a notification before looking for events anyway.
    public var pollInterval: Duration = .milliseconds(500)
    /// How often the topic is checked for lost messages (a broker that came back empty).
    public var verifyInterval: Duration = .seconds(10)
    /// How long one batch may wait for the broker's acknowledgements.
    public var sendTimeout: Duration = .seconds(30)
    /// The longest pause between retries when the broker is away.
    public var maxBackoff: Duration = .seconds(5)

    /// The defaults.
    public init() {}
}

/// Publishes the event log to Kafka: in id order, keyed by zone, marking rows published only after
/// the broker acknowledged them. Exactly one relay across processes publishes (an advisory lock);
/// the others wait as standbys.
public final class Relay: Service, Sendable {
    let store: PostgresStore
    let kafka: KafkaClientConfiguration
    let configuration: RelayConfiguration
    let logger: Logger
    let wakeup = Signal()

    /// Creates a relay.
    public init(store: PostgresStore, kafka: KafkaClientConfiguration, configuration: RelayConfiguration = .init(), logger: Logger) {
        self.store = store
        var kafka = kafka
        // The broker's verdict on every message arrives within one send.
        let milliseconds = configuration.sendTimeout / .milliseconds(1)
        kafka.messageTimeoutMilliseconds = milliseconds <= 0 ? 0 : milliseconds < Double(Int32.max) ? Int(milliseconds) : Int(Int32.max)
        self.kafka = kafka
        self.configuration = configuration
        self.logger = logger
    }

    /// Runs until graceful shutdown or cancellation.
    public func run() async throws {
        do {
            try await cancelWhenGracefulShutdown { [self] in
                try await withThrowingDiscardingTaskGroup { group in
                    group.addTask { try await self.listenForCommits() }
                    group.addTask { try await self.publishWhileLeader() }
                }
            }
        } catch where Task.isShuttingDownGracefully || Task.isCancelled {
            // Graceful shutdown cancels the relay wherever it waits (a send, a backoff after the
            // broker went away): the relay's end, not a failure — a service that throws makes the
            // process exit 1. What it had not published is published by the next relay.
        }
    }

    private func listenForCommits() async throws {
        while !Task.isCancelled {
            do {
                try await RelayStore(store: store).listen(logger: logger) { [wakeup] in wakeup.fire() }
            } catch where !Task.isCancelled {
                logger.warning("relay lost its notification connection; polling meanwhile", metadata: ["error": "\(error)"])
                try await Task.sleep(for: configuration.pollInterval)
            }
        }
    }

    private func publishWhileLeader() async throws {
        let relayStore = RelayStore(store: store)
        while !Task.isCancelled {
            do {
                let led: Void? = try await relayStore.whileLeader(logger: logger) { [self] in
                    logger.info("relay is the active publisher", metadata: ["topic": "\(configuration.topic)"])
                    try await publishLoop()
                }
                if led == nil {
                    Relay.standby.record(1)
                    try await Task.sleep(for: configuration.pollInterval * 4)
                }
            } catch where !Task.isCancelled {
                logger.warning("relay round failed; retrying", metadata: ["error": "\(error)"])
                try await Task.sleep(for: configuration.maxBackoff)
            }
        }
    }

    /// Publishes until cancelled; recreates the producer after fatal errors.
    func publishLoop() async throws {
        Relay.standby.record(0)
        // Released on the way out, the producer is torn down by its own poll thread.
        var producer: KafkaProducer?
        var needsVerify = true
        var lastVerify = ContinuousClock.now
        var lastBacklog = ContinuousClock.now
        var backoff = Duration.milliseconds(100)
        let eventLog = EventLog(store: store)

        while !Task.isCancelled {
            do {
                if producer == nil { producer = try KafkaProducer(configuration: kafka, logger: logger) }
                if needsVerify || ContinuousClock.now - lastVerify > configuration.verifyInterval {
                    try await verifyTopic()
                    needsVerify = false
                    lastVerify = .now
                }
                let batch = try await eventLog.unpublished(limit: configuration.batchSize, logger: logger)
                if batch.isEmpty {
                    // Nothing is waiting: the backlog is empty without asking the database.
                    Relay.backlog.record(0)
                    Relay.backlogAge.record(0)
                    await wakeup.wait(timeout: configuration.pollInterval)
                    continue
                }
                if ContinuousClock.now - lastBacklog > .seconds(1) {
                    await updateBacklog(eventLog)
                    lastBacklog = .now
                }
                let failures = try await publish(batch, with: producer!, eventLog: eventLog)
                if failures > 0 {
                    // A producer whose messages fail may be wedged on a broker that lost its state
                    // (producer ids, sequence numbers): a new one starts clean; its queue is purged.
                    await producer?.close()
                    producer = nil
                    needsVerify = true
                    try await Task.sleep(for: backoff)
                    backoff = min(backoff * 2, configuration.maxBackoff)
                } else {
                    backoff = .milliseconds(100)
                    if batch.count < configuration.batchSize {
                        // The queue held only this batch, now sent: wait for the next commit's
                        // notification instead of asking again (one round trip a quiet write spared).
                        // A commit made since the batch was read has fired the signal, so the wait
                        // returns at once; without notifications it ends after the poll interval, as
                        // an empty read's wait would.
                        Relay.backlog.record(0)
                        Relay.backlogAge.record(0)
                        await wakeup.wait(timeout: configuration.pollInterval)
                    }
                }
            } catch let error as KafkaError {
                logger.warning("relay cannot reach the broker; retrying", metadata: ["error": "\(error)", "fatal": "\(error.isFatal)"])
                if error.isFatal || producer?.fatalError != nil {
                    await producer?.close()
                    producer = nil
                }
                needsVerify = true
                try await Task.sleep(for: backoff)
                backoff = min(backoff * 2, configuration.maxBackoff)
            }
        }
    }

    /// Sends one batch; marks published, per zone, only the events before that zone's first failure so
    /// a zone's events are never acknowledged out of order. Returns the number of failures.
    private func publish(_ batch: [EventEnvelope], with producer: KafkaProducer, eventLog: EventLog) async throws -> Int {
        let messages = batch.map { event in
            KafkaOutgoingMessage(topic: configuration.topic, key: Array(event.zoneKey.rawValue.utf8), value: Array(EventCoding.encodeEnvelope(event)))
        }
        // A publish span for each event that carries a trace (none when tracing is off), in its trace.
        let spans: [(any Span)?] = !batch.contains(where: { $0.causation.traceParent != nil }) ? [] : batch.map { event in
            TraceContext.context(of: event).map { startSpan("publish \(configuration.topic)", context: $0, ofKind: .producer) }
        }
        let results: [Result<Void, KafkaError>]
        do {
            results = try await producer.send(messages, timeout: configuration.sendTimeout)
        } catch {
            for span in spans { span?.setStatus(SpanStatus(code: .error, message: "\(error)")); span?.end() }
            throw error
        }
        for (index, span) in spans.enumerated() {
            guard let span else { continue }
            if span.isRecording {
                span.attributes["messaging.system"] = "kafka"
                span.attributes["messaging.destination.name"] = configuration.topic
                span.attributes["stratus.event.id"] = batch[index].id
                span.attributes["stratus.event.type"] = batch[index].type.rawValue
            }
            if case .failure(let error) = results[index] { span.setStatus(SpanStatus(code: .error, message: error.message)) }
            span.end()
        }
        var failedZones = Set<ZoneKey>()
        var published: [Int64] = []
        var rejected: [(id: Int64, reason: String)] = []
        var failures = 0
        for (event, result) in zip(batch, results) {
            if failedZones.contains(event.zoneKey) { failures += 1; continue }
            switch result {
            case .success: published.append(event.id)
            case .failure(let error) where error.isMessageRejected:
                // Sending it again can never succeed: it gets its terminal state and the zone moves on
                // (workers read it from the event log when they fill the gap it leaves).
                rejected.append((event.id, error.message))
                logger.error("broker refused an event for good; marked rejected", metadata: ["event": "\(event.id)", "zone": "\(event.zoneKey)", "error": "\(error)"])
            case .failure(let error):
                failures += 1
                failedZones.insert(event.zoneKey)
                logger.warning("broker refused an event; it will be sent again", metadata: ["event": "\(event.id)", "error": "\(error)"])
            }
        }
        try await eventLog.markRejected(rejected, logger: logger)
        try await eventLog.markPublished(published, logger: logger)
        Relay.published.increment(by: published.count)
        Relay.rejected.increment(by: rejected.count)
        if let last = batch.last { Relay.lastPublishedID.record(last.id) }
        return failures
    }

    /// Makes sure the topic exists and still holds what it held: a partition whose high watermark went
    /// down (or a partition that vanished) means the broker came back empty, and the relay publishes
    /// the whole event log again. Watermarks, not message counts, are compared because brokers differ
    /// in how they count offsets of batched messages; every broker keeps a partition's watermark rising.
    /// A topic that holds nothing while the log holds published events lost them too, whatever
    /// watermarks were saved: the broker came back empty before the relay saved any (it saves them
    /// every `verifyInterval`), a database restored to before they were saved, or a new topic.
    func verifyTopic() async throws {
        let admin = KafkaAdmin(configuration: kafka, logger: logger)
        let settings = configuration.retention.map { ["retention.ms": String(Int64(($0 / .milliseconds(1)).rounded()))] } ?? [:]
        try await admin.createTopic(configuration.topic, partitions: configuration.partitions, settings: settings, timeout: .seconds(10))
        let current = try await admin.watermarks(topic: configuration.topic, timeout: .seconds(10)).mapValues(\.high)
        let relayStore = RelayStore(store: store)
        let last = try await relayStore.watermarks(topic: configuration.topic, logger: logger)
        var lost = last.contains { partition, high in (current[partition] ?? 0) < high }
        if !lost, current.values.allSatisfy({ $0 == 0 }) {
            lost = try await relayStore.holdsPublishedEvents(logger: logger)
        }
        if lost {
            let count = try await relayStore.refill(topic: configuration.topic, logger: logger)
            logger.warning("topic lost messages (the broker came back empty): publishing the event log again",
                           metadata: ["topic": "\(configuration.topic)", "events": "\(count)"])
            Relay.refills.increment()
        }
        try await relayStore.saveWatermarks(current, topic: configuration.topic, logger: logger)
    }

    private func updateBacklog(_ eventLog: EventLog) async {
        if let backlog = try? await eventLog.backlog(logger: logger) {
            Relay.backlog.record(backlog.count)
            Relay.backlogAge.record(backlog.oldestAgeSeconds)
        }
    }

    static let published = Counter(label: "stratus_relay_published_total")
    static let refills = Counter(label: "stratus_relay_topic_refills_total")
    static let rejected = Counter(label: "stratus_relay_rejected_events_total")
    static let backlog = Gauge(label: "stratus_relay_backlog_events")
    static let backlogAge = Gauge(label: "stratus_relay_backlog_oldest_seconds")
    static let lastPublishedID = Gauge(label: "stratus_relay_last_published_event_id")
    static let standby = Gauge(label: "stratus_relay_standby")
}
