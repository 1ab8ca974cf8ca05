import Foundation
import Logging
import Metrics
import ServiceLifecycle
import StratusCore
import StratusPostgres

/// Collects tombstones older than the retention period, zone by zone, raising each zone's horizon:
/// sync tokens from before the horizon then get CHANGE_TOKEN_EXPIRED instead of silently missing a
/// delete. Runs inside stratus-gc.
public struct TombstoneCollector: Service {
    let sync: SyncStore
    let retention: Duration
    let interval: Duration
    let logger: Logger
    let collected = Counter(label: "stratus_gc_tombstones_collected_total")

    /// Creates the collector.
    public init(store: PostgresStore, retention: Duration, interval: Duration = .seconds(3600), logger: Logger) {
        self.sync = SyncStore(store: store)
        self.retention = retention
        self.interval = interval
        self.logger = logger
    }

    public func run() async throws {
        try await repeatPass(every: interval, what: "tombstone collection", logger: logger) { try await collectOnce() }
    }

    /// One pass over every zone with expired tombstones; returns how many were collected.
    @discardableResult
    public func collectOnce() async throws -> Int {
        let cutoff = Date().addingTimeInterval(-(retention / .seconds(1)))
        var total = 0
        while true {
            let zones = try await sync.zonesWithTombstones(olderThan: cutoff, limit: 500, logger: logger)
            if zones.isEmpty { break }
            for (database, zone) in zones {
                total += try await sync.collectTombstones(zone: zone, in: database, olderThan: cutoff, logger: logger)
            }
        }
        if total > 0 {
            collected.increment(by: total)
            logger.info("collected tombstones", metadata: ["count": "\(total)"])
        }
        return total
    }
}
