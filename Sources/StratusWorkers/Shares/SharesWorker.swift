import StratusCore
import StratusPostgres

extension WorkerDefinition {
    /// `stratus-shares`: the share fan-out, each participant's shared-database tracking. Seeded
    /// after pruning from the snapshot's share records (`seedTracking`).
    public static let shares = WorkerDefinition(name: "stratus-shares", projection: SharesProjection(), seed: seedTracking)

    /// The tracking a fan-out that applied every event leaves, from a snapshot of the tables: each
    /// share record of a live zone of a private database, applied as its save is, at the zone's
    /// change counter (the sequence of the zone's last change, of which its holders were told).
    /// Losses told before the snapshot are not rebuilt: a participant who lost a share before it
    /// has no row, and the share's zone is simply not in their shared database.
    static let seedTracking: Rebuild.Seed = { snapshot, zones, transaction in
        let counters = Dictionary(zones.filter { !$0.deleted }.map { ($0.zoneKey, $0.changeCounter) }, uniquingKeysWith: { max($0, $1) })
        try await snapshot.forEachRecordPage { database, zoneName, records in
            guard database.scope == .private, let sequence = counters[ZoneKey(database: database, zoneName: zoneName)] else { return }
            for record in records where ShareRecord.isShare(record.recordType) {
                guard let state = record.shareState else { continue }
                _ = try await SharedZoneTracking.applyShare(
                    state, shareName: record.recordName, zone: zoneName, of: database, sequence: sequence, in: transaction)
            }
        }
    }
}
