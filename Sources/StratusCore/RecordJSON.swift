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
