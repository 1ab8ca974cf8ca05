import Foundation

/// A JSON value as the wire carries it: what the client sends and reads. Integers stay exact over
/// the whole 64-bit range (CloudKit's `INT64`); a number with a fraction or exponent is a double.
public enum JSON: Sendable, Hashable, Codable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSON])
    case object([String: JSON])

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .int(value)
        } else if let value = try? container.decode(Double.self) {
            self = .double(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSON].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSON].self))
        }
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

    /// The member `key` of an object; `nil` for anything else or a missing member.
    public subscript(key: String) -> JSON? {
        if case .object(let members) = self { return members[key] }
        return nil
    }

    public var string: String? { if case .string(let value) = self { return value }; return nil }
    public var bool: Bool? { if case .bool(let value) = self { return value }; return nil }
    public var array: [JSON]? { if case .array(let value) = self { return value }; return nil }
    public var object: [String: JSON]? { if case .object(let value) = self { return value }; return nil }
    /// An integer, also from a double without fraction that fits, or from a string of digits
    /// (`numbersAsStrings`).
    public var int64: Int64? {
        switch self {
        case .int(let value): return value
        case .double(let value): return value.rounded() == value && abs(value) < 9.2e18 ? Int64(value) : nil
        case .string(let value): return Int64(value)
        default: return nil
        }
    }
    public var double: Double? {
        switch self {
        case .int(let value): return Double(value)
        case .double(let value): return value
        case .string(let value): return Double(value)
        default: return nil
        }
    }

    /// The value's compact text (keys sorted, so equal values encode alike).
    public func encoded() -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Encoding a JSON value cannot fail: every case is representable, and non-finite doubles
        // never enter (`FieldValue` refuses them).
        return (try? encoder.encode(self)) ?? Data("null".utf8)
    }

    /// The deepest nesting of arrays and objects `decode` reads; deeper text is refused.
    public static let maxDepth = 512

    /// Reads JSON text (RFC 8259: one value, whitespace around it, UTF-8); throws
    /// `StratusKitError` (`.invalidResponse`) when it is not JSON. Reads the bytes directly, not
    /// through `JSONDecoder`: a page of changes is hundreds of records, and a `Decoder` that tries
    /// each kind of value in turn cost most of the sync engine's time per record.
    public static func decode(_ data: Data) throws -> JSON {
        let result = data.withUnsafeBytes { raw in
            Result { () throws(JSONReader.Invalid) -> JSON in try JSONReader.document(raw.bindMemory(to: UInt8.self)) }
        }
        switch result {
        case .success(let value): return value
        case .failure(let invalid):
            throw StratusKitError.invalidResponse("the answer is not JSON (\(data.count) bytes, \(invalid.reason) at byte \(invalid.offset))")
        }
    }
}

/// Reads JSON text into `JSON`, byte by byte. Integers without fraction or exponent that fit 64
/// bits stay `.int`; every other number is `.double`. A repeated member name keeps its last value.
struct JSONReader {
    struct Invalid: Error {
        var offset: Int
        var reason: String
    }

    private let bytes: UnsafeBufferPointer<UInt8>
    private var offset = 0

    private init(_ bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    /// The one value of `bytes`, with nothing but whitespace around it.
    static func document(_ bytes: UnsafeBufferPointer<UInt8>) throws(Invalid) -> JSON {
        var reader = JSONReader(bytes)
        reader.skipWhitespace()
        let value = try reader.value(depth: 0)
        reader.skipWhitespace()
        guard reader.offset == bytes.count else { throw reader.invalid("text after the value") }
        return value
    }

    private func invalid(_ reason: String) -> Invalid { Invalid(offset: offset, reason: reason) }

    private mutating func skipWhitespace() {
        while offset < bytes.count, bytes[offset] == 0x20 || bytes[offset] == 0x0A || bytes[offset] == 0x0D || bytes[offset] == 0x09 {
            offset += 1
        }
    }

    /// Skips whitespace and takes `byte` if it is next.
    private mutating func take(_ byte: UInt8) -> Bool {
        skipWhitespace()
        guard offset < bytes.count, bytes[offset] == byte else { return false }
        offset += 1
        return true
    }

    private mutating func value(depth: Int) throws(Invalid) -> JSON {
        guard offset < bytes.count else { throw invalid("the text ends where a value should be") }
        switch bytes[offset] {
        case UInt8(ascii: "{"): return .object(try object(depth: depth + 1))
        case UInt8(ascii: "["): return .array(try array(depth: depth + 1))
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"), UInt8(ascii: "f"), UInt8(ascii: "n"): return try literal()
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
        default: throw invalid("no value starts with byte \(bytes[offset])")
        }
    }

    /// The literals and their values.
    private static let literals: [(text: [UInt8], value: JSON)] = [(Array("true".utf8), .bool(true)), (Array("false".utf8), .bool(false)), (Array("null".utf8), .null)]

    /// `true`, `false` or `null`.
    private mutating func literal() throws(Invalid) -> JSON {
        for (text, value) in Self.literals where bytes.count - offset >= text.count && text.indices.allSatisfy({ bytes[offset + $0] == text[$0] }) {
            offset += text.count
            return value
        }
        throw invalid("expected true, false or null")
    }

    private mutating func object(depth: Int) throws(Invalid) -> [String: JSON] {
        guard depth <= JSON.maxDepth else { throw invalid("nested deeper than \(JSON.maxDepth)") }
        offset += 1
        if take(UInt8(ascii: "}")) { return [:] }
        // Room for the members of most objects of an answer (a field's, a stamp's, a zone id's)
        // without growing: a dictionary that grows is hashed again each time.
        var members = [String: JSON](minimumCapacity: 6)
        repeat {
            skipWhitespace()
            guard offset < bytes.count, bytes[offset] == UInt8(ascii: "\"") else { throw invalid("expected a member name") }
            let name = try string()
            guard take(UInt8(ascii: ":")) else { throw invalid("expected ':' after a member name") }
            skipWhitespace()
            members[name] = try value(depth: depth)
        } while take(UInt8(ascii: ","))
        guard take(UInt8(ascii: "}")) else { throw invalid("expected ',' or '}' in an object") }
        return members
    }

    private mutating func array(depth: Int) throws(Invalid) -> [JSON] {
        guard depth <= JSON.maxDepth else { throw invalid("nested deeper than \(JSON.maxDepth)") }
        offset += 1
        var elements: [JSON] = []
        if take(UInt8(ascii: "]")) { return elements }
        repeat {
            skipWhitespace()
            elements.append(try value(depth: depth))
        } while take(UInt8(ascii: ","))
        guard take(UInt8(ascii: "]")) else { throw invalid("expected ',' or ']' in an array") }
        return elements
    }

    /// A string at its opening quote. Text without escapes is made from its bytes at once.
    private mutating func string() throws(Invalid) -> String {
        offset += 1
        let start = offset
        var ascii = true
        while offset < bytes.count {
            let byte = bytes[offset]
            if byte == UInt8(ascii: "\"") {
                let text = try utf8(start..<offset, ascii: ascii)
                offset += 1
                return text
            }
            if byte == UInt8(ascii: "\\") { return try escapedString(from: start) }
            if byte < 0x20 { throw invalid("a control character inside a string") }
            if byte >= 0x80 { ascii = false }
            offset += 1
        }
        throw invalid("the text ends inside a string")
    }

    /// Text from bytes, refusing what is not UTF-8.
    private func utf8(_ range: Range<Int>, ascii: Bool) throws(Invalid) -> String {
        let slice = UnsafeBufferPointer(rebasing: bytes[range])
        let text = String(decoding: slice, as: UTF8.self)
        // Decoding replaces what is not UTF-8, so text that reads back otherwise was not UTF-8.
        guard ascii || text.utf8.elementsEqual(slice) else { throw Invalid(offset: range.lowerBound, reason: "a string that is not UTF-8") }
        return text
    }

    /// The rest of a string that has escapes, from its first byte at `start`.
    private mutating func escapedString(from start: Int) throws(Invalid) -> String {
        var buffer = Array(UnsafeBufferPointer(rebasing: bytes[start..<offset]))
        while offset < bytes.count {
            let byte = bytes[offset]
            switch byte {
            case UInt8(ascii: "\""):
                offset += 1
                let text = String(decoding: buffer, as: UTF8.self)
                guard text.utf8.elementsEqual(buffer) else { throw Invalid(offset: start, reason: "a string that is not UTF-8") }
                return text
            case UInt8(ascii: "\\"):
                offset += 1
                guard offset < bytes.count else { break }
                let escape = bytes[offset]
                offset += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): buffer.append(escape)
                case UInt8(ascii: "b"): buffer.append(0x08)
                case UInt8(ascii: "f"): buffer.append(0x0C)
                case UInt8(ascii: "n"): buffer.append(0x0A)
                case UInt8(ascii: "r"): buffer.append(0x0D)
                case UInt8(ascii: "t"): buffer.append(0x09)
                case UInt8(ascii: "u"): buffer.append(contentsOf: String(try unicodeScalar()).utf8)
                default: throw invalid("an unknown escape in a string")
                }
            default:
                if byte < 0x20 { throw invalid("a control character inside a string") }
                buffer.append(byte)
                offset += 1
            }
        }
        throw invalid("the text ends inside a string")
    }

    /// The scalar of a `\u` escape (after the `u`), joining a surrogate pair.
    private mutating func unicodeScalar() throws(Invalid) -> Character {
        let first = try hex4()
        if (0xD800..<0xDC00).contains(first) {
            guard bytes.count - offset >= 2, bytes[offset] == UInt8(ascii: "\\"), bytes[offset + 1] == UInt8(ascii: "u") else {
                throw invalid("a lone surrogate in a string")
            }
            offset += 2
            let second = try hex4()
            guard (0xDC00..<0xE000).contains(second), let scalar = Unicode.Scalar(0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)) else {
                throw invalid("a lone surrogate in a string")
            }
            return Character(scalar)
        }
        guard let scalar = Unicode.Scalar(first) else { throw invalid("a lone surrogate in a string") }
        return Character(scalar)
    }

    /// The four hex digits of a `\u` escape.
    private mutating func hex4() throws(Invalid) -> UInt32 {
        guard bytes.count - offset >= 4 else { throw invalid("the text ends inside a \\u escape") }
        let digits = UnsafeBufferPointer(rebasing: bytes[offset..<(offset + 4)])
        guard digits.allSatisfy({ Character(Unicode.Scalar($0)).isHexDigit }),
              let value = UInt32(String(decoding: digits, as: UTF8.self), radix: 16) else {
            throw invalid("a \\u escape that is not four hex digits")
        }
        offset += 4
        return value
    }

    /// A number: `.int` when it is an integer that fits 64 bits, else `.double`.
    private mutating func number() throws(Invalid) -> JSON {
        let start = offset
        let negative = bytes[offset] == UInt8(ascii: "-")
        if negative { offset += 1 }
        let digitsStart = offset
        try digits()
        if bytes[digitsStart] == UInt8(ascii: "0"), offset - digitsStart > 1 { throw Invalid(offset: digitsStart, reason: "a number with a leading zero") }
        var integral = true
        if offset < bytes.count, bytes[offset] == UInt8(ascii: ".") {
            integral = false
            offset += 1
            try digits()
        }
        if offset < bytes.count, bytes[offset] == UInt8(ascii: "e") || bytes[offset] == UInt8(ascii: "E") {
            integral = false
            offset += 1
            if offset < bytes.count, bytes[offset] == UInt8(ascii: "+") || bytes[offset] == UInt8(ascii: "-") { offset += 1 }
            try digits()
        }
        if integral, let value = integer(digitsStart..<offset, negative: negative) { return .int(value) }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<offset]), as: UTF8.self)
        guard let value = Double(text), value.isFinite else { throw Invalid(offset: start, reason: "a number out of range") }
        return .double(value)
    }

    /// One or more digits.
    private mutating func digits() throws(Invalid) {
        let start = offset
        while offset < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[offset]) { offset += 1 }
        guard offset > start else { throw invalid("expected a digit") }
    }

    /// Decimal digits as an `Int64`; nil when they do not fit.
    private func integer(_ range: Range<Int>, negative: Bool) -> Int64? {
        var magnitude: UInt64 = 0
        for index in range {
            let (shifted, overflow) = magnitude.multipliedReportingOverflow(by: 10)
            let (sum, carry) = shifted.addingReportingOverflow(UInt64(bytes[index] - UInt8(ascii: "0")))
            guard !overflow, !carry else { return nil }
            magnitude = sum
        }
        if negative { return magnitude <= UInt64(Int64.max) + 1 ? Int64(truncatingIfNeeded: 0 &- magnitude) : nil }
        return magnitude <= UInt64(Int64.max) ? Int64(magnitude) : nil
    }
}

extension JSON: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByFloatLiteral {
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(arrayLiteral elements: JSON...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSON)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}
