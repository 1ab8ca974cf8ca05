import Foundation

/// What a subscription watches: records matching a query, one zone, or a whole database.
public enum SubscriptionType: String, Sendable, Hashable, Codable, CaseIterable {
    case query, zone, database

    /// Reads the web service's names (`query`, `zone`, `database`) and CloudKit JS's constants
    /// (`QUERY`, `RECORD_ZONE`, `DATABASE`).
    public init?(wire: String) {
        switch wire.lowercased() {
        case "query": self = .query
        case "zone", "record_zone", "recordzone": self = .zone
        case "database": self = .database
        default: return nil
        }
    }
}

/// The record changes a query subscription fires on.
public struct FiresOn: OptionSet, Sendable, Hashable, Codable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    public static let create = FiresOn(rawValue: 1)
    public static let update = FiresOn(rawValue: 2)
    public static let delete = FiresOn(rawValue: 4)

    /// The wire names, in CloudKit's order.
    public var names: [String] {
        [(FiresOn.create, "create"), (.update, "update"), (.delete, "delete")].filter { contains($0.0) }.map(\.1)
    }
}

/// How a notification presents itself on a device, and which record fields a query notification carries.
public struct NotificationInfo: Sendable, Hashable, Codable {
    public var alertBody: String?
    public var alertLocalizationKey: String?
    public var alertLocalizationArgs: [String]?
    public var alertActionLocalizationKey: String?
    public var alertLaunchImage: String?
    public var title: String?
    public var titleLocalizationKey: String?
    public var titleLocalizationArgs: [String]?
    public var subtitle: String?
    public var subtitleLocalizationKey: String?
    public var subtitleLocalizationArgs: [String]?
    public var soundName: String?
    public var shouldBadge: Bool?
    public var shouldSendContentAvailable: Bool?
    public var shouldSendMutableContent: Bool?
    public var category: String?
    /// The record field whose value becomes the push's collapse id (query subscriptions).
    public var collapseIDKey: String?
    /// Record fields copied into a query notification.
    public var desiredKeys: [String]?

    /// Creates an empty notification info.
    public init() {}

    /// Whether the push shows the user anything (else it is a silent, content-available push).
    public var isAlert: Bool {
        [alertBody, alertLocalizationKey, title, titleLocalizationKey, subtitle, subtitleLocalizationKey, soundName]
            .contains { $0 != nil } || shouldBadge == true
    }
}

/// A subscription as stored: who owns it, what it watches and how it notifies.
public struct Subscription: Sendable, Hashable {
    /// Unique per subscriber and database.
    public var subscriptionID: String
    public var type: SubscriptionType
    /// The zone a query or zone subscription watches; nil: every zone of the database (`zoneWide`
    /// query subscriptions and database subscriptions).
    public var zoneID: ZoneID?
    /// The predicate of a query subscription.
    public var query: RecordQuery?
    /// The query as the client sent it (without `sortBy`), echoed back in answers.
    public var queryJSON: JSONValue?
    public var firesOn: FiresOn
    public var firesOnce: Bool
    public var notificationInfo: NotificationInfo?

    /// Creates a subscription (already checked).
    public init(subscriptionID: String, type: SubscriptionType, zoneID: ZoneID?, query: RecordQuery?, queryJSON: JSONValue?,
                firesOn: FiresOn, firesOnce: Bool, notificationInfo: NotificationInfo?) {
        self.subscriptionID = subscriptionID
        self.type = type
        self.zoneID = zoneID
        self.query = query
        self.queryJSON = queryJSON
        self.firesOn = firesOn
        self.firesOnce = firesOnce
        self.notificationInfo = notificationInfo
    }

    /// Whether a query subscription watches every zone of its database.
    public var zoneWide: Bool { type == .query && zoneID == nil }

    /// Bounds on what one subscription may hold.
    public struct Limits: Sendable, Hashable {
        /// Bytes of one text of `notificationInfo`.
        public var maxTextBytes = 1_024
        /// Entries of a localization argument list.
        public var maxArguments = 16
        /// Entries of `desiredKeys`.
        public var maxDesiredKeys = 64
        /// The query's bounds (the same as `records/query`'s).
        public var query = RecordQuery.Limits()
        /// The defaults.
        public init() {}
    }

    /// Checks a subscription dictionary sent to `subscriptions/modify` for a database of `scope`.
    /// `database` names the database the subscription lives in (a zone's owner must be its owner).
    /// A missing `subscriptionID` gets `newID()`.
    public static func parse(
        _ json: JSONValue, scope: DatabaseScope, databaseOwner: String, limits: Limits = Limits(), newID: () -> String = { UUID().uuidString }
    ) throws(StratusError) -> Subscription {
        guard case .object(let members) = json else { throw StratusError(.badRequest, "subscription must be a dictionary") }
        // The definition is stored as sent (jsonb holds no NUL): refused whole, wherever it hides.
        try ClientText.check(json, "subscription")
        let known: Set<String> = ["subscriptionID", "subscriptionType", "query", "zoneID", "zoneWide", "firesOn", "firesOnce", "notificationInfo"]
        if let unknown = members.keys.filter({ !known.contains($0) }).sorted().first {
            throw StratusError(.badRequest, "subscription: unknown key '\(unknown.prefix(64))'")
        }
        let subscriptionID: String
        switch members["subscriptionID"] {
        case nil, .null: subscriptionID = newID()
        case .string(let id): subscriptionID = id
        default: throw StratusError(.badRequest, "subscription.subscriptionID must be a string")
        }
        try validate(subscriptionID: subscriptionID)
        guard let typeText = members["subscriptionType"]?.stringValue else {
            throw StratusError(.badRequest, "subscription '\(ClientText.excerpt(subscriptionID))': subscriptionType is required (query, zone or database)")
        }
        guard let type = SubscriptionType(wire: typeText) else {
            throw StratusError(.badRequest, "subscription '\(ClientText.excerpt(subscriptionID))': unknown subscriptionType '\(typeText.prefix(64))'; use query, zone or database")
        }
        let place = "subscription '\(ClientText.excerpt(subscriptionID))'"
        let allowed: [DatabaseScope: Set<SubscriptionType>] = [.public: [.query], .private: [.query, .zone, .database], .shared: [.database]]
        guard allowed[scope]!.contains(type) else {
            throw StratusError(.badRequest, "\(place): the \(scope.rawValue) database takes only \(allowed[scope]!.map(\.rawValue).sorted().joined(separator: " and ")) subscriptions")
        }
        var zoneID: ZoneID?
        if let zone = members["zoneID"], zone != .null {
            zoneID = try parseZoneID(zone, place: place, databaseOwner: databaseOwner)
        }
        var zoneWide = false
        if let flag = members["zoneWide"], flag != .null {
            guard case .bool(let value) = flag else { throw StratusError(.badRequest, "\(place): zoneWide must be true or false") }
            zoneWide = value
        }
        var firesOnce = false
        if let flag = members["firesOnce"], flag != .null {
            guard case .bool(let value) = flag else { throw StratusError(.badRequest, "\(place): firesOnce must be true or false") }
            firesOnce = value
        }
        var firesOn: FiresOn = []
        if let list = members["firesOn"], list != .null {
            guard case .array(let entries) = list, entries.count <= 3 else {
                throw StratusError(.badRequest, "\(place): firesOn must be a list of create, update and delete")
            }
            for entry in entries {
                switch entry.stringValue?.lowercased() {
                case "create": firesOn.insert(.create)
                case "update": firesOn.insert(.update)
                case "delete": firesOn.insert(.delete)
                default: throw StratusError(.badRequest, "\(place): firesOn entries must be create, update or delete")
                }
            }
        }
        var query: RecordQuery?
        var queryJSON: JSONValue?
        switch type {
        case .query:
            guard let queryValue = members["query"], queryValue != .null else { throw StratusError(.badRequest, "\(place): a query subscription needs a query") }
            do {
                query = try RecordQuery.parse(queryValue, limits: limits.query)
            } catch {
                throw StratusError(error.code, "\(place): \(error.reason)")
            }
            if case .object(let members) = queryValue {
                // What is kept is what is evaluated: order is meaningless for a notification.
                queryJSON = .object(members.filter { $0.key == "recordType" || $0.key == "filterBy" })
            }
            guard !firesOn.isEmpty else {
                throw StratusError(.badRequest, "\(place): firesOn must name at least one of create, update and delete")
            }
            if zoneWide {
                guard zoneID == nil else { throw StratusError(.badRequest, "\(place): zoneWide and zoneID cannot both be given") }
            } else if zoneID == nil {
                zoneID = ZoneID(zoneName: ZoneID.defaultZoneName, ownerRecordName: databaseOwner)
            }
            if scope == .public, let zone = zoneID, !zone.isDefaultZone {
                throw StratusError(.zoneNotFound, "\(place): the public database has only the default zone")
            }
        case .zone:
            guard let zone = zoneID else { throw StratusError(.badRequest, "\(place): a zone subscription needs a zoneID") }
            guard !zone.isDefaultZone else {
                throw StratusError(.badRequest, "\(place): zone subscriptions watch custom zones; use a query subscription for the default zone")
            }
            try refuse(members, ["query", "firesOn", "firesOnce"], zoneWide, "zone", place)
        case .database:
            guard zoneID == nil else { throw StratusError(.badRequest, "\(place): a database subscription takes no zoneID") }
            try refuse(members, ["query", "firesOn", "firesOnce"], zoneWide, "database", place)
        }
        var info: NotificationInfo?
        if let value = members["notificationInfo"], value != .null {
            info = try parseNotificationInfo(value, type: type, place: place, limits: limits)
        }
        return Subscription(
            subscriptionID: subscriptionID, type: type, zoneID: zoneID, query: query, queryJSON: queryJSON,
            firesOn: type == .query ? firesOn : [.create, .update, .delete], firesOnce: firesOnce, notificationInfo: info)
    }

    /// Checks a subscription id: 1–255 bytes, no control characters.
    public static func validate(subscriptionID: String) throws(StratusError) {
        guard !subscriptionID.isEmpty, subscriptionID.utf8.count <= 255 else {
            throw StratusError(.badRequest, "subscriptionID must be 1 to 255 bytes, got \(subscriptionID.utf8.count)")
        }
        guard !subscriptionID.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw StratusError(.badRequest, "subscriptionID must not contain control characters (NUL included)")
        }
    }

    private static func refuse(_ members: [String: JSONValue], _ keys: [String], _ zoneWide: Bool, _ type: String, _ place: String) throws(StratusError) {
        for key in keys {
            if let value = members[key], value != .null, value != .bool(false), value != .array([]) {
                throw StratusError(.badRequest, "\(place): \(key) applies only to query subscriptions, not \(type) subscriptions")
            }
        }
        if zoneWide { throw StratusError(.badRequest, "\(place): zoneWide applies only to query subscriptions") }
    }

    private static func parseZoneID(_ json: JSONValue, place: String, databaseOwner: String) throws(StratusError) -> ZoneID {
        guard case .object = json, let name = json["zoneName"]?.stringValue else {
            throw StratusError(.badRequest, "\(place): zoneID must be a dictionary with a zoneName")
        }
        if name != ZoneID.defaultZoneName {
            do { try ZoneID.validate(zoneName: name) } catch { throw StratusError(.badRequest, "\(place): \(error.reason)") }
        }
        let owner = (json["ownerRecordName"] ?? json["ownerName"])?.stringValue ?? databaseOwner
        try ClientText.check(owner, "\(place): zoneID.ownerRecordName")
        // Another user's zone does not exist for the caller, as with every zone request.
        guard owner == databaseOwner || owner == ZoneID.defaultOwnerName else {
            throw StratusError(.zoneNotFound, "Zone '\(ClientText.excerpt(name))' does not exist")
        }
        return ZoneID(zoneName: name, ownerRecordName: databaseOwner)
    }

    private static func parseNotificationInfo(_ json: JSONValue, type: SubscriptionType, place: String, limits: Limits) throws(StratusError) -> NotificationInfo {
        guard case .object(let members) = json else { throw StratusError(.badRequest, "\(place): notificationInfo must be a dictionary") }
        var info = NotificationInfo()
        func text(_ key: String) throws(StratusError) -> String? {
            guard let value = members[key], value != .null else { return nil }
            guard case .string(let text) = value else { throw StratusError(.badRequest, "\(place): notificationInfo.\(key) must be a string") }
            guard text.utf8.count <= limits.maxTextBytes else {
                throw StratusError(.badRequest, "\(place): notificationInfo.\(key) is \(text.utf8.count) bytes; at most \(limits.maxTextBytes) are allowed")
            }
            try ClientText.check(text, "\(place): notificationInfo.\(key)")
            return text
        }
        func texts(_ key: String, limit: Int) throws(StratusError) -> [String]? {
            guard let value = members[key], value != .null else { return nil }
            guard case .array(let entries) = value else { throw StratusError(.badRequest, "\(place): notificationInfo.\(key) must be a list of strings") }
            guard entries.count <= limit else {
                throw StratusError(.badRequest, "\(place): notificationInfo.\(key) has \(entries.count) entries; at most \(limit) are allowed")
            }
            var result: [String] = []
            for entry in entries {
                guard case .string(let text) = entry, text.utf8.count <= limits.maxTextBytes else {
                    throw StratusError(.badRequest, "\(place): notificationInfo.\(key) entries must be strings of at most \(limits.maxTextBytes) bytes")
                }
                try ClientText.check(text, "\(place): notificationInfo.\(key)")
                result.append(text)
            }
            return result
        }
        func flag(_ key: String) throws(StratusError) -> Bool? {
            guard let value = members[key], value != .null else { return nil }
            guard case .bool(let flag) = value else { throw StratusError(.badRequest, "\(place): notificationInfo.\(key) must be true or false") }
            return flag
        }
        let known: Set<String> = [
            "alertBody", "alertLocalizationKey", "alertLocalizationArgs", "alertActionLocalizationKey", "alertLaunchImage",
            "title", "titleLocalizationKey", "titleLocalizationArgs", "subtitle", "subtitleLocalizationKey", "subtitleLocalizationArgs",
            "soundName", "shouldBadge", "shouldSendContentAvailable", "shouldSendMutableContent", "category", "collapseIDKey", "desiredKeys",
        ]
        if let unknown = members.keys.filter({ !known.contains($0) }).sorted().first {
            throw StratusError(.badRequest, "\(place): notificationInfo has an unknown key '\(unknown.prefix(64))'")
        }
        info.alertBody = try text("alertBody")
        info.alertLocalizationKey = try text("alertLocalizationKey")
        info.alertLocalizationArgs = try texts("alertLocalizationArgs", limit: limits.maxArguments)
        info.alertActionLocalizationKey = try text("alertActionLocalizationKey")
        info.alertLaunchImage = try text("alertLaunchImage")
        info.title = try text("title")
        info.titleLocalizationKey = try text("titleLocalizationKey")
        info.titleLocalizationArgs = try texts("titleLocalizationArgs", limit: limits.maxArguments)
        info.subtitle = try text("subtitle")
        info.subtitleLocalizationKey = try text("subtitleLocalizationKey")
        info.subtitleLocalizationArgs = try texts("subtitleLocalizationArgs", limit: limits.maxArguments)
        info.soundName = try text("soundName")
        info.shouldBadge = try flag("shouldBadge")
        info.shouldSendContentAvailable = try flag("shouldSendContentAvailable")
        info.shouldSendMutableContent = try flag("shouldSendMutableContent")
        info.category = try text("category")
        info.collapseIDKey = try text("collapseIDKey")
        info.desiredKeys = try texts("desiredKeys", limit: limits.maxDesiredKeys)
        if type != .query, info.desiredKeys?.isEmpty == false || info.collapseIDKey != nil {
            throw StratusError(.badRequest, "\(place): notificationInfo.desiredKeys and collapseIDKey apply only to query subscriptions")
        }
        for key in info.desiredKeys ?? [] {
            do { try Record.validate(fieldName: key) } catch { throw StratusError(.badRequest, "\(place): notificationInfo.desiredKeys: \(error.reason)") }
        }
        if let key = info.collapseIDKey {
            do { try Record.validate(fieldName: key) } catch { throw StratusError(.badRequest, "\(place): notificationInfo.collapseIDKey: \(error.reason)") }
        }
        return info
    }

    /// The subscription dictionary clients get back.
    public var json: JSONValue {
        var members: [String: JSONValue] = [
            "subscriptionID": .string(subscriptionID),
            "subscriptionType": .string(type.rawValue),
        ]
        if let zoneID {
            members["zoneID"] = .object(["zoneName": .string(zoneID.zoneName), "ownerRecordName": .string(zoneID.ownerRecordName)])
        }
        if type == .query {
            members["zoneWide"] = .bool(zoneWide)
            members["firesOn"] = .array(firesOn.names.map(JSONValue.string))
            members["firesOnce"] = .bool(firesOnce)
            if let queryJSON { members["query"] = queryJSON }
        }
        if let notificationInfo, let data = try? EventCoding.encoder.encode(notificationInfo),
           let value = try? EventCoding.decoder.decode(JSONValue.self, from: data) {
            members["notificationInfo"] = value
        }
        return .object(members)
    }

    /// The stored definition (the subscription dictionary itself): parsing it again gives the same subscription.
    public static func stored(_ json: JSONValue, scope: DatabaseScope, databaseOwner: String) throws(StratusError) -> Subscription {
        // Stored definitions were checked under the limits of their day; read them under generous ones.
        var limits = Limits()
        limits.maxTextBytes = .max
        limits.maxArguments = .max
        limits.maxDesiredKeys = .max
        limits.query.maxFilters = .max
        limits.query.maxListValues = .max
        limits.query.maxSearchTokens = .max
        limits.query.maxSearchTextBytes = .max
        return try parse(json, scope: scope, databaseOwner: databaseOwner, limits: limits)
    }
}
