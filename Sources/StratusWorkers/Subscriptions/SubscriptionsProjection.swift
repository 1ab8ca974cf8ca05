import Logging
import Metrics
import StratusCore
import StratusPostgres

/// stratus-subscriptions' projection: evaluates every subscription an event may fire and logs the
/// notifications (with their push deliveries) in the worker's transaction, exactly once per
/// subscription and change. A replay logs nothing twice (the log's keys) and never fires a
/// subscription for events older than it (its save time), so the notification log is not reset
/// by a replay: it is the users' record of what they were told.
public struct SubscriptionsProjection: Projection {
    public let name = "stratus-subscriptions"
    let evaluated = Counter(label: "stratus_subscription_events_evaluated_total")
    let notified = Counter(label: "stratus_notifications_logged_total")
    let imageLookups = Counter(label: "stratus_subscription_image_lookups_total")

    /// Creates the projection.
    public init() {}

    public func apply(_ event: EventEnvelope, in transaction: Transaction, logger: Logger) async throws {
        try await apply([event], in: transaction, logger: logger)
    }

    /// Evaluates a batch in one pass: each (database, zone, record type)'s candidates are read once
    /// (the transaction sees one snapshot of the subscriptions; a `firesOnce` subscription that fires
    /// is left out of the later events), and all the drafts are logged with a handful of statements.
    public func apply(_ events: [EventEnvelope], in transaction: Transaction, logger: Logger) async throws {
        var batch = Evaluation(transaction: transaction)
        var drafts: [NotificationDraft] = []
        for event in events {
            guard let made = try await self.drafts(for: event, in: &batch) else { continue }
            evaluated.increment()
            for draft in made where draft.owner.subscription.firesOnce { batch.fired.insert(draft.owner) }
            drafts += made
        }
        let logged = try await NotificationStore.log(drafts, in: transaction)
        notified.increment(by: logged.count)
        var deleted = Set<OwnedSubscription>()
        for draft in logged where draft.owner.subscription.firesOnce && deleted.insert(draft.owner).inserted {
            try await SubscriptionStore.deleteFired(draft.owner, in: transaction)
        }
    }

    /// What one batch's evaluation remembers.
    struct Evaluation {
        struct Key: Hashable {
            var database: DatabaseID
            var zoneName: String
            var recordType: String?
        }
        let transaction: Transaction
        var candidates: [Key: [OwnedSubscription]] = [:]
        /// `firesOnce` subscriptions that fired earlier in the batch.
        var fired = Set<OwnedSubscription>()
        /// Public-database READ grants read in this batch, by database, record type and reader (nil: anyone).
        var grants: [GrantsKey: PublicReadGrants] = [:]

        struct GrantsKey: Hashable {
            var database: DatabaseID
            var recordType: String
            var reader: String?
        }

        init(transaction: Transaction) { self.transaction = transaction }

        /// The subscriptions an event in this zone (of this record type; nil: a zone event) may fire.
        mutating func candidates(database: DatabaseID, zoneName: String, recordType: String?) async throws -> [OwnedSubscription] {
            let key = Key(database: database, zoneName: zoneName, recordType: recordType)
            let all: [OwnedSubscription]
            if let known = candidates[key] {
                all = known
            } else {
                all = try await SubscriptionStore.candidates(database: database, zoneName: zoneName, recordType: recordType, in: transaction)
                candidates[key] = all
            }
            return fired.isEmpty ? all : all.filter { !fired.contains($0) }
        }

        /// The public database's record-type READ grants for `reader` (nil: a caller without a
        /// user), read once per batch.
        mutating func grants(database: DatabaseID, recordType: String, reader: String?) async throws -> PublicReadGrants {
            let key = GrantsKey(database: database, recordType: recordType, reader: reader)
            if let known = grants[key] { return known }
            let read = try await SchemaStore.readGrants(recordTypes: [recordType], reader: reader, database: database, in: transaction)
            grants[key] = read
            return read
        }

        /// In the public database, the query subscriptions whose subscribers may read a record of
        /// `recordType` created by `creator` (asked only when some subscriber reads only its own
        /// records), as `records/lookup` decides: a notification carries the record's name and
        /// fields. Others (private and shared databases) as they are.
        mutating func readable(
            _ candidates: [OwnedSubscription], database: DatabaseID, recordType: String, creator: () async throws -> String?
        ) async throws -> [OwnedSubscription] {
            guard database.scope == .public, !candidates.isEmpty else { return candidates }
            // The common case, a world-readable type, costs one statement per batch and type.
            guard try await grants(database: database, recordType: recordType, reader: nil).scope(of: recordType) != .all else { return candidates }
            var kept: [OwnedSubscription] = []
            var creatorName: String?
            var creatorRead = false
            for candidate in candidates {
                switch try await grants(database: database, recordType: recordType, reader: candidate.subscriber).scope(of: recordType) {
                case .all: kept.append(candidate)
                case .none: continue
                case .own:
                    if !creatorRead {
                        creatorName = try await creator()
                        creatorRead = true
                    }
                    if creatorName == candidate.subscriber { kept.append(candidate) }
                }
            }
            return kept
        }
    }

    /// The notifications one event makes; nil for an event subscriptions do not watch.
    func drafts(for event: EventEnvelope, in batch: inout Evaluation) async throws -> [NotificationDraft]? {
        let transaction = batch.transaction
        switch event.type {
        case RecordSaved.eventType:
            // Read without its previous image, which only an update's query subscriptions need
            // (read then, below): most saves concern no subscription.
            let saved = try RecordSaved.withoutPrevious(event)
            let candidates = try await batch.readable(
                try await batch.candidates(database: saved.database, zoneName: saved.zoneID.zoneName, recordType: saved.record.recordType),
                database: saved.database, recordType: saved.record.recordType) { saved.record.created.userRecordName }
            guard !candidates.isEmpty else { return [] }
            let created = saved.previousChangeTag == nil
            var before: Record?
            let queries = candidates.filter { $0.subscription.type == .query && $0.createdAt <= event.createdAt }
            if !created, !queries.isEmpty {
                let needed = Self.fieldsRead(by: queries)
                before = try event.decode(RecordSaved.self).recordBefore(needing: needed)
                if before == nil {
                    imageLookups.increment()
                    before = try await EventLog.lastSavedRecord(
                        zoneKey: event.zoneKey, recordName: saved.record.recordName, before: event.id, in: transaction)
                }
            }
            return SubscriptionEvaluation.drafts(
                for: .saved(after: saved.record, before: before, created: created), zoneID: saved.zoneID, eventID: event.id,
                eventCreatedAt: event.createdAt, causation: event.causation, subscriptions: candidates)
        case RecordDeleted.eventType:
            // The record's last fields are read only for query subscriptions (below).
            let deleted = try RecordDeleted.withoutImage(event)
            // A deletion's event does not name the creator: the record's last save does.
            let candidates = try await batch.readable(
                try await batch.candidates(database: deleted.database, zoneName: deleted.zoneID.zoneName, recordType: deleted.recordType),
                database: deleted.database, recordType: deleted.recordType) {
                    try await EventLog.lastSavedRecord(zoneKey: event.zoneKey, recordName: deleted.recordName, before: event.id, in: transaction)?
                        .created.userRecordName
                }
            guard !candidates.isEmpty else { return [] }
            var last: Record?
            let queries = candidates.filter { $0.subscription.type == .query && $0.createdAt <= event.createdAt }
            if !queries.isEmpty {
                last = try event.decode(RecordDeleted.self).recordBefore(needing: Self.fieldsRead(by: queries))
                if last == nil {
                    imageLookups.increment()
                    last = try await EventLog.lastSavedRecord(zoneKey: event.zoneKey, recordName: deleted.recordName, before: event.id, in: transaction)
                }
            }
            return SubscriptionEvaluation.drafts(
                for: .deleted(recordName: deleted.recordName, recordType: deleted.recordType, last: last), zoneID: deleted.zoneID,
                eventID: event.id, eventCreatedAt: event.createdAt, causation: event.causation, subscriptions: candidates)
        case .zoneCreated, .zoneDeleted:
            let zone = event.type == .zoneCreated
                ? try event.decode(ZoneCreated.self).identity : try event.decode(ZoneDeleted.self).identity
            let candidates = try await batch.candidates(database: zone.database, zoneName: zone.zoneID.zoneName, recordType: nil)
            return SubscriptionEvaluation.drafts(
                for: .zone, zoneID: zone.zoneID, eventID: event.id, eventCreatedAt: event.createdAt,
                causation: event.causation, subscriptions: candidates)
        default:
            return nil
        }
    }

    /// The log is kept across replays (see the type's comment): nothing to forget.
    public func reset(in transaction: Transaction, logger: Logger) async throws {}

    /// The fields the query subscriptions read from a before-image; nil: all of them.
    static func fieldsRead(by subscriptions: [OwnedSubscription]) -> Set<String>? {
        var union = Set<String>()
        for owned in subscriptions {
            guard let fields = SubscriptionEvaluation.fieldsRead(by: owned.subscription) else { return nil }
            union.formUnion(fields)
        }
        return union
    }
}

extension ZoneCreated {
    var identity: (database: DatabaseID, zoneID: ZoneID) { (database, zoneID) }
}

extension ZoneDeleted {
    var identity: (database: DatabaseID, zoneID: ZoneID) { (database, zoneID) }
}
