import Foundation
import Logging
import Metrics
import ServiceLifecycle
import StratusCore
import StratusPostgres

/// How `stratus-gc` collects expired records.
public struct ExpiryConfiguration: Sendable {
    /// Records read from the expiry index at a time, and at most deleted in one transaction, so one
    /// zone's lock is never held for long (`STRATUS_GC_EXPIRE_BATCH`). 2,000 collects about 7,000
    /// records a second on two cores, holding a zone's lock for about half a second a batch; 500
    /// holds it a quarter as long and collects about 4,500 (docs/benchmarks.md, `gc.expire`).
    public var batchSize: Int = 2_000
    /// Records deleted per second at most, so a wave of expirations never starves the API's writes
    /// of the database (`STRATUS_GC_EXPIRE_RATE`; 0: no limit).
    public var ratePerSecond: Double = 10_000
    /// Zones collected at once (`STRATUS_GC_EXPIRE_CONCURRENCY`): each zone's batch is its own
    /// transaction under its own lock, so zones in parallel keep the database busy while one
    /// transaction waits on a round trip; API writers of other zones are not held up.
    public var concurrency: Int = 2
    /// The longest the collector sleeps without a notification: a safety net, one look at the index.
    public var maxSleep: Duration = .seconds(300)

    /// The defaults.
    public init() {}
}

/// Deletes expired records through the write path, in the order they expire: batched (one
/// transaction per zone and batch), resumable (the expiry index is its only state, and each entry
/// goes only once its record is dealt with), and rate-limited. With nothing due it sleeps until the
/// earliest expiration or until a commit indexes a new one. Runs inside stratus-gc.
public struct ExpiredRecordCollector: Service {
    let records: RecordStore
    let index: RecordExpirationIndex
    let configuration: ExpiryConfiguration
    let logger: Logger
    let collected = Counter(label: "stratus_gc_expired_records_total")
    let lag = Gauge(label: "stratus_gc_expiry_lag_seconds")
    let indexed = Gauge(label: "stratus_gc_expirations_indexed")

    /// Creates the collector.
    public init(store: PostgresStore, configuration: ExpiryConfiguration = ExpiryConfiguration(), logger: Logger) {
        self.records = RecordStore(store: store)
        self.index = RecordExpirationIndex(store: store)
        self.configuration = configuration
        self.logger = logger
    }

    public func run() async throws {
        try await cancelWhenGracefulShutdown {
            var pace = Pace(perSecond: configuration.ratePerSecond, burst: Double(configuration.batchSize))
            var backoff = Duration.milliseconds(200)
            var gaugesRead = ContinuousClock.now - .seconds(60)
            while !Task.isCancelled {
                do {
                    if try await collectDue(pace: &pace) == 0 {
                        // The gauges count the whole index: at most every 30 s, not at every wake-up
                        // (a burst of saves with expirations wakes the collector per commit).
                        if ContinuousClock.now - gaugesRead >= .seconds(30) {
                            let backlog = try await index.backlog(logger: logger)
                            lag.record(backlog.lagSeconds)
                            indexed.record(Double(backlog.entries))
                            gaugesRead = .now
                        }
                        try await index.waitForWork(maxWait: configuration.maxSleep, logger: logger)
                    }
                    backoff = .milliseconds(200)
                } catch where Task.isCancelled {
                    // Graceful shutdown cancels the loop wherever it waits: its end, not a failure (a
                    // service that throws makes the process exit with one). A batch cut off mid-way
                    // is rolled back; its entries are still in the index.
                    break
                } catch {
                    logger.warning("expired-record collection failed; trying again", metadata: ["error": "\(PostgresStore.describe(error))"])
                    try? await Task.sleep(for: backoff)
                    backoff = min(backoff * 2, .seconds(30))
                }
            }
        }
    }

    /// One look at the expiry index: deletes what is due, up to a batch, zone by zone. Returns how
    /// many entries it dealt with (0: nothing is due).
    @discardableResult
    public func collectDue() async throws -> Int {
        var pace = Pace(perSecond: 0, burst: 0)
        return try await collectDue(pace: &pace)
    }

    func collectDue(pace: inout Pace) async throws -> Int {
        let (entries, now) = try await index.due(limit: configuration.batchSize, logger: logger)
        guard !entries.isEmpty else { return 0 }
        // The zones with the earliest due records, in that order; each is then taken a whole batch
        // at a time (fewer, larger transactions than the interleaved entries would make).
        var zones: [ZoneKey] = []
        var firstEntry: [ZoneKey: RecordExpirationIndex.Entry] = [:]
        for entry in entries {
            let key = ZoneKey(database: entry.database, zoneName: entry.zone.zoneName)
            if firstEntry[key] == nil {
                zones.append(key)
                firstEntry[key] = entry
            }
        }
        var deleted = 0
        var handled = 0
        try await withThrowingTaskGroup(of: Int.self) { group in
            var running = 0
            for key in zones {
                guard let zone = firstEntry[key] else { continue }
                let batch = try await index.due(zone: zone.zone, of: zone.database, limit: configuration.batchSize, logger: logger)
                guard !batch.isEmpty else { continue }
                handled += batch.count
                try await pace.take(Double(batch.count))
                if running >= max(1, configuration.concurrency), let done = try await group.next() {
                    deleted += done
                    running -= 1
                }
                group.addTask { try await collect(batch, now: now) }
                running += 1
            }
            for try await done in group { deleted += done }
        }
        if deleted > 0 { logger.debug("collected expired records", metadata: ["count": "\(deleted)"]) }
        return handled
    }

    /// Deletes one zone's due entries' records in one transaction, then removes the entries; returns
    /// how many records it deleted.
    private func collect(_ batch: [RecordExpirationIndex.Entry], now: Int64) async throws -> Int {
        guard let first = batch.first else { return 0 }
        // One write request per transaction, as the subscriptions worker counts them.
        let causation = Causation(requestID: "stratus-gc/expire/\(UUID().uuidString)")
        var deleted = 0
        do {
            let expired = try await records.expire(batch.map(\.recordName), zone: first.zone, in: first.database, causation: causation, logger: logger)
            deleted = expired.count
            collected.increment(by: expired.count)
        } catch let error as StratusError where error.code == .zoneNotFound {
            // The zone is gone with its records; its entries go too.
        }
        try await index.remove(batch, logger: logger)
        lag.record(Double(max(0, now - first.expiresAt)) / 1000)
        return deleted
    }
}

/// A token bucket the collector draws from before each transaction: it sleeps for what it lacks.
struct Pace {
    let perSecond: Double
    let burst: Double
    private var tokens: Double
    private var last = ContinuousClock.now

    init(perSecond: Double, burst: Double) {
        self.perSecond = perSecond
        self.burst = max(1, burst)
        tokens = max(1, burst)
    }

    mutating func take(_ count: Double) async throws {
        guard perSecond > 0 else { return }
        let now = ContinuousClock.now
        let elapsed = now - last
        last = now
        tokens = min(burst, tokens + perSecond * (elapsed / .seconds(1)))
        tokens -= count
        if tokens < 0 {
            try await Task.sleep(for: .milliseconds(Int((-tokens / perSecond * 1000).rounded(.up))))
        }
    }
}
