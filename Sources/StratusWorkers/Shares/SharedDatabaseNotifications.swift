import StratusCore
import StratusPostgres

/// The notifications of participants' `database` subscriptions in their shared databases, made by
/// stratus-shares from what its tracking statements tell: each participant a statement names for
/// a zone gets one notification per subscription and write request of the zone, logged in the
/// projection's transaction through the subscriptions' log (`NotificationStore.log`), whose
/// dedupe keys make a redelivered or replayed batch log nothing twice. A subscription fires only
/// for events appended at or after its save, so a replay never fires it for older changes.
struct SharedDatabaseNotifications {
    /// One write request's change of an owner's zone: the request's last event of the zone.
    struct Change {
        var causation: Causation
        var eventID: Int64
        var createdAt: Int64
    }

    /// Whose shared databases' subscriptions were read this batch, and what they hold.
    private struct Participant: Hashable {
        var container: String
        var environment: StratusCore.Environment
        var user: String
    }

    let transaction: Transaction
    private var subscriptions: [Participant: [OwnedSubscription]] = [:]
    private(set) var drafts: [NotificationDraft] = []

    init(transaction: Transaction) { self.transaction = transaction }

    /// Notifies `participants` (as a tracking statement returned them) of the changes of the owner's
    /// zone; the subscriptions of participants not seen yet this batch are read in one statement.
    mutating func tell(_ participants: [String], zone zoneName: String, of database: DatabaseID, changes: [Change]) async throws {
        guard !participants.isEmpty, !changes.isEmpty else { return }
        let keys = Set(participants.map { Participant(container: database.container, environment: database.environment, user: $0) })
        let unread = keys.filter { subscriptions[$0] == nil }
        if !unread.isEmpty {
            for key in unread { subscriptions[key] = [] }
            let found = try await SubscriptionStore.sharedDatabaseCandidates(
                container: database.container, environment: database.environment, participants: unread.map(\.user).sorted(), in: transaction)
            for owned in found {
                subscriptions[Participant(container: database.container, environment: database.environment, user: owned.database.owner), default: []]
                    .append(owned)
            }
        }
        let candidates = keys.sorted { $0.user < $1.user }.flatMap { subscriptions[$0] ?? [] }
        guard !candidates.isEmpty else { return }
        let zoneID = ZoneID(zoneName: zoneName, ownerRecordName: database.owner)
        for change in changes {
            drafts += SubscriptionEvaluation.drafts(
                for: .zone, zoneID: zoneID, eventID: change.eventID, eventCreatedAt: change.createdAt, causation: change.causation,
                subscriptions: candidates)
        }
    }
}
