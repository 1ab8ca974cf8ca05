import Foundation

/// A JSON value that keeps integers exact: an integer literal that fits in 64 bits stays an `Int64`
/// (clients send INT64 values beyond 2^53), everything else numeric is a `Double`.
///
/// Not `indirect`: arrays and objects already keep their elements apart, and an indirect enum
/// boxes every case on the heap, so each number, string and flag read cost an allocation of its
/// own (docs/benchmarks.md, "A redundant index dropped, web auth tokens opened once, JSON values
/// kept inline").
public enum JSONValue: Sendable, Hashable, Codable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    /// Tries the kinds a request's values take most often first: each kind tried in vain costs the
    /// decoder a thrown `DecodingError`, and a record's fields are objects of strings and numbers
    /// (an object tried last cost six). The kinds exclude each other, but for an integral number,
    /// which stays an `Int64` by trying `Int64` before `Double`.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() { self = .null; return }
        if let value = try? container.decode(String.self) { self = .string(value); return }
        if let value = try? container.decode([String: JSONValue].self) { self = .object(value); return }
        if let value = try? container.decode(Int64.self) { self = .int(value); return }
        if let value = try? container.decode(Double.self) { self = .double(value); return }
        if let value = try? container.decode(Bool.self) { self = .bool(value); return }
        if let value = try? container.decode([JSONValue].self) { self = .array(value); return }
        throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a JSON value")
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .int(let value): try container.encode(value)
        case .double(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    /// The member of an object, if this is one.
    public subscript(key: String) -> JSONValue? {
        if case .object(let members) = self { members[key] } else { nil }
    }

    /// The text, if this is a string.
    public var stringValue: String? {
        if case .string(let value) = self { value } else { nil }
    }

    /// A short name of the JSON kind, for error reasons.
    public var kind: String {
        switch self {
        case .null: "null"
        case .bool: "boolean"
        case .int, .double: "number"
        case .string: "string"
        case .array: "array"
        case .object: "object"
        }
    }
}

extension JSONValue {
    /// The value as JSON text in UTF-8: object keys in sorted order (by their UTF-8 bytes, as
    /// `JSONEncoder`'s `.sortedKeys`), no whitespace. Written directly, without an `Encoder`: a page
    /// of records is serialized several times faster than through `JSONEncoder`.
    ///
    /// A non-finite double (which no JSON input can carry) is written as `null`.
    public func serialized() -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(256)
        write(into: &bytes)
        return bytes
    }

    /// Appends the value's JSON text to `bytes`.
    public func write(into bytes: inout [UInt8]) {
        write(into: &bytes, encoderForm: false)
    }

    /// Appends the value's JSON text exactly as `JSONEncoder` with `.sortedKeys` writes it (and so as
    /// `EventCoding.encode` did for every stored payload and row): as `write(into:)`, but for two
    /// things `JSONEncoder` does its own way: an integral double loses its ".0" ("1", "-0",
    /// "1e+20" stays) and "/" is escaped ("\/"). The store writes events and fields in this form, so
    /// the bytes it counts against its limits are the ones it always counted.
    public func writeEncoderForm(into bytes: inout [UInt8]) {
        write(into: &bytes, encoderForm: true)
    }

    private func write(into bytes: inout [UInt8], encoderForm: Bool) {
        switch self {
        case .null:
            bytes.append(contentsOf: "null".utf8)
        case .bool(let value):
            bytes.append(contentsOf: value ? "true".utf8 : "false".utf8)
        case .int(let value):
            Self.write(integer: value, into: &bytes)
        case .double(let value):
            guard value.isFinite else {
                bytes.append(contentsOf: "null".utf8)
                return
            }
            // The shortest text that reads back as the same double ("1.0", "1e-05", "1e+20").
            let text = value.description.utf8
            if encoderForm, text.count >= 2, text.last == UInt8(ascii: "0"),
               text[text.index(text.endIndex, offsetBy: -2)] == UInt8(ascii: ".") {
                bytes.append(contentsOf: text.dropLast(2))
            } else {
                bytes.append(contentsOf: text)
            }
        case .string(let value):
            Self.write(string: value, into: &bytes, escapingSlashes: encoderForm)
        case .array(let values):
            bytes.append(UInt8(ascii: "["))
            for (index, value) in values.enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                value.write(into: &bytes, encoderForm: encoderForm)
            }
            bytes.append(UInt8(ascii: "]"))
        case .object(let members):
            bytes.append(UInt8(ascii: "{"))
            var first = true
            for (key, value) in members.sorted(by: { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }) {
                if !first { bytes.append(UInt8(ascii: ",")) }
                first = false
                Self.write(string: key, into: &bytes, escapingSlashes: encoderForm)
                bytes.append(UInt8(ascii: ":"))
                value.write(into: &bytes, encoderForm: encoderForm)
            }
            bytes.append(UInt8(ascii: "}"))
        }
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)

    /// An integer's decimal digits, written without making a `String` of them.
    public static func write(integer value: Int64, into bytes: inout [UInt8]) {
        if value >= 0, value < 10 {
            bytes.append(UInt8(ascii: "0") + UInt8(value))
            return
        }
        // The magnitude as unsigned, so Int64.min has one too.
        var magnitude = value.magnitude
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        let start = bytes.count
        while magnitude > 0 {
            bytes.append(UInt8(ascii: "0") + UInt8(magnitude % 10))
            magnitude /= 10
        }
        bytes[start...].reverse()
    }

    /// A JSON string: quotes, backslashes and control characters escaped (and "/" when
    /// `escapingSlashes`), everything else as is.
    public static func write(string: String, into bytes: inout [UInt8], escapingSlashes: Bool = false) {
        bytes.append(UInt8(ascii: "\""))
        let slash: UInt8 = escapingSlashes ? UInt8(ascii: "/") : UInt8(ascii: "\"")
        if !string.utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") || $0 == slash }) {
            bytes.append(contentsOf: string.utf8)
            bytes.append(UInt8(ascii: "\""))
            return
        }
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "\""): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
            case UInt8(ascii: "\\"): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
            case UInt8(ascii: "/") where escapingSlashes: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "/")])
            case 0x0A: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case 0x0D: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case 0x09: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0x08: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "b")])
            case 0x0C: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "f")])
            case 0x00..<0x20:
                bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"),
                                          hexDigits[Int(byte >> 4)], hexDigits[Int(byte & 0x0F)]])
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }
}

/// Members read as the synthesized `Codable` reads them, for the readers that map parsed JSON by hand.
extension JSONValue {
    /// The text of a string; nil for anything else.
    static func text(of value: JSONValue?) -> String? { if case .string(let text) = value { text } else { nil } }

    /// The value of an integer; nil for anything else.
    static func integer(of value: JSONValue?) -> Int64? { if case .int(let number) = value { number } else { nil } }

    /// An optional string member: absent or null is `.some(nil)`, a string `.some(text)`, anything else nil.
    static func optionalString(_ value: JSONValue?) -> String?? {
        switch value {
        case nil, .null?: .some(nil)
        case .string(let text)?: .some(text)
        default: nil
        }
    }

    /// An optional integer member: absent or null is `.some(nil)`, an integer `.some(number)`, anything else nil.
    static func optionalInt(_ value: JSONValue?) -> Int64?? {
        switch value {
        case nil, .null?: .some(nil)
        case .int(let number)?: .some(number)
        default: nil
        }
    }
}
