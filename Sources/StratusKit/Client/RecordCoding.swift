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
        guard case .object(let members) = wire, let name = members["recordName"]?.string else {
            throw StratusKitError.invalidResponse("a record without recordName")
        }
        var record = Record(recordType: members["recordType"]?.string ?? "", recordID: RecordID(recordName: name, zoneID: zone))
        if case .object(let fields)? = members["fields"] {
            record.fields.reserveCapacity(fields.count)
            for (field, dictionary) in fields {
                guard case .object(let parts) = dictionary, let type = parts["type"]?.string, let value = parts["value"] else { continue }
                if type == "BYTES", let text = value.string, let data = Data(base64Encoded: text),
                   parts["isEncrypted"]?.bool == true || FieldSealing.isSealed(data) {
                    record.sealedValues[field] = data
                } else if let value = FieldValue(type: type, value: value) {
                    record.fields[field] = value
                }
            }
        }
        record.recordChangeTag = members["recordChangeTag"]?.string
        if case .object(let created)? = members["created"] {
            record.creationDate = created["timestamp"]?.int64
            record.creatorUserRecordName = created["userRecordName"]?.string
        }
        if case .object(let modified)? = members["modified"] {
            record.modificationDate = modified["timestamp"]?.int64
            record.lastModifiedUserRecordName = modified["userRecordName"]?.string
        }
        record.parent = members["parent"]?["recordName"]?.string.map { Reference(recordName: $0) }
        record.share = members["share"]?["recordName"]?.string.map { Reference(recordName: $0) }
        for key in shareMemberNames {
            if let value = members[key] { record.shareMembers[key] = value }
        }
        return record
    }

    /// A share record's own members, kept as the wire has them.
    static let shareMemberNames = ["publicPermission", "participants", "owner", "shortGUID", "url"]
}
