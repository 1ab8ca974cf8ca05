import StratusCore
import StratusPostgres

extension WorkerDefinition {
    /// `stratus-gc`: the expiry index and asset references, kept from the log behind one consumer
    /// group, and its periodic passes: tombstones, orphaned assets, expired records, users' deletions left unfinished. Reads
    /// `WorkerSettings.tombstoneRetention`, `blobStore`, `assetGrace`, `assetCollectionInterval` and
    /// `expiry`. Seeded after pruning from the snapshot's records (`seedFromRecords`).
    ///
    /// It sees every record write once, off the request path, so it also keeps the records table's
    /// planner statistics fresh after a load (a record lookup planned on a young, unanalysed table
    /// scans the zone).
    public static let gc = WorkerDefinition(
        name: "stratus-gc",
        projection: CompositeProjection(
            name: "stratus-gc", parts: [ExpiryProjection(), AssetReferenceProjection(name: "stratus-gc")], statisticsTable: "records"),
        services: { context in
            [
                TombstoneCollector(store: context.store, retention: context.settings.tombstoneRetention, logger: context.logger),
                OrphanAssetCollector(
                    store: context.store, blobs: context.settings.blobStore.makeStore(), grace: context.settings.assetGrace,
                    interval: context.settings.assetCollectionInterval, logger: context.logger),
                ExpiredRecordCollector(store: context.store, configuration: context.settings.expiry, logger: context.logger),
                UserDeletionRunner(store: context.store, blobs: context.settings.blobStore.makeStore(), logger: context.logger),
                EventLogPruner(store: context.store, configuration: context.settings.eventRetention, logger: context.logger),
            ]
        },
        seed: seedFromRecords)

    /// The expiry index and asset references a worker that applied every event leaves, from a
    /// snapshot of the records: each record's expiration indexed, each asset its fields name held,
    /// each asset bound then and held by none released.
    static let seedFromRecords: Rebuild.Seed = { snapshot, _, transaction in
        try await snapshot.forEachRecordPage { database, zoneName, records in
            try await RecordExpirationIndex.seed(records, zone: zoneName, of: database, in: transaction)
            try await AssetReferenceStore.seed(records, zone: ZoneKey(database: database, zoneName: zoneName), in: transaction)
        }
        try await AssetReferenceStore.seedReleased(from: snapshot, in: transaction)
    }
}
