import Foundation

/// A value the store writes on every save (a record's fields for its row, a save's or a delete's
/// event), written as JSON directly in exactly the bytes `EventCoding.encoder` (`JSONEncoder`,
/// `.sortedKeys`) writes for it. `JSONEncoder` builds a tree of boxed containers for every list
/// element and sorts every object's keys through `Codable`: for records of long lists it was half
/// of the API's CPU (docs/benchmarks.md, "The store's JSON written directly").
///
/// `EncoderFormTests` holds each writer to `JSONEncoder`'s bytes, over every field type and with
/// every optional member set and unset.
public protocol EncoderFormWritable {
    /// Appends the value's JSON as `EventCoding.encoder` writes it and returns true; returns false
    /// (leaving `bytes` to be thrown away) for a value of a form this writer leaves to the coder.
    func writeEncoderForm(into bytes: inout [UInt8]) -> Bool
}

/// The pieces every writer is made of: an object's members are written in the order of their
/// names' UTF-8 bytes, as `.sortedKeys` orders them, and each writer names its members in that order.
enum EncoderForm {
    /// Starts the next member `name` (plain ASCII: no escaping) of an object.
    static func member(_ name: StaticString, _ bytes: inout [UInt8], _ first: inout Bool) {
        bytes.append(first ? UInt8(ascii: "{") : UInt8(ascii: ","))
        first = false
        bytes.append(UInt8(ascii: "\""))
        name.withUTF8Buffer { bytes.append(contentsOf: $0) }
        bytes.append(contentsOf: "\":".utf8)
    }

    /// Ends an object begun with `member` (or writes `{}` when it has none).
    static func close(_ bytes: inout [UInt8], _ first: Bool) {
        if first { bytes.append(UInt8(ascii: "{")) }
        bytes.append(UInt8(ascii: "}"))
    }

    static func string(_ text: String, _ bytes: inout [UInt8]) {
        JSONValue.write(string: text, into: &bytes, escapingSlashes: true)
    }

    static func integer(_ value: Int64, _ bytes: inout [UInt8]) {
        JSONValue.write(integer: value, into: &bytes)
    }

    static func strings(_ texts: [String], _ bytes: inout [UInt8]) {
        bytes.append(UInt8(ascii: "["))
        for (index, text) in texts.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            string(text, &bytes)
        }
        bytes.append(UInt8(ascii: "]"))
    }

    /// A record's fields in their typed wire form, as `FieldValue`'s `Codable` writes them.
    static func fields(_ fields: [String: FieldValue], _ bytes: inout [UInt8]) {
        bytes.append(UInt8(ascii: "{"))
        var first = true
        for (name, value) in fields.sorted(by: { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }) {
            if !first { bytes.append(UInt8(ascii: ",")) }
            first = false
            string(name, &bytes)
            bytes.append(UInt8(ascii: ":"))
            field(value, &bytes)
        }
        bytes.append(UInt8(ascii: "}"))
    }

    /// One field as `FieldCoding.encode(value)` is written (`{"type":…,"value":…}`), its strings,
    /// numbers and lists written directly rather than made into a `JSONValue` first.
    static func field(_ value: FieldValue, _ bytes: inout [UInt8]) {
        FieldCoding.write(value, numbersAsStrings: false, zoneID: nil, encoderForm: true, into: &bytes)
    }

    static func stamp(_ stamp: RecordStamp, _ bytes: inout [UInt8]) {
        var first = true
        if let device = stamp.deviceID {
            member("deviceID", &bytes, &first)
            string(device, &bytes)
        }
        member("timestamp", &bytes, &first)
        integer(stamp.timestamp, &bytes)
        member("userRecordName", &bytes, &first)
        string(stamp.userRecordName, &bytes)
        close(&bytes, first)
    }

    static func database(_ database: DatabaseID, _ bytes: inout [UInt8]) {
        var first = true
        member("container", &bytes, &first)
        string(database.container, &bytes)
        member("environment", &bytes, &first)
        string(database.environment.rawValue, &bytes)
        member("owner", &bytes, &first)
        string(database.owner, &bytes)
        member("scope", &bytes, &first)
        string(database.scope.rawValue, &bytes)
        close(&bytes, first)
    }

    static func zone(_ zone: ZoneID, _ bytes: inout [UInt8]) {
        var first = true
        member("ownerRecordName", &bytes, &first)
        string(zone.ownerRecordName, &bytes)
        member("zoneName", &bytes, &first)
        string(zone.zoneName, &bytes)
        close(&bytes, first)
    }

    static func image(_ image: PreviousImage, _ bytes: inout [UInt8]) {
        var first = true
        member("fields", &bytes, &first)
        fields(image.fields, &bytes)
        member("modifiedAt", &bytes, &first)
        integer(image.modifiedAt, &bytes)
        member("omitted", &bytes, &first)
        strings(image.omitted, &bytes)
        close(&bytes, first)
    }
}

extension Dictionary: EncoderFormWritable where Key == String, Value == FieldValue {
    public func writeEncoderForm(into bytes: inout [UInt8]) -> Bool {
        EncoderForm.fields(self, &bytes)
        return true
    }
}

extension Record: EncoderFormWritable {
    /// A share record's sharing state is left to the coder (share records are few).
    public func writeEncoderForm(into bytes: inout [UInt8]) -> Bool {
        writeEncoderForm(into: &bytes, fieldsJSON: nil)
    }

    /// Writes the record with `fieldsJSON` (when given: `EventCoding.encode(fields)`, already made
    /// for the record's row) as its fields.
    func writeEncoderForm(into bytes: inout [UInt8], fieldsJSON: Data?) -> Bool {
        guard shareState == nil else { return false }
        var first = true
        EncoderForm.member("changeTag", &bytes, &first)
        EncoderForm.string(changeTag, &bytes)
        EncoderForm.member("created", &bytes, &first)
        EncoderForm.stamp(created, &bytes)
        if let createdVersion {
            EncoderForm.member("createdVersion", &bytes, &first)
            EncoderForm.integer(createdVersion, &bytes)
        }
        if let expirationDate {
            EncoderForm.member("expirationDate", &bytes, &first)
            EncoderForm.integer(expirationDate, &bytes)
        }
        EncoderForm.member("fields", &bytes, &first)
        if let fieldsJSON {
            bytes.append(contentsOf: fieldsJSON)
        } else {
            EncoderForm.fields(fields, &bytes)
        }
        EncoderForm.member("modified", &bytes, &first)
        EncoderForm.stamp(modified, &bytes)
        if let parent {
            EncoderForm.member("parent", &bytes, &first)
            EncoderForm.string(parent, &bytes)
        }
        EncoderForm.member("recordName", &bytes, &first)
        EncoderForm.string(recordName, &bytes)
        EncoderForm.member("recordType", &bytes, &first)
        EncoderForm.string(recordType, &bytes)
        if let share {
            EncoderForm.member("share", &bytes, &first)
            EncoderForm.string(share, &bytes)
        }
        if let shortGUID {
            EncoderForm.member("shortGUID", &bytes, &first)
            EncoderForm.string(shortGUID, &bytes)
        }
        if let version {
            EncoderForm.member("version", &bytes, &first)
            EncoderForm.integer(version, &bytes)
        }
        EncoderForm.close(&bytes, first)
        return true
    }
}

extension RecordSaved: EncoderFormWritable {
    public func writeEncoderForm(into bytes: inout [UInt8]) -> Bool {
        writeEncoderForm(into: &bytes, fieldsJSON: nil)
    }

    /// Writes the save with the record's fields given as `fieldsJSON` (see `Record`'s writer).
    func writeEncoderForm(into bytes: inout [UInt8], fieldsJSON: Data?) -> Bool {
        var first = true
        EncoderForm.member("changedFields", &bytes, &first)
        EncoderForm.strings(changedFields, &bytes)
        EncoderForm.member("database", &bytes, &first)
        EncoderForm.database(database, &bytes)
        if let previous {
            EncoderForm.member("previous", &bytes, &first)
            EncoderForm.image(previous, &bytes)
        }
        if let previousChangeTag {
            EncoderForm.member("previousChangeTag", &bytes, &first)
            EncoderForm.string(previousChangeTag, &bytes)
        }
        EncoderForm.member("record", &bytes, &first)
        guard record.writeEncoderForm(into: &bytes, fieldsJSON: fieldsJSON) else { return false }
        EncoderForm.member("zoneID", &bytes, &first)
        EncoderForm.zone(zoneID, &bytes)
        if let zoneIncarnation {
            EncoderForm.member("zoneIncarnation", &bytes, &first)
            EncoderForm.string(zoneIncarnation.uuidString, &bytes)
        }
        EncoderForm.close(&bytes, first)
        return true
    }
}

extension RecordDeleted: EncoderFormWritable {
    public func writeEncoderForm(into bytes: inout [UInt8]) -> Bool {
        var first = true
        if let cascadedFrom {
            EncoderForm.member("cascadedFrom", &bytes, &first)
            EncoderForm.string(cascadedFrom, &bytes)
        }
        if let createdAt {
            EncoderForm.member("createdAt", &bytes, &first)
            EncoderForm.integer(createdAt, &bytes)
        }
        if let createdVersion {
            EncoderForm.member("createdVersion", &bytes, &first)
            EncoderForm.integer(createdVersion, &bytes)
        }
        EncoderForm.member("database", &bytes, &first)
        EncoderForm.database(database, &bytes)
        if let last {
            EncoderForm.member("last", &bytes, &first)
            EncoderForm.image(last, &bytes)
        }
        EncoderForm.member("recordName", &bytes, &first)
        EncoderForm.string(recordName, &bytes)
        EncoderForm.member("recordType", &bytes, &first)
        EncoderForm.string(recordType, &bytes)
        EncoderForm.member("zoneID", &bytes, &first)
        EncoderForm.zone(zoneID, &bytes)
        if let zoneIncarnation {
            EncoderForm.member("zoneIncarnation", &bytes, &first)
            EncoderForm.string(zoneIncarnation.uuidString, &bytes)
        }
        EncoderForm.close(&bytes, first)
        return true
    }
}

extension NewEvent {
    /// A save's event whose record's fields are `fieldsJSON`, the bytes `EventCoding.encode` made of
    /// `saved.record.fields` for the record's row: a record's fields are written once per save, not
    /// once for the row and again for its event.
    public init(zoneKey: ZoneKey, zoneSequence: Int64?, saved: RecordSaved, fieldsJSON: Data, causation: Causation) {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(fieldsJSON.count + 512)
        if saved.writeEncoderForm(into: &bytes, fieldsJSON: fieldsJSON) {
            self.init(zoneKey: zoneKey, zoneSequence: zoneSequence, type: RecordSaved.eventType, schemaVersion: RecordSaved.schemaVersion,
                      payload: Data(bytes), causation: causation)
        } else {
            self.init(zoneKey: zoneKey, zoneSequence: zoneSequence, payload: saved, causation: causation)
        }
    }
}
