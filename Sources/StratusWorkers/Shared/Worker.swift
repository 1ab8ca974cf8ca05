import Foundation
import Logging
import Metrics
import ServiceLifecycle
import StratusCore
import StratusKafka
import StratusPostgres
import Synchronization

/// How a worker consumes.
public struct WorkerConfiguration: Sendable {
    /// The topic to consume.
    public var topic: String = "stratus.zone-events"
    /// Messages taken per poll.
    public var batchSize: Int = 500
    /// How long one poll waits for the first message.
    public var pollTimeout: Duration = .milliseconds(500)
    /// While events arrive less than this far apart, a batch waits up to this long after its first
    /// message for more (until `batchSize`), so a steady stream of single writes is applied a few
    /// events to a transaction rather than one; a lone event (the first after a pause longer than
    /// this) is applied at once. nil: every batch is what one poll finds.
    public var linger: Duration? = .milliseconds(10)
    /// The longest pause between retries of a failing apply.
    public var maxBackoff: Duration = .seconds(10)
    /// Attempts before an event that keeps failing to apply is set aside as a dead letter (an event
    /// that fails for good, e.g. for its data, is set aside at once).
    public var maxApplyAttempts: Int = 8
    /// The longest a batch may take when applied message by message; past it the worker commits what
    /// it has done and rejoins. Well inside the consumer's `max.poll.interval.ms`.
    public var maxBatchDuration: Duration = .seconds(60)
    /// How often an idle worker looks in the event log for zone events it never received.
    public var reconcileInterval: Duration = .seconds(30)
    /// How old a zone's last write must be before its missing events count as lost rather than in flight.
    public var reconcileGrace: Duration = .seconds(10)
    /// The longest one fetch waits at the broker for new events; nil: the Kafka configuration's.
    public var fetchWait: Duration?
    /// After this long without a message the worker stops fetching (its partitions paused) until a
    /// commit that appended events is notified, its next reconciliation is due, or
    /// `idleWakeInterval` passes; nil: it never stops.
    public var idleAfter: Duration? = .seconds(1)
    /// The longest an idle worker waits for a notification before it fetches again (events that
    /// reach the broker without one, e.g. published again after a broker restart, wait this long).
    public var idleWakeInterval: Duration = .seconds(10)
    /// The longest an idle worker waits while the relay still has events to publish (after a
    /// PostgreSQL restart, or while the broker is away): their publication notifies nobody, so it
    /// looks again this often until they are at the broker.
    public var unpublishedRecheck: Duration = .seconds(1)

    /// Appended to the consumer group's name (`<worker>.<suffix>`) when set: for several independent
    /// stacks sharing one broker (the tests, one per topic). Checkpoints keep the worker's name.
    public var consumerGroupSuffix: String?

    /// The defaults.
    public init() {}

    /// The consumer group of a worker of this name.
    public func consumerGroup(for worker: String) -> String {
        consumerGroupSuffix.map { "\(worker).\($0)" } ?? worker
    }
}

/// A worker: one consumer group reading zone events from Kafka and applying them to a projection.
/// Offsets are committed only after the effects (and the checkpoint) are durable; delivery is
/// at-least-once and the checkpoint makes it effectively once.
public final class Worker: Service, Sendable {
    let applier: Applier
    let store: PostgresStore
    let kafka: KafkaClientConfiguration
    let configuration: WorkerConfiguration
    let logger: Logger
    let lagGauge: Gauge
    let appliedCounter: Counter
    let deadLetterCounter: Counter
    let reconciledCounter: Counter
    /// Polled batches handled, and those whose one-transaction apply failed and went message by message.
    let batchCounter: Counter
    let fallbackCounter: Counter
    let lagSecondsGauge: Gauge
    /// How often the worker has paused fetching for want of events.
    let idlePauses = Atomic<Int>(0)
    /// 1 while the worker is paused for want of events.
    let idleGauge: Gauge
    /// Keeps the planner statistics of the table the projection fills fresh, if it names one.
    public let statistics: PlannerStatistics?

    /// Creates a worker for a projection.
    public init(projection: any Projection, store: PostgresStore, kafka: KafkaClientConfiguration, configuration: WorkerConfiguration = .init(), logger: Logger) {
        self.applier = Applier(projection: projection, store: store)
        self.statistics = projection.statisticsTable.map { PlannerStatistics(table: $0) }
        self.store = store
        self.kafka = kafka
        self.configuration = configuration
        var logger = logger
        logger[metadataKey: "worker"] = "\(projection.name)"
        self.logger = logger
        let dimensions = [("worker", projection.name)]
        self.lagGauge = Gauge(label: "stratus_consumer_lag_events", dimensions: dimensions)
        self.appliedCounter = Counter(label: "stratus_worker_applied_total", dimensions: dimensions)
        self.deadLetterCounter = Counter(label: "stratus_worker_dead_letters_total", dimensions: dimensions)
        self.reconciledCounter = Counter(label: "stratus_worker_reconciled_total", dimensions: dimensions)
        self.batchCounter = Counter(label: "stratus_worker_batches_total", dimensions: dimensions)
        self.fallbackCounter = Counter(label: "stratus_worker_batch_fallbacks_total", dimensions: dimensions)
        self.lagSecondsGauge = Gauge(label: "stratus_consumer_lag_seconds", dimensions: dimensions)
        self.idleGauge = Gauge(label: "stratus_worker_idle", dimensions: dimensions)
    }

    /// The worker's name: its checkpoints' owner and, unless a suffix is configured, its consumer group.
    public var groupID: String { applier.projection.name }

    /// The consumer group it reads in.
    public var consumerGroup: String { configuration.consumerGroup(for: groupID) }

    /// Consumes until graceful shutdown; reconnects with backoff when the broker is away.
    public func run() async throws {
        try await withThrowingDiscardingTaskGroup { group in
            if let statistics {
                group.addTask { [self] in await statistics.keep(store: store, logger: logger) }
            }
            defer {
                statistics?.stop()
                group.cancelAll()
            }
            try await consumeUntilShutdown()
        }
    }

    private func consumeUntilShutdown() async throws {
        try await cancelWhenGracefulShutdown { [self] in
            var backoff = Duration.milliseconds(200)
            while !Task.isCancelled {
                do {
                    try await consume()
                } catch let spent as BatchBudgetSpent {
                    logger.warning("a batch ran past its time budget; rejoining from what was committed", metadata: ["handled": "\(spent.handled)"])
                } catch where Task.isCancelled {
                    // Graceful shutdown cancels the consumer wherever it waits (a fetch, an apply, an
                    // idle wait): the worker's end, not a failure — a service that throws makes the
                    // process exit 1. What was not committed is delivered again.
                    break
                } catch {
                    logger.warning("worker consumer failed; reconnecting", metadata: ["error": "\(error)"])
                    try? await Task.sleep(for: backoff)
                    backoff = min(backoff * 2, configuration.maxBackoff)
                }
            }
        }
    }

    private func consume() async throws {
        var kafka = kafka
        if let fetchWait = configuration.fetchWait { kafka.fetchWaitMilliseconds = Int(fetchWait / .milliseconds(1)) }
        let group = consumerGroup
        let consumer = try KafkaConsumer(configuration: kafka, groupID: group, topics: [configuration.topic], logger: logger)
        logger.info("worker consuming", metadata: [
            "topic": "\(configuration.topic)", "group": "\(group)", "fetchWaitMs": "\(kafka.fetchWaitMilliseconds)",
        ])
        // Leaving the group is awaited, also after an error or a cancellation: a process that
        // exits while librdkafka is still tearing a consumer down can crash in librdkafka's own
        // thread clean-up (a SIGTERM'd stratus-subscriptions did, exit status 11).
        do {
            try await consume(from: consumer)
        } catch {
            await Self.leave(consumer)
            throw error
        }
        await Self.leave(consumer)
    }

    /// Leaves the group and destroys the consumer (on the consumer's own queue), shielded from the
    /// worker's cancellation so that a cancelled worker still waits for it to finish.
    private static func leave(_ consumer: KafkaConsumer) async {
        await withoutCancellation { await consumer.close() }
    }

    private func consume(from consumer: KafkaConsumer) async throws {
        var lastReconcile = ContinuousClock.now
        var lastMessage = ContinuousClock.now
        // The event log's last id when the worker last considered pausing.
        var lastEventID: Int64?
        // When the last batch's messages were in hand.
        var lastArrival: ContinuousClock.Instant?
        while !Task.isCancelled {
            var messages = try await consumer.poll(maxMessages: configuration.batchSize, timeout: configuration.pollTimeout)
            if !messages.isEmpty {
                let arrival = ContinuousClock.now
                // A stream of events (this one close behind the last): gather more of it first.
                if let linger = configuration.linger, let lastArrival, arrival - lastArrival < linger {
                    try await gather(into: &messages, from: consumer, until: arrival + linger)
                }
                lastArrival = .now
            }
            if messages.isEmpty {
                if let lag = try? consumer.lag() { lagGauge.record(lag) }
                if ContinuousClock.now - lastReconcile >= configuration.reconcileInterval {
                    try await reconcile()
                    lastReconcile = .now
                }
                if let idleAfter = configuration.idleAfter, ContinuousClock.now - lastMessage >= idleAfter, (try? consumer.lag()) == 0 {
                    // Nothing to read for a while: stop asking the broker (an idle fetch loop costs it
                    // a share of a core) until a commit says events are coming, or the next
                    // reconciliation is due. Only when the event log has not grown since the last
                    // look (an idle period ago) and the relay has published every event, so no event
                    // committed before the listening began can be waiting at the broker (while the
                    // relay has a backlog, e.g. after a PostgreSQL restart, it looks again every
                    // `unpublishedRecheck`); and not before the group has assigned partitions, which
                    // would be fetched while nobody polls.
                    let untilReconcile = configuration.reconcileInterval - (ContinuousClock.now - lastReconcile)
                    if try await consumer.pause() > 0 {
                        let outcome: CommitNotifications.Outcome
                        do {
                            outcome = try await CommitNotifications(store: store).wait(
                                unlessLastIDIsNot: lastEventID, timeout: max(.zero, min(configuration.idleWakeInterval, untilReconcile)),
                                unpublishedRecheck: configuration.unpublishedRecheck, logger: logger
                            ) { [self] in
                                idlePauses.add(1, ordering: .relaxed)
                                idleGauge.record(1)
                            }
                        } catch where !Task.isCancelled {
                            // The database is away (a restart): stop idling and fetch again, rather than
                            // leave the consumer group and rejoin it, which can take the broker minutes.
                            logger.notice("idle wait for the next commit failed; fetching again", metadata: ["error": "\(error)"])
                            outcome = .timedOut
                        }
                        switch outcome {
                        case .changed(let lastID): lastEventID = lastID
                        // Events were still to be published: the next look, once none is, fetches
                        // again before it waits, so one published in between is not missed.
                        case .unpublished: lastEventID = nil
                        case .notified, .timedOut: break
                        }
                        idleGauge.record(0)
                        try await consumer.resume()
                    }
                    lastMessage = .now
                }
                continue
            }
            lastMessage = .now
            var next: [String: KafkaTopicPartitionOffset] = [:]
            for message in messages {
                next["\(message.topic)/\(message.partition)"] = KafkaTopicPartitionOffset(topic: message.topic, partition: message.partition, offset: message.offset + 1)
            }
            // The whole batch in one transaction; if anything in it fails, one message at a time,
            // so a poison event is isolated and the others still apply.
            let events = messages.compactMap { try? EventCoding.decodeEnvelope($0.value) }
            var batched = false
            if events.count == messages.count {
                do {
                    counted(applied: try await applier.apply(batch: events, logger: logger))
                    batched = true
                } catch where !Task.isCancelled {
                    fallbackCounter.increment()
                    logger.notice("batch apply failed; applying one by one", metadata: [
                        "events": "\(events.count)", "error": "\(PostgresStore.describe(error))",
                    ])
                }
            }
            batchCounter.increment()
            if !batched {
                // One by one, within a time budget well inside the broker's poll interval: past it,
                // what is done is committed and the consumer rejoins, so a slow batch is never
                // redelivered whole, again and again.
                let deadline = ContinuousClock.now + configuration.maxBatchDuration
                var done: [String: KafkaTopicPartitionOffset] = [:]
                for message in messages {
                    if ContinuousClock.now > deadline {
                        try await consumer.commit(Array(done.values))
                        throw BatchBudgetSpent(handled: done.count)
                    }
                    try await handle(message)
                    done["\(message.topic)/\(message.partition)"] = KafkaTopicPartitionOffset(
                        topic: message.topic, partition: message.partition, offset: message.offset + 1)
                }
            }
            if let newest = events.map(\.createdAt).max() {
                lagSecondsGauge.record(max(0, Date().timeIntervalSince1970 - Double(newest) / 1000))
            }
            try await consumer.commit(Array(next.values))
            if let lag = try? consumer.lag() { lagGauge.record(lag) }
        }
    }

    /// Polls for more messages until `deadline` or a full batch; stops early when a poll finds none.
    private func gather(into messages: inout [KafkaMessage], from consumer: KafkaConsumer, until deadline: ContinuousClock.Instant) async throws {
        while messages.count < configuration.batchSize {
            let left = deadline - ContinuousClock.now
            guard left > .zero else { return }
            let more = try await consumer.poll(maxMessages: configuration.batchSize - messages.count, timeout: left)
            guard !more.isEmpty else { return }
            messages += more
        }
    }

    /// Events applied: counted, and told to the statistics keeper (each wrote about a row).
    private func counted(applied: Int) {
        appliedCounter.increment(by: applied)
        statistics?.wrote(applied)
    }

    /// The safety net under Kafka: zones whose change counter is ahead of this worker's checkpoint
    /// (their events were lost, e.g. by a broker that restarted empty) are caught up from the
    /// PostgreSQL event log. Applying a zone's latest event pulls in everything before it.
    func reconcile() async throws {
        let behind = try await CheckpointStore.zonesBehind(
            worker: groupID, grace: configuration.reconcileGrace, limit: 500, store: store, logger: logger)
        for (zoneKey, sequence) in behind {
            guard let latest = try await EventLog(store: store).events(zoneKey: zoneKey, sequences: sequence...sequence, logger: logger).first else { continue }
            let outcome = try await applier.apply(latest, logger: logger)
            if case .applied(let filled) = outcome {
                counted(applied: 1 + filled)
                reconciledCounter.increment(by: 1 + filled)
                logger.warning("caught up a zone from the event log", metadata: ["zone": "\(zoneKey)", "events": "\(1 + filled)"])
            }
        }
    }

    /// Applies one message, retrying transient failures with backoff; a message that cannot be read,
    /// or keeps failing, goes to the dead letters so the partition keeps moving.
    private func handle(_ message: KafkaMessage) async throws {
        let event: EventEnvelope
        do {
            event = try EventCoding.decodeEnvelope(message.value)
        } catch {
            try await deadLetter(message, reason: "undecodable event: \(error)")
            return
        }
        let source = DeadLetterMessage(topic: message.topic, partition: message.partition, offset: message.offset, value: message.value)
        var attempt = 0
        var backoff = Duration.milliseconds(100)
        while true {
            attempt += 1
            do {
                let outcome = try await applier.apply(event, from: source, logger: logger)
                if case .applied(let filled) = outcome {
                    counted(applied: 1 + filled)
                    logger.debug("applied event", metadata: ["event": "\(event.id)", "type": "\(event.type)", "zone": "\(event.zoneKey)"])
                }
                return
            } catch where PostgresStore.isPermanent(error) {
                try await applier.setAside(event, from: source, reason: PostgresStore.describe(error), logger: logger)
                return
            } catch where !Task.isCancelled && attempt < configuration.maxApplyAttempts {
                logger.warning("apply failed; retrying", metadata: ["event": "\(event.id)", "attempt": "\(attempt)", "error": "\(PostgresStore.describe(error))"])
                try await Task.sleep(for: backoff)
                backoff = min(backoff * 2, configuration.maxBackoff)
            } catch where !Task.isCancelled {
                try await applier.setAside(event, from: source, reason: "apply failed \(attempt) times: \(PostgresStore.describe(error))", logger: logger)
                return
            }
        }
    }

    private func deadLetter(_ message: KafkaMessage, reason: String) async throws {
        logger.error("event set aside as a dead letter", metadata: [
            "topic": "\(message.topic)", "partition": "\(message.partition)", "offset": "\(message.offset)", "reason": "\(reason)",
        ])
        deadLetterCounter.increment()
        try await DeadLetterStore.record(
            worker: groupID, topic: message.topic, partition: message.partition, offset: message.offset,
            value: message.value, reason: reason, store: store, logger: logger)
    }
}

/// A batch applied message by message ran past `maxBatchDuration`: what was handled is committed and
/// the consumer rejoins from there.
struct BatchBudgetSpent: Error {
    var handled: Int
}
