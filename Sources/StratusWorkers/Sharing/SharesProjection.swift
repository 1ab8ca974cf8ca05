import Logging
import Metrics
import StratusCore
import StratusPostgres

/// stratus-shares' projection: the share fan-out. From the zone events it keeps every
/// participant's shared-database change tracking (`SharedZoneTracking`): a save of a share record
/// (its decided state in the event) makes its accepted participants hold the zone and tells the
/// others they lost it; a share's or zone's deletion ends every hold; any other change in a zone
/// moves the position of every participant holding a share of the zone, with one statement per
/// zone and batch however many participants there are.
///
/// It runs after the owner's write committed (the write never waits for it) and decides no
/// access: the API reads that from the shares tables in the request's transaction. Every
/// statement is idempotent, and `reset` empties the table, so `stratus replay stratus-shares`
/// rebuilds the same rows.
///
/// Shared-database subscriptions: participants' `database` subscriptions in the shared database
/// are not notified yet. The seam is here: the events this projection applies name, per zone and
/// batch, the participants told of a change (`SharedZoneTracking.applyZoneChange` and
/// `applyShare`); a notification per participant and request belongs in the subscriptions'
/// notification log (`NotificationStore.log`), keyed like the private database's `database`
/// notifications, so that stratus-subscriptions' dispatcher delivers it.
public struct SharesProjection: Projection {
    public let name = "stratus-shares"
    let shareChanges = Counter(label: "stratus_share_changes_applied_total")
    let zoneChanges = Counter(label: "stratus_share_zone_changes_applied_total")

    /// Creates the projection.
    public init() {}

    public func apply(_ event: EventEnvelope, in transaction: Transaction, logger: Logger) async throws {
        try await apply([event], in: transaction, logger: logger)
    }

    /// A batch in order; the changes of a run of record events collapse to the last sequence of
    /// each zone, written before the next share or zone event (which may change who holds the zone).
    public func apply(_ events: [EventEnvelope], in transaction: Transaction, logger: Logger) async throws {
        var pending: [ZoneKey: (database: DatabaseID, zoneName: String, sequence: Int64)] = [:]
        var order: [ZoneKey] = []
        func flush() async throws {
            for key in order {
                guard let change = pending[key] else { continue }
                try await SharedZoneTracking.applyZoneChange(zone: change.zoneName, of: change.database, sequence: change.sequence, in: transaction)
                zoneChanges.increment()
            }
            pending.removeAll()
            order.removeAll()
        }
        func changed(_ database: DatabaseID, _ zoneName: String, _ event: EventEnvelope) {
            // Only custom zones of private databases are shared; other events have nothing to tell.
            guard database.scope == .private, let sequence = event.zoneSequence else { return }
            if pending[event.zoneKey] == nil { order.append(event.zoneKey) }
            pending[event.zoneKey] = (database, zoneName, max(sequence, pending[event.zoneKey]?.sequence ?? 0))
        }
        for event in events {
            switch event.type {
            case RecordSaved.eventType:
                let saved = try event.decode(RecordSaved.self)
                if let state = saved.record.shareState, ShareRecord.isShare(saved.record.recordType), let sequence = event.zoneSequence {
                    try await flush()
                    try await SharedZoneTracking.applyShare(
                        state, shareName: saved.record.recordName, zone: saved.zoneID.zoneName, of: saved.database, sequence: sequence, in: transaction)
                    shareChanges.increment()
                }
                // A share's change is a change of its zone too (the share record is in it).
                changed(saved.database, saved.zoneID.zoneName, event)
            case RecordDeleted.eventType:
                let deleted = try RecordDeleted.withoutImage(event)
                if ShareRecord.isShare(deleted.recordType), let sequence = event.zoneSequence {
                    try await flush()
                    try await SharedZoneTracking.applyShareDeleted(
                        shareName: deleted.recordName, zone: deleted.zoneID.zoneName, of: deleted.database, sequence: sequence, in: transaction)
                    shareChanges.increment()
                }
                changed(deleted.database, deleted.zoneID.zoneName, event)
            case .zoneDeleted:
                let deleted = try event.decode(ZoneDeleted.self)
                try await flush()
                try await SharedZoneTracking.applyZoneDeleted(
                    zone: deleted.zoneID.zoneName, of: deleted.database, sequence: event.zoneSequence ?? 0, in: transaction)
            default:
                break
            }
        }
        try await flush()
    }

    public func reset(in transaction: Transaction, logger: Logger) async throws {
        try await SharedZoneTracking.reset(in: transaction)
    }
}
