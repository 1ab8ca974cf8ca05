import Foundation

/// Reads and writes field values in the CloudKit Web Services form `{"value": …, "type": "…"}`.
public enum FieldCoding {
    /// Whether a field as sent asks for the field's removal: an empty dictionary, or a dictionary
    /// whose `value` is null — what clients send for a field they cleared. Under `update` the field
    /// is removed; under `create` and `replace`, which store only the fields sent, it is left out.
    public static func isRemoval(_ json: JSONValue) -> Bool {
        guard case .object(let members) = json else { return false }
        return members.isEmpty || members["value"] == .null
    }

    /// Reads one field. A missing `type` is inferred from the value, as CloudKit does in development.
    public static func decode(field name: String, _ json: JSONValue) throws(StratusError) -> FieldValue {
        guard case .object(let members) = json else {
            throw StratusError(.badRequest, "Field '\(name)' must be a dictionary with 'value' (and optionally 'type')")
        }
        guard let value = members["value"] else {
            throw StratusError(.badRequest, "Field '\(name)' has no 'value'")
        }
        var declared: FieldType?
        if let typeJSON = members["type"] {
            guard let text = typeJSON.stringValue, let type = FieldType(rawValue: text) else {
                throw StratusError(.badRequest, "Field '\(name)' has an unknown type \(describe(typeJSON))")
            }
            declared = type
        }
        let type: FieldType
        if let declared { type = declared } else { type = try infer(field: name, value) }
        return try decode(field: name, value, as: type)
    }

    /// Reads a value as the given type.
    public static func decode(field name: String, _ value: JSONValue, as type: FieldType) throws(StratusError) -> FieldValue {
        if type.isList {
            guard case .array(let elements) = value else {
                throw mismatch(name, type, value)
            }
            var decoded: [FieldValue] = []
            decoded.reserveCapacity(elements.count)
            // The common element of each number type taken here, as `scalar` takes it; anything
            // else (and every refusal) goes through `scalar`. Lists run to millions of elements.
            for element in elements {
                switch (type.base, element) {
                case (.int64, .int(let number)): decoded.append(.int64(number))
                case (.timestamp, .int(let milliseconds)): decoded.append(.timestamp(milliseconds))
                case (.double, .double(let number)) where number.isFinite: decoded.append(.double(number))
                default: decoded.append(try scalar(field: name, element, as: type.base, listType: type))
                }
            }
            return .list(type.base, decoded)
        }
        return try scalar(field: name, value, as: type.base, listType: nil)
    }

    private static func scalar(field name: String, _ value: JSONValue, as base: FieldType.Base, listType: FieldType?) throws(StratusError) -> FieldValue {
        let reported = listType ?? FieldType(base)
        switch (base, value) {
        case (.string, .string(let text)):
            try ClientText.check(text, "Field '\(name)'")
            return .string(text)
        case (.int64, .int(let number)):
            return .int64(number)
        case (.int64, .double(let number)):
            guard number.rounded() == number, let exact = Int64(exactly: number) else {
                throw StratusError(.badRequest, "Field '\(name)' of type \(reported) needs a whole number within 64 bits")
            }
            return .int64(exact)
        case (.int64, .string(let text)):
            guard let number = Int64(text) else { throw mismatch(name, reported, value) }
            return .int64(number)
        case (.double, .int(let number)):
            return .double(Double(number))
        case (.double, .double(let number)):
            // JSON has no NaN or infinity; a value that is not finite could not be stored as JSON either.
            guard number.isFinite else { throw mismatch(name, reported, value) }
            return .double(number)
        case (.double, .string(let text)):
            guard let number = Double(text), number.isFinite else { throw mismatch(name, reported, value) }
            return .double(number)
        case (.timestamp, .int(let milliseconds)):
            return .timestamp(milliseconds)
        case (.timestamp, .double(let milliseconds)):
            guard milliseconds.rounded() == milliseconds, let exact = Int64(exactly: milliseconds) else { throw mismatch(name, reported, value) }
            return .timestamp(exact)
        case (.bytes, .string(let text)):
            guard let data = Data(base64Encoded: text) else {
                throw StratusError(.badRequest, "Field '\(name)' of type \(reported) must be base64")
            }
            return .bytes(data)
        case (.reference, .object(let members)):
            guard let recordName = members["recordName"]?.stringValue, !recordName.isEmpty else {
                throw StratusError(.badRequest, "Field '\(name)' of type \(reported) needs a recordName")
            }
            try ClientText.check(recordName, "Field '\(name)' recordName")
            var action = ReferenceAction.none
            if let actionJSON = members["action"] {
                guard let text = actionJSON.stringValue, let parsed = ReferenceAction(rawValue: text) else {
                    throw StratusError(.badRequest, "Field '\(name)' has an unknown reference action \(describe(actionJSON)): use NONE, DELETE_SELF or VALIDATE")
                }
                action = parsed
            }
            return .reference(Reference(recordName: recordName, action: action))
        case (.asset, .object):
            // Stored as sent, so every string in it reaches jsonb.
            try ClientText.check(value, "Field '\(name)'")
            return .asset(value)
        case (.location, .object(let members)):
            func number(_ key: String) throws(StratusError) -> Double? {
                switch members[key] {
                case nil, .null?: return nil
                case .int(let value)?: return Double(value)
                case .double(let value)? where value.isFinite: return value
                default: throw StratusError(.badRequest, "Field '\(name)' location \(key) must be a finite number")
                }
            }
            guard let latitude = try number("latitude"), let longitude = try number("longitude"),
                  (-90...90).contains(latitude), (-180...180).contains(longitude)
            else {
                throw StratusError(.badRequest, "Field '\(name)' of type LOCATION needs latitude (-90…90) and longitude (-180…180)")
            }
            // Milliseconds: an integer is kept exact, a fraction is dropped, and a number beyond 64 bits
            // (or not finite) is refused; converting it unchecked would trap.
            var timestamp: Int64?
            switch members["timestamp"] {
            case nil, .null?:
                break
            case .int(let milliseconds)?:
                timestamp = milliseconds
            case .double(let milliseconds)?:
                guard let whole = Int64(exactly: milliseconds.rounded(.towardZero)) else {
                    throw StratusError(.badRequest, "Field '\(name)' location timestamp must be milliseconds within 64 bits")
                }
                timestamp = whole
            default:
                throw StratusError(.badRequest, "Field '\(name)' location timestamp must be a number")
            }
            return .location(Location(
                latitude: latitude, longitude: longitude, horizontalAccuracy: try number("horizontalAccuracy"),
                verticalAccuracy: try number("verticalAccuracy"), altitude: try number("altitude"), speed: try number("speed"),
                course: try number("course"), timestamp: timestamp))
        default:
            throw mismatch(name, reported, value)
        }
    }

    /// Infers a type from a value the way CloudKit does for untyped fields. A dictionary whose shape
    /// fits more than one type is refused: its type must be sent (an asset with a latitude is not a
    /// location).
    public static func infer(field name: String, _ value: JSONValue) throws(StratusError) -> FieldType {
        switch value {
        case .string: return FieldType(.string)
        case .int: return FieldType(.int64)
        case .double: return FieldType(.double)
        case .object(let members):
            var candidates: [FieldType.Base] = []
            if members["recordName"] != nil { candidates.append(.reference) }
            if members["latitude"] != nil, members["longitude"] != nil { candidates.append(.location) }
            if members["fileChecksum"] != nil || members["receipt"] != nil || members["downloadURL"] != nil { candidates.append(.asset) }
            guard candidates.count <= 1 else {
                throw StratusError(.badRequest, "Field '\(name)': this dictionary could be a \(candidates.map(\.rawValue).joined(separator: " or ")); send 'type'")
            }
            if let base = candidates.first { return FieldType(base) }
            throw StratusError(.badRequest, "Field '\(name)': cannot infer the type of this dictionary; send 'type'")
        case .array(let elements):
            guard let first = elements.first else { return FieldType(.string, isList: true) }
            let element = try infer(field: name, first)
            guard !element.isList else { throw StratusError(.badRequest, "Field '\(name)': lists of lists are not a CloudKit type") }
            // Mixed integers and fractions are a list of doubles.
            if element.base == .int64, elements.contains(where: { if case .double = $0 { true } else { false } }) {
                return FieldType(.double, isList: true)
            }
            return FieldType(element.base, isList: true)
        case .bool:
            throw StratusError(.badRequest, "Field '\(name)': booleans are not a CloudKit type; use INT64 0 or 1")
        case .null:
            throw StratusError(.badRequest, "Field '\(name)' has a null value; to remove a field, leave it out of a replace")
        }
    }

    /// Writes one field; with `numbersAsStrings`, INT64 and DOUBLE values become strings. Given
    /// `zone` (the zone id dictionary of the record's zone), each reference names its zone as
    /// Apple's reference dictionary does (`{recordName, zoneID, action}`): the answers' form. A
    /// reference always points into its record's zone (`RecordWire` refuses one into another zone),
    /// so the stored form — written without `zone` — leaves the zone out and every stored
    /// reference, older ones included, answers with its record's zone.
    public static func encode(_ value: FieldValue, numbersAsStrings: Bool = false, zone: JSONValue? = nil) -> JSONValue {
        .object(["value": encodeValue(value, numbersAsStrings: numbersAsStrings, zone: zone), "type": .string(value.type.rawValue)])
    }

    static func encodeValue(_ value: FieldValue, numbersAsStrings: Bool, zone: JSONValue? = nil) -> JSONValue {
        switch value {
        case .string(let text): return .string(text)
        case .int64(let number): return numbersAsStrings ? .string(String(number)) : .int(number)
        case .double(let number): return numbersAsStrings ? .string(String(number)) : .double(number)
        case .timestamp(let milliseconds): return .int(milliseconds)
        case .bytes(let data): return .string(data.base64EncodedString())
        case .reference(let reference):
            var members: [String: JSONValue] = ["recordName": .string(reference.recordName), "action": .string(reference.action.rawValue)]
            if let zone { members["zoneID"] = zone }
            return .object(members)
        case .asset(let json): return json
        case .location(let location):
            var members: [String: JSONValue] = ["latitude": .double(location.latitude), "longitude": .double(location.longitude)]
            if let value = location.horizontalAccuracy { members["horizontalAccuracy"] = .double(value) }
            if let value = location.verticalAccuracy { members["verticalAccuracy"] = .double(value) }
            if let value = location.altitude { members["altitude"] = .double(value) }
            if let value = location.speed { members["speed"] = .double(value) }
            if let value = location.course { members["course"] = .double(value) }
            if let value = location.timestamp { members["timestamp"] = .int(value) }
            return .object(members)
        case .list(_, let values): return .array(values.map { encodeValue($0, numbersAsStrings: numbersAsStrings, zone: zone) })
        }
    }

    /// Appends `encode(value, numbersAsStrings:, zone:)`'s JSON text (`JSONValue.write(into:)`'s
    /// form) without building it first: an answer of long lists spent most of its time making and
    /// sorting the tree. `zoneID` is the zone's JSON text (`zone.serialized()`). Locations and assets,
    /// small objects, go through `encode`. With `encoderForm`, the text is the one `JSONEncoder`
    /// writes (`JSONValue.writeEncoderForm`): the form of stored rows and events (`EncoderForm`).
    public static func write(_ value: FieldValue, numbersAsStrings: Bool, zoneID: [UInt8]?, encoderForm: Bool = false, into bytes: inout [UInt8]) {
        bytes.append(contentsOf: #"{"type":"#.utf8)
        JSONValue.write(string: value.type.rawValue, into: &bytes)
        bytes.append(contentsOf: #","value":"#.utf8)
        writeValue(value, numbersAsStrings: numbersAsStrings, zoneID: zoneID, encoderForm: encoderForm, into: &bytes)
        bytes.append(UInt8(ascii: "}"))
    }

    private static func writeValue(_ value: FieldValue, numbersAsStrings: Bool, zoneID: [UInt8]?, encoderForm: Bool, into bytes: inout [UInt8]) {
        func write(_ json: JSONValue) {
            if encoderForm { json.writeEncoderForm(into: &bytes) } else { json.write(into: &bytes) }
        }
        switch value {
        case .string(let text):
            JSONValue.write(string: text, into: &bytes, escapingSlashes: encoderForm)
        case .int64(let number):
            if numbersAsStrings { bytes.append(UInt8(ascii: "\"")) }
            JSONValue.write(integer: number, into: &bytes)
            if numbersAsStrings { bytes.append(UInt8(ascii: "\"")) }
        case .double(let number) where !numbersAsStrings:
            write(.double(number))
        case .timestamp(let milliseconds):
            JSONValue.write(integer: milliseconds, into: &bytes)
        case .reference(let reference):
            bytes.append(contentsOf: #"{"action":"#.utf8)
            JSONValue.write(string: reference.action.rawValue, into: &bytes)
            bytes.append(contentsOf: #","recordName":"#.utf8)
            JSONValue.write(string: reference.recordName, into: &bytes, escapingSlashes: encoderForm)
            if let zoneID {
                bytes.append(contentsOf: #","zoneID":"#.utf8)
                bytes.append(contentsOf: zoneID)
            }
            bytes.append(UInt8(ascii: "}"))
        case .list(_, let values):
            bytes.append(UInt8(ascii: "["))
            for (index, element) in values.enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                // Integers, a long list's usual element, written here (as above) without the call.
                switch element {
                case .int64(let number) where !numbersAsStrings: JSONValue.write(integer: number, into: &bytes)
                case .timestamp(let milliseconds): JSONValue.write(integer: milliseconds, into: &bytes)
                default: writeValue(element, numbersAsStrings: numbersAsStrings, zoneID: zoneID, encoderForm: encoderForm, into: &bytes)
                }
            }
            bytes.append(UInt8(ascii: "]"))
        case .double, .bytes, .asset, .location:
            write(encodeValue(value, numbersAsStrings: numbersAsStrings))
        }
    }

    private static func mismatch(_ name: String, _ type: FieldType, _ value: JSONValue) -> StratusError {
        StratusError(.badRequest, "Field '\(name)' is declared \(type) but its value is a \(value.kind)")
    }

    private static func describe(_ value: JSONValue) -> String {
        value.stringValue.map { "'\($0.prefix(64))'" } ?? "(a \(value.kind))"
    }
}

extension FieldValue: Codable {
    /// Events store fields in their typed wire form.
    public init(from decoder: any Decoder) throws {
        let json = try JSONValue(from: decoder)
        do {
            self = try FieldCoding.decode(field: decoder.codingPath.last?.stringValue ?? "field", json)
        } catch {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: error.reason))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        try FieldCoding.encode(self).encode(to: encoder)
    }
}
