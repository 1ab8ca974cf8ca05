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
/// Shared-database subscriptions: the participants each statement tells of a change (the rows it
/// touches) are notified through the `database` subscriptions they saved in their shared database
/// (`SharedDatabaseNotifications`), one notification per subscription, zone and write request,
/// logged in the same transaction in the subscriptions' notification log, which stratus-subscriptions'
/// dispatcher delivers. The log is never reset: a replay finds every notification already logged.
public struct SharesProjection: Projection {
    public let name = "stratus-shares"
    let shareChanges = Counter(label: "stratus_share_changes_applied_total")
    let zoneChanges = Counter(label: "stratus_share_zone_changes_applied_total")
    let notified = Counter(label: "stratus_shared_database_notifications_logged_total")

    /// Creates the projection.
    public init() {}

    public func apply(_ event: EventEnvelope, in transaction: Transaction, logger: Logger) async throws {
        try await apply([event], in: transaction, logger: logger)
    }

    /// A batch in order; the changes of a run of record events collapse to the last sequence of
    /// each zone, written before the next share or zone event (which may change who holds the zone).
    /// The participants each statement tells are notified of the write requests it covers.
    public func apply(_ events: [EventEnvelope], in transaction: Transaction, logger: Logger) async throws {
        struct Pending {
            var database: DatabaseID
            var zoneName: String
            var sequence: Int64
            /// The zone's write requests in the run, in order.
            var changes: [SharedDatabaseNotifications.Change] = []
        }
        var pending: [ZoneKey: Pending] = [:]
        var order: [ZoneKey] = []
        var notifications = SharedDatabaseNotifications(transaction: transaction)
        func flush() async throws {
            for key in order {
                guard let change = pending[key] else { continue }
                let told = try await SharedZoneTracking.applyZoneChange(zone: change.zoneName, of: change.database, sequence: change.sequence, in: transaction)
                try await notifications.tell(told, zone: change.zoneName, of: change.database, changes: change.changes)
                zoneChanges.increment()
            }
            pending.removeAll()
            order.removeAll()
        }
        func changed(_ database: DatabaseID, _ zoneName: String, _ event: EventEnvelope) {
            // Only custom zones of private databases are shared; other events have nothing to tell.
            guard database.scope == .private, let sequence = event.zoneSequence else { return }
            if pending[event.zoneKey] == nil { order.append(event.zoneKey) }
            var run = pending[event.zoneKey] ?? Pending(database: database, zoneName: zoneName, sequence: sequence)
            run.sequence = max(sequence, run.sequence)
            let change = Self.change(event)
            if let last = run.changes.indices.last, run.changes[last].causation.requestID == change.causation.requestID {
                run.changes[last] = change
            } else {
                run.changes.append(change)
            }
            pending[event.zoneKey] = run
        }
        /// A share or zone event's statement: those it names are told of the event's request.
        func tell(_ told: [String], _ database: DatabaseID, _ zoneName: String, _ event: EventEnvelope) async throws {
            guard database.scope == .private else { return }
            try await notifications.tell(told, zone: zoneName, of: database, changes: [Self.change(event)])
        }
        for event in events {
            switch event.type {
            case RecordSaved.eventType:
                // The previous image (an update's largest part) is cut out unread: the fan-out looks
                // only at the record after the save.
                let saved = try RecordSaved.withoutPrevious(event)
                if let state = saved.record.shareState, ShareRecord.isShare(saved.record.recordType), let sequence = event.zoneSequence {
                    try await flush()
                    let told = try await SharedZoneTracking.applyShare(
                        state, shareName: saved.record.recordName, zone: saved.zoneID.zoneName, of: saved.database, sequence: sequence, in: transaction)
                    try await tell(told, saved.database, saved.zoneID.zoneName, event)
                    shareChanges.increment()
                }
                // A share's change is a change of its zone too (the share record is in it).
                changed(saved.database, saved.zoneID.zoneName, event)
            case RecordDeleted.eventType:
                let deleted = try RecordDeleted.withoutImage(event)
                if ShareRecord.isShare(deleted.recordType), let sequence = event.zoneSequence {
                    try await flush()
                    let told = try await SharedZoneTracking.applyShareDeleted(
                        shareName: deleted.recordName, zone: deleted.zoneID.zoneName, of: deleted.database, sequence: sequence, in: transaction)
                    try await tell(told, deleted.database, deleted.zoneID.zoneName, event)
                    shareChanges.increment()
                }
                changed(deleted.database, deleted.zoneID.zoneName, event)
            case .zoneDeleted:
                let deleted = try event.decode(ZoneDeleted.self)
                try await flush()
                let told = try await SharedZoneTracking.applyZoneDeleted(
                    zone: deleted.zoneID.zoneName, of: deleted.database, sequence: event.zoneSequence ?? 0, in: transaction)
                try await tell(told, deleted.database, deleted.zoneID.zoneName, event)
            default:
                break
            }
        }
        try await flush()
        notified.increment(by: try await NotificationStore.log(notifications.drafts, in: transaction).count)
    }

    /// An event as the write request it belongs to.
    static func change(_ event: EventEnvelope) -> SharedDatabaseNotifications.Change {
        SharedDatabaseNotifications.Change(causation: event.causation, eventID: event.id, createdAt: event.createdAt)
    }

    public func reset(in transaction: Transaction, logger: Logger) async throws {
        try await SharedZoneTracking.reset(in: transaction)
    }
}
