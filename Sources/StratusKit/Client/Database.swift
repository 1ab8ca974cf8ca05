import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// How a save treats the server's version of the record (CloudKit's save policies).
public enum SavePolicy: Sendable, Hashable, Codable {
    /// Save only if the server's record is the one the record's change tag names (`update`, or
    /// `create` for a record without a tag): else `CONFLICT` (or `EXISTS`) with the server's record.
    case ifServerRecordUnchanged
    /// Only the sent fields, whatever the server holds (`forceUpdate`: creates a missing record).
    case changedKeys
    /// The whole record, whatever the server holds (`forceReplace`: unsent fields are dropped).
    case allKeys
    /// The whole record if the server's is the one the tag names (`replace`; `create` without a tag).
    case replaceIfServerRecordUnchanged

    func operationType(hasTag: Bool) -> String {
        switch self {
        case .ifServerRecordUnchanged: hasTag ? "update" : "create"
        case .replaceIfServerRecordUnchanged: hasTag ? "replace" : "create"
        case .changedKeys: "forceUpdate"
        case .allKeys: "forceReplace"
        }
    }
}

/// A query: a record type, filters and sorts in CloudKit's terms (`filterBy`, `sortBy`).
public struct Query: Sendable, Hashable {
    public struct Filter: Sendable, Hashable {
        public var fieldName: String
        /// CloudKit's comparator: `EQUALS`, `LESS_THAN`, `BEGINS_WITH`, `IN`, …
        public var comparator: String
        public var value: FieldValue
        public init(_ fieldName: String, _ comparator: String, _ value: FieldValue) {
            self.fieldName = fieldName
            self.comparator = comparator
            self.value = value
        }
    }

    public struct Sort: Sendable, Hashable {
        public var fieldName: String
        public var ascending: Bool
        public init(_ fieldName: String, ascending: Bool = true) {
            self.fieldName = fieldName
            self.ascending = ascending
        }
    }

    public var recordType: String
    public var filters: [Filter]
    public var sorts: [Sort]

    public init(recordType: String, filters: [Filter] = [], sorts: [Sort] = []) {
        self.recordType = recordType
        self.filters = filters
        self.sorts = sorts
    }

    var wire: JSON {
        [
            "recordType": .string(recordType),
            "filterBy": .array(filters.map { ["fieldName": .string($0.fieldName), "comparator": .string($0.comparator), "fieldValue": $0.value.wire] }),
            "sortBy": .array(sorts.map { ["fieldName": .string($0.fieldName), "ascending": .bool($0.ascending)] }),
        ]
    }
}

/// One database of a container: every record, zone, change, subscription, asset and share
/// operation Stratus serves, typed. Each call is one request (retried by the container's policy).
public struct StratusDatabase: Sendable {
    public let container: StratusContainer
    public let scope: DatabaseScope
    /// The most operations or names one request carries (the server's limit).
    public static let maxOperationsPerRequest = 200

    func call(_ operation: String, _ body: JSON?, method: String = "POST") async throws -> JSON {
        try await container.call(database: scope, operation: operation, body: body, method: method)
    }

    // MARK: Zones

    public func allZones() async throws -> [Zone] {
        try (try await call("zones/list", nil, method: "GET"))["zones"]?.array?.map(zone) ?? []
    }

    /// Zones by id: each answers its zone or its error (`ZONE_NOT_FOUND`).
    public func zones(_ ids: [ZoneID]) async throws -> [ZoneID: Result<Zone, StratusKitError>] {
        try Self.bounded(ids.count, "zones")
        let answer = try await call("zones/lookup", ["zones": .array(ids.map(\.wire))])
        return try zoneResults(answer)
    }

    /// Creates and deletes zones in one transaction; each answers its zone, `nil` for a deleted
    /// one, or its error.
    public func modifyZones(saving: [Zone] = [], deleting: [ZoneID] = []) async throws -> [ZoneID: Result<Zone?, StratusKitError>] {
        try Self.bounded(saving.count + deleting.count, "zone operations")
        var operations: [JSON] = saving.map { zone in
            var members: [String: JSON] = ["zoneID": zone.zoneID.wire]
            if let ttl = zone.defaultTimeToLive { members["defaultTimeToLive"] = .int(ttl) }
            return ["operationType": "create", "zone": .object(members)]
        }
        operations += deleting.map { ["operationType": "delete", "zone": ["zoneID": $0.wire]] }
        let answer = try await call("zones/modify", ["operations": .array(operations)])
        var results: [ZoneID: Result<Zone?, StratusKitError>] = [:]
        for entry in answer["zones"]?.array ?? [] {
            guard let id = zoneID(entry["zoneID"]) else { continue }
            if let error = StratusKitError(wire: entry, httpStatus: 200) {
                results[id] = .failure(error)
            } else if entry["deleted"]?.bool == true {
                results[id] = .success(nil)
            } else {
                results[id] = .success(try zone(entry))
            }
        }
        return results
    }

    // MARK: Records

    /// What one record operation of `modifyRecords` answered.
    public enum RecordResult: Sendable, Hashable {
        case saved(Record)
        case deleted(RecordID)
        case failed(RecordID, StratusKitError)
    }

    /// Saves and deletes records of one zone in one request. `atomic` (custom zones): all or
    /// nothing, the others answering `ATOMIC_ERROR`. Deletes need the record's change tag unless
    /// `deletePolicy` is `.allKeys` (CloudKit's delete regardless).
    public func modifyRecords(
        saving: [Record] = [], deleting: [RecordID] = [], deleteTags: [RecordID: String] = [:], zoneID: ZoneID,
        savePolicy: SavePolicy = .ifServerRecordUnchanged, atomic: Bool = true, desiredKeys: [String]? = nil
    ) async throws -> [RecordResult] {
        try Self.bounded(saving.count + deleting.count, "record operations")
        var operations: [JSON] = []
        for record in saving {
            guard record.recordID.zoneID == zoneID else { throw StratusKitError.invalidArgument("record \(record.recordID) is not in zone \(zoneID)") }
            let sealed = try FieldSealing.seal(record, with: container.keyProvider)
            operations.append(["operationType": .string(savePolicy.operationType(hasTag: record.recordChangeTag != nil)), "record": RecordCoding.encode(record, sealed: sealed)])
        }
        for id in deleting {
            var record: [String: JSON] = ["recordName": .string(id.recordName)]
            if let tag = deleteTags[id] { record["recordChangeTag"] = .string(tag) }
            operations.append(["operationType": .string(deleteTags[id] == nil ? "forceDelete" : "delete"), "record": .object(record)])
        }
        var body: [String: JSON] = ["operations": .array(operations), "zoneID": zoneID.wire, "atomic": .bool(atomic)]
        if let desiredKeys { body["desiredKeys"] = .array(desiredKeys.map(JSON.string)) }
        let answer = try await call("records/modify", .object(body))
        let entries = answer["records"]?.array ?? []
        let requested = saving.map(\.recordID) + deleting
        var results: [RecordResult] = []
        for (index, entry) in entries.enumerated() {
            let name = entry["recordName"]?.string ?? (index < requested.count ? requested[index].recordName : "")
            let id = RecordID(recordName: name, zoneID: zoneID)
            if var error = StratusKitError(wire: entry, httpStatus: 200) {
                error.zoneID = zoneID
                if let server = entry["serverRecord"] { error.serverRecord = try? FieldSealing.open(RecordCoding.decode(server, zoneID: zoneID), with: container.keyProvider, strict: false) }
                results.append(.failed(id, error))
            } else if entry["deleted"]?.bool == true {
                results.append(.deleted(id))
            } else {
                results.append(.saved(try FieldSealing.open(RecordCoding.decode(entry, zoneID: zoneID), with: container.keyProvider, strict: false)))
            }
        }
        return results
    }

    /// Saves one record; throws its error (`CONFLICT` carries the server's record).
    public func save(_ record: Record, savePolicy: SavePolicy = .ifServerRecordUnchanged) async throws -> Record {
        let results = try await modifyRecords(saving: [record], zoneID: record.recordID.zoneID, savePolicy: savePolicy)
        switch results.first {
        case .saved(let saved): return saved
        case .failed(_, let error): throw error
        default: throw StratusKitError.invalidResponse("records/modify answered no record")
        }
    }

    /// Deletes one record, whatever its version.
    public func deleteRecord(_ id: RecordID) async throws {
        let results = try await modifyRecords(deleting: [id], zoneID: id.zoneID)
        if case .failed(_, let error) = results.first { throw error }
    }

    /// Records by id (one zone per request; ids of several zones take a request each); only
    /// `desiredKeys` of each when given. Unknown records answer `NOT_FOUND`.
    public func records(for ids: [RecordID], desiredKeys: [String]? = nil) async throws -> [RecordID: Result<Record, StratusKitError>] {
        var results: [RecordID: Result<Record, StratusKitError>] = [:]
        for (zone, names) in Dictionary(grouping: ids, by: \.zoneID) {
            for start in stride(from: 0, to: names.count, by: Self.maxOperationsPerRequest) {
                let chunk = names[start..<min(start + Self.maxOperationsPerRequest, names.count)]
                var body: [String: JSON] = ["records": .array(chunk.map { ["recordName": .string($0.recordName)] }), "zoneID": zone.wire]
                if let desiredKeys { body["desiredKeys"] = .array(desiredKeys.map(JSON.string)) }
                let answer = try await call("records/lookup", .object(body))
                for entry in answer["records"]?.array ?? [] {
                    let id = RecordID(recordName: entry["recordName"]?.string ?? "", zoneID: zone)
                    if let error = StratusKitError(wire: entry, httpStatus: 200) {
                        results[id] = .failure(error)
                    } else {
                        results[id] = Result { try FieldSealing.open(RecordCoding.decode(entry, zoneID: zone), with: container.keyProvider, strict: false) }
                            .mapError { $0 as? StratusKitError ?? StratusKitError.invalidResponse("\($0)") }
                    }
                }
            }
        }
        return results
    }

    /// One record; throws `NOT_FOUND` when there is none.
    public func record(for id: RecordID, desiredKeys: [String]? = nil) async throws -> Record {
        guard let result = try await records(for: [id], desiredKeys: desiredKeys)[id] else {
            throw StratusKitError.invalidResponse("records/lookup did not answer \(id)")
        }
        return try result.get()
    }

    /// A page of a query's results and the marker of the next page (nil: none left).
    public struct QueryPage: Sendable {
        public var records: [Record]
        public var continuationMarker: String?
    }

    /// One page of a query; pass the returned marker for the next.
    public func query(
        _ query: Query, zoneID: ZoneID = .default, resultsLimit: Int? = nil, continuationMarker: String? = nil, desiredKeys: [String]? = nil
    ) async throws -> QueryPage {
        var body: [String: JSON] = ["query": query.wire, "zoneID": zoneID.wire]
        if let resultsLimit { body["resultsLimit"] = .int(Int64(min(max(resultsLimit, 1), 200))) }
        if let continuationMarker { body["continuationMarker"] = .string(continuationMarker) }
        if let desiredKeys { body["desiredKeys"] = .array(desiredKeys.map(JSON.string)) }
        let answer = try await call("records/query", .object(body))
        let records = try (answer["records"]?.array ?? []).map { try FieldSealing.open(RecordCoding.decode($0, zoneID: zoneID), with: container.keyProvider, strict: false) }
        return QueryPage(records: records, continuationMarker: answer["continuationMarker"]?.string)
    }

    // MARK: Changes

    /// A page of a zone's changes since a token.
    public struct RecordZoneChanges: Sendable {
        public var modified: [Record]
        public var deleted: [RecordID]
        public var syncToken: String?
        public var moreComing: Bool
    }

    /// The changes of a custom zone since `syncToken` (nil: from the start), one page.
    /// `CHANGE_TOKEN_EXPIRED`: drop the zone's local copy and start again without a token.
    public func recordZoneChanges(_ zoneID: ZoneID, since syncToken: String?, resultsLimit: Int? = nil, desiredKeys: [String]? = nil) async throws -> RecordZoneChanges {
        let answer = try await recordZoneChangesAnswer(zoneID, since: syncToken, resultsLimit: resultsLimit, desiredKeys: desiredKeys)
        return try Self.recordZoneChanges(answer, zoneID: zoneID, keyProvider: container.keyProvider)
    }

    /// The `records/changes` answer of one page, not yet read into records.
    func recordZoneChangesAnswer(_ zoneID: ZoneID, since syncToken: String?, resultsLimit: Int?, desiredKeys: [String]? = nil) async throws -> JSON {
        var body: [String: JSON] = ["zoneID": zoneID.wire]
        if let syncToken { body["syncToken"] = .string(syncToken) }
        if let resultsLimit { body["resultsLimit"] = .int(Int64(min(max(resultsLimit, 1), 200))) }
        if let desiredKeys { body["desiredKeys"] = .array(desiredKeys.map(JSON.string)) }
        return try await call("records/changes", .object(body))
    }

    /// A `records/changes` answer read into a page of changes of `zoneID`.
    static func recordZoneChanges(_ answer: JSON, zoneID: ZoneID, keyProvider: (any FieldKeyProvider)?) throws -> RecordZoneChanges {
        var changes = RecordZoneChanges(modified: [], deleted: [], syncToken: answer["syncToken"]?.string, moreComing: answer["moreComing"]?.bool ?? false)
        for entry in answer["records"]?.array ?? [] {
            if entry["deleted"]?.bool == true, let name = entry["recordName"]?.string {
                changes.deleted.append(RecordID(recordName: name, zoneID: zoneID))
            } else {
                changes.modified.append(try FieldSealing.open(RecordCoding.decode(entry, zoneID: zoneID), with: keyProvider, strict: false))
            }
        }
        return changes
    }

    /// A page of the database's zone changes since a token.
    public struct DatabaseChanges: Sendable {
        public var changed: [Zone]
        public var deleted: [ZoneID]
        public var syncToken: String?
        public var moreComing: Bool
    }

    /// The zones created, changed or deleted since `syncToken` (nil: every zone), one page.
    public func databaseChanges(since syncToken: String?, resultsLimit: Int? = nil) async throws -> DatabaseChanges {
        var body: [String: JSON] = [:]
        if let syncToken { body["syncToken"] = .string(syncToken) }
        if let resultsLimit { body["resultsLimit"] = .int(Int64(min(max(resultsLimit, 1), 10_000))) }
        let answer = try await call("changes/database", .object(body))
        var changes = DatabaseChanges(changed: [], deleted: [], syncToken: answer["syncToken"]?.string ?? answer["metaSyncToken"]?.string,
                                      moreComing: answer["moreComing"]?.bool ?? false)
        for entry in answer["zones"]?.array ?? [] {
            guard let id = zoneID(entry["zoneID"]) else { continue }
            if entry["deleted"]?.bool == true { changes.deleted.append(id) } else { changes.changed.append(try zone(entry)) }
        }
        return changes
    }

    // MARK: Users

    /// Who the caller is.
    public struct UserIdentity: Sendable, Hashable {
        public var userRecordName: String
        public var emailAddress: String?
        public var givenName: String?
        public var familyName: String?
    }

    /// The caller's identity (`users/caller`); `AUTHENTICATION_REQUIRED`/`_FAILED` when signed out.
    public func callerIdentity() async throws -> UserIdentity {
        let answer = try await call("users/caller", nil, method: "GET")
        guard let name = answer["userRecordName"]?.string else { throw StratusKitError.invalidResponse("users/caller without userRecordName") }
        return UserIdentity(userRecordName: name, emailAddress: answer["lookupInfo"]?["emailAddress"]?.string ?? answer["emailAddress"]?.string,
                            givenName: answer["nameComponents"]?["givenName"]?.string, familyName: answer["nameComponents"]?["familyName"]?.string)
    }

    // MARK: Subscriptions

    /// Saves (creates or replaces) and deletes subscriptions; `subscriptions` are CloudKit's
    /// subscription dictionaries (see `Subscription`).
    public func modifySubscriptions(saving: [Subscription] = [], deleting: [String] = []) async throws -> [Result<String, StratusKitError>] {
        try Self.bounded(saving.count + deleting.count, "subscription operations")
        let operations: [JSON] = saving.map { ["operationType": "create", "subscription": $0.wire] }
            + deleting.map { ["operationType": "delete", "subscription": ["subscriptionID": .string($0)]] }
        let answer = try await call("subscriptions/modify", ["operations": .array(operations)])
        return (answer["subscriptions"]?.array ?? []).map { entry in
            if let error = StratusKitError(wire: entry, httpStatus: 200) { return .failure(error) }
            return .success(entry["subscriptionID"]?.string ?? "")
        }
    }

    public func allSubscriptions() async throws -> [Subscription] {
        (try await call("subscriptions/list", nil, method: "GET"))["subscriptions"]?.array?.compactMap(Subscription.init(wire:)) ?? []
    }

    /// A courier token: where this device's notifications are pushed (`webSocketURL`) or long-polled.
    public struct CourierToken: Sendable, Hashable, Codable {
        public var token: String
        public var webcourierURL: String
        public var webSocketURL: String?
    }

    public func createCourierToken() async throws -> CourierToken {
        let answer = try await container.call(database: nil, operation: "tokens/create", body: ["apnsEnvironment": .string(container.environment)])
        guard let token = answer["apnsToken"]?.string, let poll = answer["webcourierURL"]?.string else {
            throw StratusKitError.invalidResponse("tokens/create without a courier")
        }
        return CourierToken(token: token, webcourierURL: poll, webSocketURL: answer["webSocketURL"]?.string)
    }

    // MARK: Shares

    /// Accepts shares by short GUID (`records/accept`); each answers the share record or an error.
    public func acceptShares(shortGUIDs: [String]) async throws -> [Result<Record, StratusKitError>] {
        try Self.bounded(shortGUIDs.count, "short GUIDs")
        let answer = try await container.call(database: .public, operation: "records/accept", body: ["shortGUIDs": .array(shortGUIDs.map(JSON.string))])
        return (answer["results"]?.array ?? []).map { entry in
            if let error = StratusKitError(wire: entry, httpStatus: 200) { return .failure(error) }
            guard let share = entry["share"] else { return .failure(.invalidResponse("an accept answer without its share")) }
            return Result { try RecordCoding.decode(share, zoneID: ZoneID(wire: entry["zoneID"]) ?? .default) }
                .mapError { $0 as? StratusKitError ?? .invalidResponse("\($0)") }
        }
    }

    // MARK: Helpers

    static func bounded(_ count: Int, _ what: String) throws {
        guard count <= maxOperationsPerRequest else {
            throw StratusKitError.invalidArgument("\(count) \(what) in one request; at most \(maxOperationsPerRequest)")
        }
    }

    /// A zone id as the app names it: in the private and public databases the caller's own zones
    /// carry no owner (the server's answers spell it); in the shared database the owner tells the
    /// zones apart.
    func zoneID(_ wire: JSON?) -> ZoneID? {
        guard let id = ZoneID(wire: wire) else { return nil }
        return scope == .shared ? id : ZoneID(zoneName: id.zoneName)
    }

    func zone(_ entry: JSON) throws -> Zone {
        guard let id = zoneID(entry["zoneID"]) else { throw StratusKitError.invalidResponse("a zone without zoneID") }
        var zone = Zone(zoneID: id, atomic: entry["atomic"]?.bool ?? true, syncToken: entry["syncToken"]?.string)
        zone.defaultTimeToLive = entry["defaultTimeToLive"]?.int64
        return zone
    }

    func zoneResults(_ answer: JSON) throws -> [ZoneID: Result<Zone, StratusKitError>] {
        var results: [ZoneID: Result<Zone, StratusKitError>] = [:]
        for entry in answer["zones"]?.array ?? [] {
            guard let id = zoneID(entry["zoneID"]) else { continue }
            if let error = StratusKitError(wire: entry, httpStatus: 200) { results[id] = .failure(error) } else { results[id] = .success(try zone(entry)) }
        }
        return results
    }
}

/// A subscription as CloudKit's dictionary: a database, zone or query subscription.
public struct Subscription: Sendable, Hashable {
    public enum Kind: String, Sendable { case query, zone, database }
    public var subscriptionID: String
    public var kind: Kind
    public var zoneID: ZoneID?
    public var query: Query?
    /// `create`, `update`, `delete` (query subscriptions).
    public var firesOn: [String]
    /// CloudKit's `notificationInfo`, as the wire has it.
    public var notificationInfo: JSON?

    public init(subscriptionID: String, kind: Kind, zoneID: ZoneID? = nil, query: Query? = nil, firesOn: [String] = []) {
        self.subscriptionID = subscriptionID
        self.kind = kind
        self.zoneID = zoneID
        self.query = query
        self.firesOn = firesOn
    }

    var wire: JSON {
        var members: [String: JSON] = ["subscriptionID": .string(subscriptionID), "subscriptionType": .string(kind.rawValue)]
        if let zoneID { members["zoneID"] = zoneID.wire }
        if let query { members["query"] = query.wire }
        if !firesOn.isEmpty { members["firesOn"] = .array(firesOn.map(JSON.string)) }
        if let notificationInfo { members["notificationInfo"] = notificationInfo }
        return .object(members)
    }

    init?(wire: JSON) {
        guard let id = wire["subscriptionID"]?.string, let kind = wire["subscriptionType"]?.string.flatMap(Kind.init(rawValue:)) else { return nil }
        self.init(subscriptionID: id, kind: kind, zoneID: ZoneID(wire: wire["zoneID"]), firesOn: wire["firesOn"]?.array?.compactMap(\.string) ?? [])
        notificationInfo = wire["notificationInfo"]
    }
}
