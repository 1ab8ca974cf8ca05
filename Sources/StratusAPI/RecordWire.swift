import Foundation
import StratusCore

/// A record operation's record as a client sends it.
struct WireRecordInput: Decodable {
    var recordName: String?
    var recordType: String?
    var recordChangeTag: String?
    var fields: [String: JSONValue]?
    /// Absent: keep; null: clear; `{recordName}`: set.
    var parent: JSONValue??
    var share: JSONValue??
    var createShortGUID: Bool?
    /// The record's expiration (a Stratus extension), each as sent: absent, null or a number.
    var expirationDate: JSONValue?
    var timeToLive: JSONValue?
    /// A share record's sharing keys, as sent.
    var publicPermission: JSONValue?
    var participants: JSONValue?

    enum CodingKeys: String, CodingKey {
        case recordName, recordType, recordChangeTag, fields, parent, share, createShortGUID, expirationDate, timeToLive, publicPermission, participants
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        recordName = try container.decodeIfPresent(String.self, forKey: .recordName)
        recordType = try container.decodeIfPresent(String.self, forKey: .recordType)
        recordChangeTag = try container.decodeIfPresent(String.self, forKey: .recordChangeTag)
        fields = try container.decodeIfPresent([String: JSONValue].self, forKey: .fields)
        parent = container.contains(.parent) ? .some(try container.decode(JSONValue.self, forKey: .parent)) : nil
        share = container.contains(.share) ? .some(try container.decode(JSONValue.self, forKey: .share)) : nil
        createShortGUID = try container.decodeIfPresent(Bool.self, forKey: .createShortGUID)
        // A key sent as null is `.null`, told apart from a key not sent.
        expirationDate = container.contains(.expirationDate) ? try container.decode(JSONValue.self, forKey: .expirationDate) : nil
        timeToLive = container.contains(.timeToLive) ? try container.decode(JSONValue.self, forKey: .timeToLive) : nil
        publicPermission = container.contains(.publicPermission) ? try container.decode(JSONValue.self, forKey: .publicPermission) : nil
        participants = container.contains(.participants) ? try container.decode(JSONValue.self, forKey: .participants) : nil
    }
}

/// Turns wire records into checked `RecordInput`s and stored records into wire dictionaries.
enum RecordWire {
    /// Checks and converts one operation's record. References must stay within `zone`.
    static func input(
        _ wire: WireRecordInput, operation: RecordOperationType, zone: ZoneID, now: Int64 = Int64(Date().timeIntervalSince1970 * 1000)
    ) throws(StratusError) -> RecordInput {
        let recordName: String
        if let name = wire.recordName {
            recordName = name
        } else if operation == .create {
            // CloudKit names a record the client did not name.
            recordName = UUID().uuidString
        } else {
            throw StratusError(.badRequest, "A \(operation.rawValue) operation needs record.recordName")
        }
        try Record.validate(recordName: recordName)
        if let type = wire.recordType { try Record.validate(recordType: type) }
        var fields: [String: FieldValue] = [:]
        var removed: Set<String> = []
        if operation.isDelete == false {
            for (name, json) in wire.fields ?? [:] {
                try Record.validate(fieldName: name)
                if FieldCoding.isRemoval(json) {
                    removed.insert(name)
                    continue
                }
                try checkReferenceZones(field: name, json, zone: zone)
                fields[name] = try FieldCoding.decode(field: name, json)
            }
        }
        var proposal: ShareProposal?
        if !operation.isDelete, wire.publicPermission != nil || wire.participants != nil {
            proposal = try ShareProposal.parse(publicPermission: wire.publicPermission, participants: wire.participants)
        }
        let input = RecordInput(
            recordName: recordName, recordType: wire.recordType, changeTag: wire.recordChangeTag, fields: fields, removedFields: removed,
            parent: try reference(wire.parent, key: "parent", zone: zone), share: try reference(wire.share, key: "share", zone: zone),
            createShortGUID: wire.createShortGUID ?? false,
            expirationDate: operation.isDelete ? nil : try RecordExpiration.resolve(expirationDate: wire.expirationDate, timeToLive: wire.timeToLive, now: now),
            shareProposal: proposal)
        try input.validateReferences()
        return input
    }

    private static func reference(_ value: JSONValue??, key: String, zone: ZoneID) throws(StratusError) -> String?? {
        guard let value else { return nil }
        guard let value, value != .null else { return .some(nil) }
        guard let name = value["recordName"]?.stringValue, !name.isEmpty else {
            throw StratusError(.badRequest, "record.\(key) must be {recordName} or null")
        }
        try checkZone(value["zoneID"], field: key, zone: zone)
        return .some(name)
    }

    private static func checkReferenceZones(field: String, _ json: JSONValue, zone: ZoneID) throws(StratusError) {
        switch json["value"] {
        case .object(let members)?:
            try checkZone(members["zoneID"], field: field, zone: zone)
        case .array(let elements)?:
            for case .object(let members) in elements { try checkZone(members["zoneID"], field: field, zone: zone) }
        default:
            break
        }
    }

    private static func checkZone(_ zoneJSON: JSONValue?, field: String, zone: ZoneID) throws(StratusError) {
        guard let zoneJSON, zoneJSON != .null else { return }
        guard let name = zoneJSON["zoneName"]?.stringValue, name == zone.zoneName else {
            throw StratusError(.badRequest, "Field '\(field)': references stay within a zone; this one points into another zone")
        }
    }

    /// A stored record as CloudKit's record dictionary, trimmed to `desiredKeys` when given.
    /// Asset fields get a signed `downloadURL` from `links`; a share record its sharing keys and,
    /// given `shareURL` (short GUID → URL), its `url`.
    static func dictionary(
        _ record: Record, zone: ZoneID, desiredKeys: [String]?, numbersAsStrings: Bool, links: AssetLinks, shareURL: ((String) -> String)? = nil
    ) -> JSONValue {
        var fields: [String: JSONValue] = [:]
        let wanted = desiredKeys.map(Set.init)
        for (name, value) in record.fields where wanted?.contains(name) ?? true {
            let encoded = FieldCoding.encode(value, numbersAsStrings: numbersAsStrings)
            fields[name] = value.type.base == .asset ? links.decorate(encoded) : encoded
        }
        let zoneID = zone.json
        var members: [String: JSONValue] = [
            "recordName": .string(record.recordName),
            "recordType": .string(record.recordType),
            "recordChangeTag": .string(record.changeTag),
            "fields": .object(fields),
            "created": stamp(record.created),
            "modified": stamp(record.modified),
            "deleted": .bool(false),
            "zoneID": zoneID,
        ]
        if let parent = record.parent { members["parent"] = .object(["recordName": .string(parent)]) }
        if let share = record.share { members["share"] = .object(["recordName": .string(share), "zoneID": zoneID]) }
        if let shortGUID = record.shortGUID { members["shortGUID"] = .string(shortGUID) }
        if let expirationDate = record.expirationDate { members["expirationDate"] = .int(expirationDate) }
        if let state = record.shareState {
            members["publicPermission"] = .string(state.publicPermission.rawValue)
            let participants = state.participantsJSON
            members["participants"] = participants
            if case .array(let list) = participants, let owner = list.first { members["owner"] = owner }
            if let shortGUID = record.shortGUID, let shareURL { members["url"] = .string(shareURL(shortGUID)) }
        }
        return .object(members)
    }

    private static func stamp(_ stamp: RecordStamp) -> JSONValue {
        .object([
            "timestamp": .int(stamp.timestamp), "userRecordName": .string(stamp.userRecordName),
            "deviceID": .string(stamp.deviceID ?? RecordStamp.webServiceDeviceID),
        ])
    }

    /// A per-record error dictionary; CONFLICT carries the server's record as `serverRecord` (a Stratus extension).
    static func error(_ error: StratusError, recordName: String, uuid: String, serverRecord: JSONValue? = nil) -> JSONValue {
        var members: [String: JSONValue] = [
            "recordName": .string(recordName), "serverErrorCode": .string(error.code.rawValue), "reason": .string(error.reason), "uuid": .string(uuid),
        ]
        if let retryAfter = error.retryAfter { members["retryAfter"] = .int(Int64(retryAfter)) }
        if let serverRecord { members["serverRecord"] = serverRecord }
        return .object(members)
    }
}
