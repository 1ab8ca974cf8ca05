import Foundation

/// Records read from their stored JSON (what `EventCoding.encode(record)` writes, and what
/// PostgreSQL hands back as text) without `JSONDecoder`: `JSONParser` and a mapping written out,
/// the same record `Codable` reads. Every page of a query, a lookup or a sync goes through here.
extension EventCoding {
    /// A record from its stored JSON. A record carrying a share's state is rare and read through
    /// `Codable` as before.
    public static func decodeRecord(_ text: String) throws -> Record {
        let json: JSONValue
        do {
            json = try JSONParser.parse(text)
        } catch {
            throw StratusError(.internalError, "a stored record is not JSON: \(error)")
        }
        guard case .object(let members) = json, members["shareState"] == nil else {
            return try decoder.decode(Record.self, from: Data(text.utf8))
        }
        return try Record(stored: members)
    }

    /// A record's fields from their stored JSON (`{"name": {"type": …, "value": …}, …}`).
    public static func decodeFields(_ text: String) throws -> [String: FieldValue] {
        let json: JSONValue
        do {
            json = try JSONParser.parse(text)
        } catch {
            throw StratusError(.internalError, "stored fields are not JSON: \(error)")
        }
        return try Record.storedFields(json)
    }
}

extension Record {
    /// The members of a stored record, read as the synthesized `Codable` reads them: required keys
    /// must be there, optional ones may be missing or null.
    init(stored members: [String: JSONValue]) throws(StratusError) {
        func required(_ key: String) throws(StratusError) -> JSONValue {
            guard let value = members[key], value != .null else { throw StratusError(.internalError, "a stored record has no '\(key)'") }
            return value
        }
        func optional(_ key: String) -> JSONValue? {
            guard let value = members[key], value != .null else { return nil }
            return value
        }
        self.init(
            recordName: try Self.storedString(required("recordName"), "recordName"),
            recordType: try Self.storedString(required("recordType"), "recordType"),
            fields: try Self.storedFields(required("fields")),
            changeTag: try Self.storedString(required("changeTag"), "changeTag"),
            created: try Self.storedStamp(required("created"), "created"),
            modified: try Self.storedStamp(required("modified"), "modified"),
            parent: try optional("parent").map { (value) throws(StratusError) in try Self.storedString(value, "parent") },
            share: try optional("share").map { (value) throws(StratusError) in try Self.storedString(value, "share") },
            shortGUID: try optional("shortGUID").map { (value) throws(StratusError) in try Self.storedString(value, "shortGUID") },
            version: try optional("version").map { (value) throws(StratusError) in try Self.storedInt(value, "version") },
            createdVersion: try optional("createdVersion").map { (value) throws(StratusError) in try Self.storedInt(value, "createdVersion") },
            expirationDate: try optional("expirationDate").map { (value) throws(StratusError) in try Self.storedInt(value, "expirationDate") })
    }

    static func storedFields(_ json: JSONValue) throws(StratusError) -> [String: FieldValue] {
        guard case .object(let members) = json else { throw StratusError(.internalError, "a stored record's fields are not an object") }
        var fields: [String: FieldValue] = [:]
        fields.reserveCapacity(members.count)
        for (name, value) in members {
            do {
                fields[name] = try FieldCoding.decode(field: name, value)
            } catch {
                throw StratusError(.internalError, "a stored field '\(name)' cannot be read: \(error.reason)")
            }
        }
        return fields
    }

    static func storedString(_ json: JSONValue, _ key: String) throws(StratusError) -> String {
        guard case .string(let text) = json else { throw StratusError(.internalError, "a stored record's '\(key)' is not a string") }
        return text
    }

    /// A whole number, as `Codable` reads an `Int64`: an integer, or a double with no fraction.
    static func storedInt(_ json: JSONValue, _ key: String) throws(StratusError) -> Int64 {
        switch json {
        case .int(let value): return value
        case .double(let value):
            guard let exact = Int64(exactly: value) else { fallthrough }
            return exact
        default: throw StratusError(.internalError, "a stored record's '\(key)' is not a whole number")
        }
    }

    static func storedStamp(_ json: JSONValue, _ key: String) throws(StratusError) -> RecordStamp {
        guard case .object(let members) = json, let timestamp = members["timestamp"], case .string(let user)? = members["userRecordName"] else {
            throw StratusError(.internalError, "a stored record's '\(key)' is not a time and a user")
        }
        var device: String?
        switch members["deviceID"] {
        case nil, .null?: device = nil
        case .string(let text)?: device = text
        default: throw StratusError(.internalError, "a stored record's '\(key).deviceID' is not a string")
        }
        return RecordStamp(timestamp: try storedInt(timestamp, key + ".timestamp"), userRecordName: user, deviceID: device)
    }
}

/// A stored record's JSON text cut into its top-level members without reading them, so a page of
/// records can be answered by copying what the stored text already holds in wire form (its
/// `fields` are exactly CloudKit's field dictionaries: `FieldCoding.encode`) instead of reading
/// every value into a `Record` and writing it out again. Built from PostgreSQL's `jsonb` output.
public struct StoredRecordText: Sendable {
    /// The text's UTF-8 bytes.
    public let bytes: [UInt8]
    /// Each top-level member: the byte ranges of its name (escapes not undone) and of its value.
    /// Names stay bytes: a page of a hundred records made about twelve strings a record only to
    /// compare them.
    public let members: [(name: Range<Int>, value: Range<Int>)]

    /// Cuts `text`; nil when it is not an object or the scan meets something malformed.
    public init?(_ text: String) {
        let bytes = Array(text.utf8)
        var members: [(name: Range<Int>, value: Range<Int>)] = []
        members.reserveCapacity(12)
        guard JSONScan.forEachMember(in: bytes, within: 0..<bytes.count, { name, value in
            members.append((name, value))
            return true
        }) != nil else { return nil }
        self.bytes = bytes
        self.members = members
    }

    /// The byte range of a member's value; nil when it is missing or null.
    public func range(_ name: StaticString) -> Range<Int>? {
        let wanted = UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount)
        guard let member = members.first(where: { bytes[$0.name].elementsEqual(wanted) }) else { return nil }
        let value = bytes[member.value]
        return value.elementsEqual("null".utf8) ? nil : member.value
    }

    /// The raw bytes of a member's value; nil when it is missing or null.
    public func raw(_ name: StaticString) -> ArraySlice<UInt8>? {
        range(name).map { bytes[$0] }
    }

    /// Whether the value in `range` is a JSON string (its raw bytes then are a string token).
    public func isString(_ range: Range<Int>) -> Bool {
        bytes[range.lowerBound] == UInt8(ascii: "\"")
    }

    /// Calls `body` with each member of the object in `range` (name bytes, value range), in order;
    /// false when it is not an object or is malformed.
    public func forEachMember(of range: Range<Int>, _ body: (ArraySlice<UInt8>, Range<Int>) -> Void) -> Bool {
        JSONScan.forEachMember(in: bytes, within: range) { name, value in
            body(bytes[name], value)
            return true
        } != nil
    }

    /// Whether `needle` occurs in `range`: for testing a member's text for a marker (a field type)
    /// before copying it. `jsonb` writes `"type": "ASSETID"` in exactly that form, and a quote
    /// inside a string value is always escaped, so the text of a field's type cannot be faked by a
    /// value; a false alarm only sends the record down the slower, general path.
    public func contains(_ needle: String, in range: Range<Int>) -> Bool {
        let pattern = Array(needle.utf8)
        guard let first = pattern.first, range.count >= pattern.count else { return false }
        var index = range.lowerBound
        let last = range.upperBound - pattern.count
        while index <= last {
            if bytes[index] == first, bytes[index..<(index + pattern.count)].elementsEqual(pattern) { return true }
            index += 1
        }
        return false
    }
}

/// How the stored text of a record's fields becomes the answers' form of its references, for the
/// paths that copy stored text instead of writing `FieldCoding.encode(_:zone:)` (`RecordWire.copy`
/// in Swift, `SyncStore`'s page in SQL, both checked against `RecordWire.dictionary` by
/// `RecordWireAgreementTests`). A reference is stored without its zone (always its record's zone);
/// `jsonb` writes its value as `{"action": …, "recordName": …}`, and nothing else in a record
/// without an asset field can begin that way — a location's members are fixed, and a quote inside
/// a string value is always escaped — so each occurrence of `opening` is a reference's value, and
/// the zone id dictionary goes in front of its `action`.
public enum StoredReferenceZone {
    /// What a stored reference value begins with in `jsonb`'s output.
    public static let opening = #"{"action": "#
    /// What `opening` becomes, around the zone id dictionary's text.
    public static let zonedPrefix = #"{"zoneID": "#
    public static let zonedSuffix = #", "action": "#

    /// Appends `bytes[range]` with each reference given `zoneID` (the zone id dictionary's text).
    public static func append(_ bytes: [UInt8], _ range: Range<Int>, zoneID: [UInt8], into out: inout [UInt8]) {
        let pattern = Array(opening.utf8)
        guard let first = pattern.first, range.count >= pattern.count else {
            out.append(contentsOf: bytes[range])
            return
        }
        var copied = range.lowerBound
        var index = range.lowerBound
        let last = range.upperBound - pattern.count
        while index <= last {
            if bytes[index] == first, bytes[index..<(index + pattern.count)].elementsEqual(pattern) {
                out.append(contentsOf: bytes[copied..<index])
                out.append(contentsOf: zonedPrefix.utf8)
                out.append(contentsOf: zoneID)
                out.append(contentsOf: zonedSuffix.utf8)
                index += pattern.count
                copied = index
            } else {
                index += 1
            }
        }
        out.append(contentsOf: bytes[copied..<range.upperBound])
    }
}
