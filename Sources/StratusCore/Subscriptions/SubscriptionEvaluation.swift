import Foundation

/// The pure decision of which subscriptions an event fires, and with what.
///
/// Query subscriptions compare the record before and after the change:
/// - created and matching: `recordCreated` (fires on create);
/// - updated, matching before and after: `recordUpdated` (fires on update);
/// - updated into the predicate (not matching before, matching after): `recordCreated` — for the
///   subscriber the record has just appeared among the query's results;
/// - updated out of the predicate (matching before, not after): `recordDeleted` — it has left them;
/// - deleted while matching: `recordDeleted` (fires on delete).
/// Zone subscriptions fire once per write request in their zone; database subscriptions once per
/// write request and custom zone of their database (zone creations and deletions included); in the
/// shared database, of the owners' zones shared with the subscriber (stratus-shares decides whom).
/// A notification of a change the subscriber wrote from a device that named itself
/// (`X-Stratus-Device-ID`) is marked with that device, whose couriers skip it (`origin`, `hands`).
public enum SubscriptionEvaluation {
    /// What one event changed, as subscriptions see it.
    public enum Change: Sendable {
        /// A record saved: its after-image and, for an update, its before-image (nil when created).
        case saved(after: Record, before: Record?, created: Bool)
        /// A record deleted: what is known of it when it was deleted (nil: nothing matched for sure).
        case deleted(recordName: String, recordType: String, last: Record?)
        /// A zone created or deleted (database subscriptions only).
        case zone
    }

    /// The fields a subscription's predicate reads from a record: nil when it reads every field
    /// (token search over `___all`).
    public static func fieldsRead(by subscription: Subscription) -> Set<String>? {
        guard let query = subscription.query else { return [] }
        var names = Set<String>()
        for filter in query.filters {
            if filter.fieldName == "___all" { return nil }
            if !RecordQuery.systemFields.contains(filter.fieldName) { names.insert(filter.fieldName) }
        }
        return names
    }

    /// The notifications an event gives, one per firing subscription.
    /// - Parameters:
    ///   - change: what the event changed.
    ///   - zoneID: the event's zone.
    ///   - eventID: the event's id; `eventCreatedAt` its time (ms); `causation` the request that
    ///     wrote it (its id, user and device).
    ///   - subscriptions: the candidates of the event's database (others are ignored).
    public static func drafts(
        for change: Change, zoneID: ZoneID, eventID: Int64, eventCreatedAt: Int64, causation: Causation, subscriptions: [OwnedSubscription]
    ) -> [NotificationDraft] {
        var drafts: [NotificationDraft] = []
        let requestID = causation.requestID
        for owner in subscriptions where owner.createdAt <= eventCreatedAt {
            let subscription = owner.subscription
            let device = origin(of: causation, for: owner.subscriber)
            switch subscription.type {
            case .query:
                guard let query = subscription.query else { continue }
                if let zone = subscription.zoneID, zone.zoneName != zoneID.zoneName { continue }
                guard let (reason, record) = queryReason(change, query: query, firesOn: subscription.firesOn) else { continue }
                let desired = subscription.notificationInfo?.desiredKeys ?? []
                var fields: [String: FieldValue] = [:]
                for key in desired { fields[key] = record.fields[key] }
                let collapseID = subscription.notificationInfo?.collapseIDKey.flatMap { record.fields[$0] }.flatMap(collapseText)
                drafts.append(NotificationDraft(
                    owner: owner, eventID: eventID, dedupeKey: "event/\(eventID)", zoneID: zoneID, reason: reason,
                    recordName: record.recordName, fields: fields, collapseID: collapseID, deviceID: device))
            case .zone:
                guard subscription.zoneID?.zoneName == zoneID.zoneName, !zoneID.isDefaultZone else { continue }
                drafts.append(NotificationDraft(
                    owner: owner, eventID: eventID, dedupeKey: "request/\(requestID)", zoneID: zoneID, reason: nil,
                    recordName: nil, fields: [:], collapseID: nil, deviceID: device))
            case .database:
                guard !zoneID.isDefaultZone else { continue }
                // A shared database holds zones of several owners (one request may accept shares of
                // two owners' zones of the same name): its key names the zone's owner too.
                let zone = owner.database.scope == .shared ? "owner/\(zoneID.ownerRecordName)/zone/\(zoneID.zoneName)" : "zone/\(zoneID.zoneName)"
                drafts.append(NotificationDraft(
                    owner: owner, eventID: eventID, dedupeKey: "\(zone)/request/\(requestID)", zoneID: zoneID, reason: nil,
                    recordName: nil, fields: [:], collapseID: nil, deviceID: device))
            }
        }
        if let trace = causation.traceParent {
            for index in drafts.indices { drafts[index].traceParent = trace }
        }
        return drafts
    }

    /// The device a notification to `subscriber` is marked as coming from: the device that wrote the
    /// change, when the subscriber wrote it. That device's couriers are not handed the notification
    /// (a device is not pushed its own change); the subscriber's other devices are. A change another
    /// user wrote is marked with no device, so no user can keep a notification from another's
    /// devices by naming one of them.
    public static func origin(of causation: Causation, for subscriber: String) -> String? {
        guard let device = causation.deviceID, causation.userRecordName == subscriber else { return nil }
        return device
    }

    /// Whether a courier of `courierDevice` (nil: a courier that named no device) is handed a
    /// notification marked as coming from `notificationDevice`: always, unless both name the same device.
    public static func hands(notificationFrom notificationDevice: String?, toCourierOf courierDevice: String?) -> Bool {
        guard let notificationDevice, let courierDevice else { return true }
        return notificationDevice != courierDevice
    }

    /// Why a query subscription fires for a change, and the record image the notification describes.
    static func queryReason(_ change: Change, query: RecordQuery, firesOn: FiresOn) -> (QueryNotificationReason, Record)? {
        switch change {
        case .zone:
            return nil
        case .saved(let after, let before, let created):
            guard after.recordType == query.recordType else { return nil }
            let matchesAfter = query.matches(after)
            if created {
                return matchesAfter && firesOn.contains(.create) ? (.recordCreated, after) : nil
            }
            // An update whose before-image is unknown counts as matching before exactly when it
            // matches after (the worker looks the image up before it gives up on it).
            let matchedBefore = before.map { query.matches($0) } ?? matchesAfter
            switch (matchedBefore, matchesAfter) {
            case (true, true): return firesOn.contains(.update) ? (.recordUpdated, after) : nil
            case (false, true): return firesOn.contains(.create) ? (.recordCreated, after) : nil
            case (true, false): return firesOn.contains(.delete) ? (.recordDeleted, before ?? after) : nil
            case (false, false): return nil
            }
        case .deleted(_, let recordType, let last):
            guard recordType == query.recordType, let last, firesOn.contains(.delete), query.matches(last) else { return nil }
            return (.recordDeleted, last)
        }
    }

    /// A field value as an APNs collapse id: text of at most 64 bytes, else none.
    static func collapseText(_ value: FieldValue) -> String? {
        let text: String
        switch value {
        case .string(let string): text = string
        case .int64(let number): text = String(number)
        case .reference(let reference): text = reference.recordName
        default: return nil
        }
        return text.utf8.count <= 64 && !text.isEmpty ? text : nil
    }
}
