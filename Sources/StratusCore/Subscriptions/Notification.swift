import Foundation

/// Why a query subscription fired (CloudKit's `queryNotificationReason`).
public enum QueryNotificationReason: String, Sendable, Hashable, Codable {
    case recordCreated, recordUpdated, recordDeleted

    /// The number CloudKit's push payload uses (`fo`): 1 created, 2 updated, 3 deleted.
    public var code: Int64 {
        switch self {
        case .recordCreated: 1
        case .recordUpdated: 2
        case .recordDeleted: 3
        }
    }
}

/// A subscription together with where it lives and who owns it: what the evaluating worker reads.
public struct OwnedSubscription: Sendable, Hashable {
    /// The database the subscription watches.
    public var database: DatabaseID
    /// The user the subscription belongs to and who receives its notifications.
    public var subscriber: String
    public var subscription: Subscription
    /// When it was saved, in milliseconds: it fires only for events appended from then on, so a
    /// replay of the event log never fires it for changes made before it existed.
    public var createdAt: Int64

    /// Creates an owned subscription.
    public init(database: DatabaseID, subscriber: String, subscription: Subscription, createdAt: Int64) {
        self.database = database
        self.subscriber = subscriber
        self.subscription = subscription
        self.createdAt = createdAt
    }
}

/// A notification a subscription produced, before the log gives it its place.
public struct NotificationDraft: Sendable, Hashable {
    public var owner: OwnedSubscription
    /// The event that caused it.
    public var eventID: Int64
    /// Identifies it among the subscription's notifications: the same change always gives the same
    /// key, so redelivery and replay never log it twice. Query notifications: one per event; zone and
    /// database notifications: one per zone and request (one per committed write, not per record).
    public var dedupeKey: String
    public var zoneID: ZoneID
    public var reason: QueryNotificationReason?
    public var recordName: String?
    /// The desired fields of a query notification's record (the after-image; for a delete, what the event kept).
    public var fields: [String: FieldValue]
    /// The value of the `collapseIDKey` field, if any.
    public var collapseID: String?
    /// The device the change came from, when the subscriber made it
    /// (`SubscriptionEvaluation.origin`): that device's couriers are not handed it.
    public var deviceID: String?
    /// The trace of the write that caused it (`Causation.traceParent`), which its deliveries continue.
    public var traceParent: String?

    /// Creates a draft.
    public init(owner: OwnedSubscription, eventID: Int64, dedupeKey: String, zoneID: ZoneID, reason: QueryNotificationReason?,
                recordName: String?, fields: [String: FieldValue], collapseID: String?, deviceID: String? = nil) {
        self.owner = owner
        self.eventID = eventID
        self.dedupeKey = dedupeKey
        self.zoneID = zoneID
        self.reason = reason
        self.recordName = recordName
        self.fields = fields
        self.collapseID = collapseID
        self.deviceID = deviceID
    }

    /// The notification's type: the subscription's.
    public var type: SubscriptionType { owner.subscription.type }

    /// CloudKit's push payload: `aps` from the notification info and `ck` naming the change —
    /// `qry` for query, `fet` for zone, `met` for database notifications.
    /// - Parameters:
    ///   - notificationID: the logged notification's id (`nid`).
    ///   - badge: the recipient's unread count, shown when the subscription asks for a badge.
    public func payload(notificationID: UUID, badge: Int64?) -> JSONValue {
        let info = owner.subscription.notificationInfo ?? NotificationInfo()
        var alert: [String: JSONValue] = [:]
        alert["body"] = info.alertBody.map(JSONValue.string)
        alert["loc-key"] = info.alertLocalizationKey.map(JSONValue.string)
        alert["loc-args"] = info.alertLocalizationArgs.map { .array($0.map(JSONValue.string)) }
        alert["action-loc-key"] = info.alertActionLocalizationKey.map(JSONValue.string)
        alert["launch-image"] = info.alertLaunchImage.map(JSONValue.string)
        alert["title"] = info.title.map(JSONValue.string)
        alert["title-loc-key"] = info.titleLocalizationKey.map(JSONValue.string)
        alert["title-loc-args"] = info.titleLocalizationArgs.map { .array($0.map(JSONValue.string)) }
        alert["subtitle"] = info.subtitle.map(JSONValue.string)
        alert["subtitle-loc-key"] = info.subtitleLocalizationKey.map(JSONValue.string)
        alert["subtitle-loc-args"] = info.subtitleLocalizationArgs.map { .array($0.map(JSONValue.string)) }
        var aps: [String: JSONValue] = [:]
        if !alert.isEmpty { aps["alert"] = .object(alert) }
        aps["sound"] = info.soundName.map(JSONValue.string)
        if info.shouldBadge == true, let badge { aps["badge"] = .int(badge) }
        if info.shouldSendContentAvailable == true || !info.isAlert { aps["content-available"] = .int(1) }
        if info.shouldSendMutableContent == true { aps["mutable-content"] = .int(1) }
        aps["category"] = info.category.map(JSONValue.string)

        let database = owner.database
        var ck: [String: JSONValue] = [
            "ckuserid": .string(owner.subscriber),
            "nid": .string(notificationID.uuidString.lowercased()),
            "cid": .string(database.container),
            "ce": .int(database.environment == .production ? 2 : 1),
        ]
        let subscriptionID = JSONValue.string(owner.subscription.subscriptionID)
        switch type {
        case .query:
            var query: [String: JSONValue] = [
                "dbs": .int(Self.databaseScopeCode(database.scope)),
                "sid": subscriptionID,
                "zid": .string(zoneID.zoneName),
                "zoid": .string(zoneID.ownerRecordName),
            ]
            query["rid"] = recordName.map(JSONValue.string)
            query["fo"] = reason.map { .int($0.code) }
            if !fields.isEmpty {
                query["af"] = .object(fields.mapValues { FieldCoding.encode($0)["value"] ?? .null })
            }
            ck["qry"] = .object(query)
        case .zone:
            ck["fet"] = .object([
                "dbs": .int(Self.databaseScopeCode(database.scope)), "sid": subscriptionID,
                "zid": .string(zoneID.zoneName), "zoid": .string(zoneID.ownerRecordName),
            ])
        case .database:
            ck["met"] = .object(["dbs": .int(Self.databaseScopeCode(database.scope)), "sid": subscriptionID])
        }
        return .object(["aps": .object(aps), "ck": .object(ck)])
    }

    /// CloudKit's database scope numbers: 1 public, 2 private, 3 shared.
    public static func databaseScopeCode(_ scope: DatabaseScope) -> Int64 {
        switch scope {
        case .public: 1
        case .private: 2
        case .shared: 3
        }
    }
}
