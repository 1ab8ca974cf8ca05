import Foundation

/// A record to and from CloudKit's record dictionary. Encrypted values are sealed and opened by
/// `FieldSealing`; here they are already sealed bytes.
enum RecordCoding {
    /// The prefix of the field names that carry sealed values on the wire: `encryptedValues["body"]`
    /// travels as the `BYTES` field `body` with `isEncrypted: true` in its dictionary.
    static func encode(_ record: Record, sealed: [String: Data] = [:]) -> JSON {
        var fields: [String: JSON] = [:]
        for (name, value) in record.fields { fields[name] = value.wire }
        for (name, value) in sealed { fields[name] = ["value": .string(value.base64EncodedString()), "type": "BYTES", "isEncrypted": true] }
        var members: [String: JSON] = [
            "recordName": .string(record.recordID.recordName),
            "recordType": .string(record.recordType),
            "fields": .object(fields),
        ]
        if let tag = record.recordChangeTag { members["recordChangeTag"] = .string(tag) }
        if let parent = record.parent { members["parent"] = ["recordName": .string(parent.recordName)] }
        if let share = record.share { members["share"] = ["recordName": .string(share.recordName)] }
        for (key, value) in record.shareMembers where ["publicPermission", "participants", "forRecord"].contains(key) { members[key] = value }
        return .object(members)
    }

    /// Reads a record dictionary of `zoneID` (the zone the request named, so a record's id is the
    /// one the app uses, whether or not the answer spells the zone's owner); fields of types this
    /// client does not know are left out. Sealed values land in `sealedValues`, for `FieldSealing.open`.
    static func decode(_ wire: JSON, zoneID zone: ZoneID) throws -> Record {
        guard let name = wire["recordName"]?.string else { throw StratusKitError.invalidResponse("a record without recordName") }
        var record = Record(recordType: wire["recordType"]?.string ?? "", recordID: RecordID(recordName: name, zoneID: zone))
        for (field, dictionary) in wire["fields"]?.object ?? [:] {
            if dictionary["type"]?.string == "BYTES", let text = dictionary["value"]?.string, let data = Data(base64Encoded: text),
               dictionary["isEncrypted"]?.bool == true || FieldSealing.isSealed(data) {
                record.sealedValues[field] = data
            } else if let value = FieldValue(wire: dictionary) {
                record.fields[field] = value
            }
        }
        record.recordChangeTag = wire["recordChangeTag"]?.string
        record.creationDate = wire["created"]?["timestamp"]?.int64
        record.creatorUserRecordName = wire["created"]?["userRecordName"]?.string
        record.modificationDate = wire["modified"]?["timestamp"]?.int64
        record.lastModifiedUserRecordName = wire["modified"]?["userRecordName"]?.string
        record.parent = wire["parent"]?["recordName"]?.string.map { Reference(recordName: $0) }
        record.share = wire["share"]?["recordName"]?.string.map { Reference(recordName: $0) }
        for key in ["publicPermission", "participants", "owner", "shortGUID", "url"] {
            if let value = wire[key] { record.shareMembers[key] = value }
        }
        return record
    }
}
