import Foundation
import Logging
import Metrics
import ServiceLifecycle
import StratusBlobStore
import StratusCore
import StratusPostgres

/// Deletes the bytes of assets no live record references, once the grace period has passed since
/// their upload (an upload not bound yet is protected that long) or since the last record released
/// them. Candidates come from stratus-gc's reference counts; each is re-checked against the records
/// under the asset row's lock before its bytes go, so a replayed or lagging projection never
/// deletes a referenced asset. Runs inside stratus-gc.
public struct OrphanAssetCollector: Service {
    let assets: AssetStore
    let blobs: any BlobStore
    let grace: Duration
    let interval: Duration
    let batch: Int
    let logger: Logger
    let collected = Counter(label: "stratus_gc_assets_collected_total")

    /// Creates the collector.
    public init(store: PostgresStore, blobs: any BlobStore, grace: Duration, interval: Duration = .seconds(300), batch: Int = 500, logger: Logger) {
        assets = AssetStore(store: store)
        self.blobs = blobs
        self.grace = grace
        self.interval = interval
        self.batch = batch
        self.logger = logger
    }

    public func run() async throws {
        try await repeatPass(every: interval, what: "asset collection", logger: logger) { try await collectOnce() }
    }

    /// Passes over the candidates until none is left to collect; returns how many assets were deleted.
    @discardableResult
    public func collectOnce(now: Date = Date()) async throws -> Int {
        let cutoff = now.addingTimeInterval(-(grace / .seconds(1)))
        var total = 0
        var kept = Set<UUID>()
        while true {
            let candidates = try await assets.collectionCandidates(before: cutoff, limit: batch + kept.count, logger: logger).filter { !kept.contains($0) }
            if candidates.isEmpty { break }
            for id in candidates {
                switch try await assets.claim(id, before: cutoff, logger: logger) {
                case .collect(let blob):
                    guard let key = BlobKey(AssetValue.receipt(blob)) else { continue }
                    try await blobs.delete(key: key, logger: logger)
                    try await assets.forget(id, freeingBytes: true, logger: logger)
                    total += 1
                case .release:
                    // Another asset (assets/rereference) holds the same bytes: only this one goes.
                    try await assets.forget(id, freeingBytes: false, logger: logger)
                    total += 1
                case .forgotten:
                    break
                case .keep:
                    kept.insert(id)
                }
            }
        }
        if total > 0 {
            collected.increment(by: total)
            logger.info("collected orphaned assets", metadata: ["count": "\(total)"])
        }
        return total
    }
}
