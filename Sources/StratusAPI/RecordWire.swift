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
    /// A share record's root record, `{recordName, zoneID}`, as sent.
    var forRecord: JSONValue?

    enum CodingKeys: String, CodingKey {
        case recordName, recordType, recordChangeTag, fields, parent, share, createShortGUID, expirationDate, timeToLive, publicPermission, participants
        case forRecord
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
        forRecord = container.contains(.forRecord) ? try container.decode(JSONValue.self, forKey: .forRecord) : nil
    }
}

/// Turns wire records into checked `RecordInput`s and stored records into wire dictionaries.
enum RecordWire {
    /// Checks and converts one operation's record. References must stay within `zone`.
    /// `decodingFields` false: the fields are left out unread (a record refused for its size before
    /// they are decoded, `WriteLimits.checkSentRecord`).
    static func input(
        _ wire: WireRecordInput, operation: RecordOperationType, zone: ZoneID, now: Int64 = Int64(Date().timeIntervalSince1970 * 1000),
        decodingFields: Bool = true
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
        if operation.isDelete == false, decodingFields {
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
            shareProposal: proposal, forRecord: operation.isDelete ? nil : try shareRoot(wire.forRecord))
        try input.validateReferences()
        return input
    }

    /// A share record's `forRecord`: `{recordName, zoneID?}`; null or absent: none. Which zone it may
    /// name is decided with the write (`ShareWriteRules.forRecordRoot`).
    private static func shareRoot(_ value: JSONValue?) throws(StratusError) -> ShareRootName? {
        guard let value, value != .null else { return nil }
        guard let name = value["recordName"]?.stringValue, !name.isEmpty else {
            throw StratusError(.badRequest, "record.forRecord must be {recordName, zoneID} naming the share's root record")
        }
        switch value["zoneID"] {
        case nil, .null?:
            return ShareRootName(recordName: name)
        case let zoneID?:
            guard let zoneName = zoneID["zoneName"]?.stringValue else {
                throw StratusError(.badRequest, "record.forRecord.zoneID must be {zoneName, ownerRecordName}")
            }
            return ShareRootName(recordName: name, zoneName: zoneName)
        }
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
    /// Asset fields get a signed `downloadURL` from `links` (none without: an export's lines); a share record its sharing keys and,
    /// given `shareURL` (short GUID → URL), its `url`; each reference field names the record's
    /// zone. The one owner of a record's wire form: every faster rendering (`write(stored:…)`'s
    /// copy, the SQL of `SyncStore`'s pages and migration 0031's `wire_head`) must say what this
    /// says, which `RecordWireAgreementTests` checks for every field type and optional member.
    static func dictionary(
        _ record: Record, zone: ZoneID, desiredKeys: [String]?, numbersAsStrings: Bool, links: AssetLinks?, shareURL: ((String) -> String)? = nil
    ) -> JSONValue {
        var fields: [String: JSONValue] = [:]
        let wanted = desiredKeys.map(Set.init)
        let zoneID = zone.json
        for (name, value) in record.fields where wanted?.contains(name) ?? true {
            let encoded = FieldCoding.encode(value, numbersAsStrings: numbersAsStrings, zone: zoneID)
            fields[name] = value.type.base == .asset ? links?.decorate(encoded) ?? encoded : encoded
        }
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

    /// Appends `dictionary(record, …)`'s JSON text to `out` (as `JSONValue.write(into:)` writes it)
    /// without building its tree: the answer to a save of long lists spent more than the save's
    /// own encoding on making and sorting it. A share record (its participants) goes through
    /// `dictionary`; an asset field through `links`, as there. `zoneID` is `zone.json`'s text.
    /// `RecordAnswerWriterTests` holds it to `dictionary`'s bytes.
    static func write(
        _ record: Record, zone: ZoneID, zoneID: [UInt8], desiredKeys: [String]?, numbersAsStrings: Bool, links: AssetLinks?,
        shareURL: ((String) -> String)? = nil, into out: inout [UInt8]
    ) {
        guard record.shareState == nil else {
            dictionary(record, zone: zone, desiredKeys: desiredKeys, numbersAsStrings: numbersAsStrings, links: links, shareURL: shareURL)
                .write(into: &out)
            return
        }
        // Members in the order of their names' bytes, as `JSONValue.write(into:)` sorts them.
        func key(_ name: StaticString) {
            out.append(UInt8(ascii: "\""))
            name.withUTF8Buffer { out.append(contentsOf: $0) }
            out.append(contentsOf: "\":".utf8)
        }
        /// `"name":"text",`.
        func member(_ name: StaticString, _ text: String) {
            key(name)
            JSONValue.write(string: text, into: &out)
            out.append(UInt8(ascii: ","))
        }
        /// `"name":{"recordName":"text"[,"zoneID":…]},`.
        func reference(_ name: StaticString, _ recordName: String, withZone: Bool) {
            key(name)
            out.append(contentsOf: #"{"recordName":"#.utf8)
            JSONValue.write(string: recordName, into: &out)
            if withZone {
                out.append(contentsOf: #","zoneID":"#.utf8)
                out.append(contentsOf: zoneID)
            }
            out.append(contentsOf: "},".utf8)
        }
        func stamp(_ stamp: RecordStamp) {
            out.append(contentsOf: #"{"deviceID":"#.utf8)
            JSONValue.write(string: stamp.deviceID ?? RecordStamp.webServiceDeviceID, into: &out)
            out.append(contentsOf: #","timestamp":"#.utf8)
            JSONValue.write(integer: stamp.timestamp, into: &out)
            out.append(contentsOf: #","userRecordName":"#.utf8)
            JSONValue.write(string: stamp.userRecordName, into: &out)
            out.append(contentsOf: "},".utf8)
        }
        out.append(UInt8(ascii: "{"))
        key("created")
        stamp(record.created)
        key("deleted")
        out.append(contentsOf: "false,".utf8)
        if let expirationDate = record.expirationDate {
            key("expirationDate")
            JSONValue.write(integer: expirationDate, into: &out)
            out.append(UInt8(ascii: ","))
        }
        key("fields")
        out.append(UInt8(ascii: "{"))
        let wanted = desiredKeys.map(Set.init)
        var first = true
        for (name, value) in record.fields.sorted(by: { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }) where wanted?.contains(name) ?? true {
            if !first { out.append(UInt8(ascii: ",")) }
            first = false
            JSONValue.write(string: name, into: &out)
            out.append(UInt8(ascii: ":"))
            if value.type.base == .asset {
                let encoded = FieldCoding.encode(value, numbersAsStrings: numbersAsStrings, zone: zone.json)
                (links?.decorate(encoded) ?? encoded).write(into: &out)
            } else {
                FieldCoding.write(value, numbersAsStrings: numbersAsStrings, zoneID: zoneID, into: &out)
            }
        }
        out.append(contentsOf: "},".utf8)
        key("modified")
        stamp(record.modified)
        if let parent = record.parent { reference("parent", parent, withZone: false) }
        member("recordChangeTag", record.changeTag)
        member("recordName", record.recordName)
        member("recordType", record.recordType)
        if let share = record.share { reference("share", share, withZone: true) }
        if let shortGUID = record.shortGUID { member("shortGUID", shortGUID) }
        key("zoneID")
        out.append(contentsOf: zoneID)
        out.append(UInt8(ascii: "}"))
    }

    /// Appends a stored record's dictionary (what `dictionary` answers for it) to `out`, copying
    /// what the stored text already holds in wire form: its fields, names and stamps. A record that
    /// needs more than copying — a share's state, asset fields (their download links are signed per
    /// answer) or numbers as strings — is read and written through `dictionary`. References are
    /// given the zone on the way (`StoredReferenceZone`). `dictionary` owns the wire form: this copy
    /// and the SQL rendering of sync pages are checked against it (`RecordWireAgreementTests`). `zoneID` is the
    /// zone id dictionary's text (`ZoneID.json`), the same for a page's records.
    static func write(
        stored text: String, zone: ZoneID, zoneID: [UInt8], desiredKeys: Set<String>?, numbersAsStrings: Bool, links: AssetLinks,
        shareURL: ((String) -> String)? = nil, into out: inout [UInt8]
    ) throws {
        if !numbersAsStrings, let stored = StoredRecordText(text), copy(stored, zoneID: zoneID, desiredKeys: desiredKeys, into: &out) { return }
        let record = try EventCoding.decodeRecord(text)
        dictionary(record, zone: zone, desiredKeys: desiredKeys.map(Array.init), numbersAsStrings: numbersAsStrings, links: links, shareURL: shareURL)
            .write(into: &out)
    }

    /// The copying half of `write(stored:…)`; false (having written nothing) when the record needs
    /// the general path. Keys in the order `JSONValue.serialized()` writes them.
    static func copy(_ stored: StoredRecordText, zoneID: [UInt8], desiredKeys: Set<String>?, into out: inout [UInt8]) -> Bool {
        guard stored.range("shareState") == nil,
              let fields = stored.range("fields"), !stored.contains("\"type\": \"ASSETID", in: fields),
              let created = stored.range("created"), let modified = stored.range("modified"),
              let changeTag = stored.range("changeTag"), stored.isString(changeTag),
              let recordName = stored.range("recordName"), stored.isString(recordName),
              let recordType = stored.range("recordType"), stored.isString(recordType)
        else { return false }
        let parent = stored.range("parent"), share = stored.range("share"), shortGUID = stored.range("shortGUID")
        let expirationDate = stored.range("expirationDate")
        for optional in [parent, share, shortGUID] {
            if let optional, !stored.isString(optional) { return false }
        }
        let mark = out.count
        func key(_ name: StaticString) {
            out.append(UInt8(ascii: "\""))
            out.append(contentsOf: UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
            out.append(contentsOf: "\":".utf8)
        }
        /// `"name":value,` with the value as stored.
        func member(_ name: StaticString, _ range: Range<Int>) {
            key(name)
            out.append(contentsOf: stored.bytes[range])
            out.append(UInt8(ascii: ","))
        }
        /// `"name":{"recordName":value[,"zoneID":…]},` for a stored record name.
        func reference(_ name: StaticString, _ range: Range<Int>, withZone: Bool) {
            key(name)
            out.append(contentsOf: "{\"recordName\":".utf8)
            out.append(contentsOf: stored.bytes[range])
            if withZone {
                out.append(contentsOf: ",\"zoneID\":".utf8)
                out.append(contentsOf: zoneID)
            }
            out.append(contentsOf: "},".utf8)
        }
        out.append(UInt8(ascii: "{"))
        key("created")
        guard stamp(stored, created, into: &out) else { out.removeSubrange(mark...); return false }
        out.append(UInt8(ascii: ","))
        key("deleted")
        out.append(contentsOf: "false,".utf8)
        if let expirationDate { member("expirationDate", expirationDate) }
        if let desiredKeys {
            key("fields")
            out.append(UInt8(ascii: "{"))
            var first = true
            let complete = stored.forEachMember(of: fields) { name, value in
                guard desiredKeys.contains(String(decoding: name, as: UTF8.self)) else { return }
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                out.append(UInt8(ascii: "\""))
                out.append(contentsOf: name)
                out.append(contentsOf: "\":".utf8)
                StoredReferenceZone.append(stored.bytes, value, zoneID: zoneID, into: &out)
            }
            guard complete else { out.removeSubrange(mark...); return false }
            out.append(contentsOf: "},".utf8)
        } else {
            key("fields")
            StoredReferenceZone.append(stored.bytes, fields, zoneID: zoneID, into: &out)
            out.append(UInt8(ascii: ","))
        }
        key("modified")
        guard stamp(stored, modified, into: &out) else { out.removeSubrange(mark...); return false }
        out.append(UInt8(ascii: ","))
        if let parent { reference("parent", parent, withZone: false) }
        member("recordChangeTag", changeTag)
        member("recordName", recordName)
        member("recordType", recordType)
        if let share { reference("share", share, withZone: true) }
        if let shortGUID { member("shortGUID", shortGUID) }
        key("zoneID")
        out.append(contentsOf: zoneID)
        out.append(UInt8(ascii: "}"))
        return true
    }

    /// A stored stamp (`{timestamp, userRecordName[, deviceID]}`) as the wire's, which always
    /// names a device (`RecordStamp.webServiceDeviceID` when the save named none).
    private static func stamp(_ stored: StoredRecordText, _ range: Range<Int>, into out: inout [UInt8]) -> Bool {
        var timestamp: Range<Int>?, user: Range<Int>?, device: Range<Int>?
        let complete = stored.forEachMember(of: range) { name, value in
            if name.elementsEqual("timestamp".utf8) { timestamp = value }
            else if name.elementsEqual("userRecordName".utf8) { user = value }
            else if name.elementsEqual("deviceID".utf8), !stored.bytes[value].elementsEqual("null".utf8) { device = value }
        }
        guard complete, let timestamp, let user, stored.isString(user), stored.bytes[timestamp].allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") || $0 == UInt8(ascii: "-") })
        else { return false }
        if let device, !stored.isString(device) { return false }
        out.append(contentsOf: "{\"deviceID\":".utf8)
        if let device { out.append(contentsOf: stored.bytes[device]) } else { out.append(contentsOf: "\"\(RecordStamp.webServiceDeviceID)\"".utf8) }
        out.append(contentsOf: ",\"timestamp\":".utf8)
        out.append(contentsOf: stored.bytes[timestamp])
        out.append(contentsOf: ",\"userRecordName\":".utf8)
        out.append(contentsOf: stored.bytes[user])
        out.append(UInt8(ascii: "}"))
        return true
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
