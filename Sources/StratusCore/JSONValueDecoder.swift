import Foundation

/// Decodes a `Decodable` type from JSON text the way `JSONDecoder` (default strategies) does,
/// errors included (their kind, coding path and type), without its cost where a request is large:
/// the text is read by `JSONParser` (`.request`: numbers and repeated names as `JSONDecoder` reads
/// them), and a `JSONValue` member (a record's fields, a query) is handed over as read, where
/// `JSONDecoder` built it element by element, trying each JSON kind in turn (about 5 µs an integer
/// of a list; docs/benchmarks.md, "Hostile bodies").
///
/// Where they differ: a number with a fraction or an exponent whose value is 2^53 or more reads
/// as a double where an integer is asked for (`JSONDecoder` reads its text again as a decimal),
/// and a text that is no JSON is one error without a place.
public enum JSONValueDecoder {
    /// Not JSON: what `JSONDecoder` throws for it (no coding path).
    static let notJSON = DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "The given data was not valid JSON."))

    /// Decodes `type` from UTF-8 JSON text; the errors are `DecodingError`s as `JSONDecoder` throws them.
    public static func decode<T: Decodable>(_ type: T.Type, from bytes: UnsafeBufferPointer<UInt8>) throws -> T {
        var bytes = bytes
        // JSONDecoder passes over a byte order mark.
        if bytes.count >= 3, bytes[0] == 0xEF, bytes[1] == 0xBB, bytes[2] == 0xBF { bytes = UnsafeBufferPointer(rebasing: bytes[3...]) }
        let value: JSONValue
        do {
            value = try JSONParser.parse(bytes, reading: .request)
        } catch {
            throw notJSON
        }
        return try Self.value(T.self, from: value, path: [])
    }

    /// Decodes `type` from UTF-8 JSON text.
    public static func decode<T: Decodable>(_ type: T.Type, from data: Data) throws -> T {
        try data.withUnsafeBytes { raw in try decode(type, from: raw.bindMemory(to: UInt8.self)) }
    }

    /// The coding path's key for an array's element, as `JSONDecoder` names it.
    struct IndexKey: CodingKey {
        var stringValue: String
        var intValue: Int?

        init(index: Int) {
            stringValue = "Index \(index)"
            intValue = index
        }

        init?(stringValue: String) { return nil }
        init?(intValue: Int) { self.init(index: intValue) }
    }

    static func value<T: Decodable>(_ type: T.Type, from value: JSONValue, path: [any CodingKey]) throws -> T {
        // The members the requests are made of, handed over without an element-by-element decoding.
        if T.self == JSONValue.self { return value as! T }
        if T.self == [String: JSONValue].self {
            guard case .object(let members) = value else { throw mismatch([String: Any].self, value, path) }
            return members as! T
        }
        if T.self == String.self { return try string(value, path) as! T }
        if T.self == [String].self {
            guard case .array(let elements) = value else { throw mismatch([Any].self, value, path) }
            var strings: [String] = []
            strings.reserveCapacity(elements.count)
            for (index, element) in elements.enumerated() { strings.append(try string(element, path + [IndexKey(index: index)])) }
            return strings as! T
        }
        if T.self == URL.self {
            let text = try string(value, path)
            guard let url = URL(string: text) else {
                throw DecodingError.dataCorrupted(.init(codingPath: path, debugDescription: "Invalid URL string."))
            }
            return url as! T
        }
        if T.self == Data.self {
            let text = try string(value, path)
            guard let data = Data(base64Encoded: text) else {
                throw DecodingError.dataCorrupted(.init(codingPath: path, debugDescription: "Encountered Data is not valid Base64."))
            }
            return data as! T
        }
        return try T(from: ValueDecoder(value: value, codingPath: path))
    }

    static func string(_ value: JSONValue, _ path: [any CodingKey]) throws -> String {
        guard case .string(let text) = value else { throw mismatch(String.self, value, path) }
        return text
    }

    static func mismatch(_ type: Any.Type, _ value: JSONValue, _ path: [any CodingKey]) -> DecodingError {
        if value == .null {
            return .valueNotFound(type, .init(codingPath: path, debugDescription: "Cannot get value of type \(type) -- found null value instead"))
        }
        return .typeMismatch(type, .init(codingPath: path, debugDescription: "Expected to decode \(type) but found \(value.kind) instead."))
    }

    static func integer<T: FixedWidthInteger>(_ type: T.Type, _ value: JSONValue, _ path: [any CodingKey]) throws -> T {
        let exact: T?
        switch value {
        case .int(let number): exact = T(exactly: number)
        case .double(let number): exact = T(exactly: number)
        default: throw mismatch(T.self, value, path)
        }
        // JSONDecoder names no place for a number its type cannot hold.
        guard let exact else { throw notJSON }
        return exact
    }

    static func floatingPoint<T: BinaryFloatingPoint>(_ type: T.Type, _ value: JSONValue, _ path: [any CodingKey]) throws -> T {
        switch value {
        case .int(let number): return T(number)
        case .double(let number):
            let converted = T(number)
            guard converted.isFinite else { throw notJSON }
            return converted
        default: throw mismatch(T.self, value, path)
        }
    }

    struct ValueDecoder: Decoder {
        let value: JSONValue
        let codingPath: [any CodingKey]
        var userInfo: [CodingUserInfoKey: Any] { [:] }

        func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
            guard case .object(let members) = value else { throw JSONValueDecoder.mismatch([String: Any].self, value, codingPath) }
            return KeyedDecodingContainer(Keyed<Key>(members: members, codingPath: codingPath))
        }

        func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
            guard case .array(let elements) = value else { throw JSONValueDecoder.mismatch([Any].self, value, codingPath) }
            return Unkeyed(elements: elements, codingPath: codingPath)
        }

        func singleValueContainer() throws -> any SingleValueDecodingContainer { Single(value: value, codingPath: codingPath) }
    }

    struct Single: SingleValueDecodingContainer {
        let value: JSONValue
        let codingPath: [any CodingKey]

        func decodeNil() -> Bool { value == .null }

        func decode(_ type: Bool.Type) throws -> Bool {
            guard case .bool(let flag) = value else { throw JSONValueDecoder.mismatch(Bool.self, value, codingPath) }
            return flag
        }

        func decode(_ type: String.Type) throws -> String { try JSONValueDecoder.string(value, codingPath) }
        func decode(_ type: Double.Type) throws -> Double { try JSONValueDecoder.floatingPoint(type, value, codingPath) }
        func decode(_ type: Float.Type) throws -> Float { try JSONValueDecoder.floatingPoint(type, value, codingPath) }
        func decode(_ type: Int.Type) throws -> Int { try JSONValueDecoder.integer(type, value, codingPath) }
        func decode(_ type: Int8.Type) throws -> Int8 { try JSONValueDecoder.integer(type, value, codingPath) }
        func decode(_ type: Int16.Type) throws -> Int16 { try JSONValueDecoder.integer(type, value, codingPath) }
        func decode(_ type: Int32.Type) throws -> Int32 { try JSONValueDecoder.integer(type, value, codingPath) }
        func decode(_ type: Int64.Type) throws -> Int64 { try JSONValueDecoder.integer(type, value, codingPath) }
        func decode(_ type: UInt.Type) throws -> UInt { try JSONValueDecoder.integer(type, value, codingPath) }
        func decode(_ type: UInt8.Type) throws -> UInt8 { try JSONValueDecoder.integer(type, value, codingPath) }
        func decode(_ type: UInt16.Type) throws -> UInt16 { try JSONValueDecoder.integer(type, value, codingPath) }
        func decode(_ type: UInt32.Type) throws -> UInt32 { try JSONValueDecoder.integer(type, value, codingPath) }
        func decode(_ type: UInt64.Type) throws -> UInt64 { try JSONValueDecoder.integer(type, value, codingPath) }
        func decode<T: Decodable>(_ type: T.Type) throws -> T { try JSONValueDecoder.value(type, from: value, path: codingPath) }
    }

    struct Keyed<Key: CodingKey>: KeyedDecodingContainerProtocol {
        let members: [String: JSONValue]
        let codingPath: [any CodingKey]

        var allKeys: [Key] { members.keys.compactMap { Key(stringValue: $0) } }

        func contains(_ key: Key) -> Bool { members[key.stringValue] != nil }

        func member(_ key: Key) throws -> JSONValue {
            guard let value = members[key.stringValue] else {
                throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "No value associated with key \(key.stringValue)."))
            }
            return value
        }

        func single(_ key: Key) throws -> Single { Single(value: try member(key), codingPath: codingPath + [key]) }

        func decodeNil(forKey key: Key) throws -> Bool { try member(key) == .null }
        func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try single(key).decode(type) }
        func decode(_ type: String.Type, forKey key: Key) throws -> String { try single(key).decode(type) }
        func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try single(key).decode(type) }
        func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try single(key).decode(type) }
        func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try single(key).decode(type) }
        func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try single(key).decode(type) }
        func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try single(key).decode(type) }
        func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try single(key).decode(type) }
        func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try single(key).decode(type) }
        func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try single(key).decode(type) }
        func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try single(key).decode(type) }
        func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try single(key).decode(type) }
        func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try single(key).decode(type) }
        func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try single(key).decode(type) }
        func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
            try JSONValueDecoder.value(type, from: try member(key), path: codingPath + [key])
        }

        func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
            try ValueDecoder(value: try member(key), codingPath: codingPath + [key]).container(keyedBy: type)
        }

        func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
            try ValueDecoder(value: try member(key), codingPath: codingPath + [key]).unkeyedContainer()
        }

        func superDecoder() throws -> any Decoder {
            ValueDecoder(value: members["super"] ?? .null, codingPath: codingPath)
        }

        func superDecoder(forKey key: Key) throws -> any Decoder {
            ValueDecoder(value: members[key.stringValue] ?? .null, codingPath: codingPath + [key])
        }
    }

    struct Unkeyed: UnkeyedDecodingContainer {
        let elements: [JSONValue]
        let codingPath: [any CodingKey]
        var currentIndex = 0

        init(elements: [JSONValue], codingPath: [any CodingKey]) {
            self.elements = elements
            self.codingPath = codingPath
        }

        var count: Int? { elements.count }
        var isAtEnd: Bool { currentIndex >= elements.count }

        mutating func next(_ type: Any.Type) throws -> (JSONValue, [any CodingKey]) {
            let path = codingPath + [IndexKey(index: currentIndex)]
            guard !isAtEnd else {
                throw DecodingError.valueNotFound(type, .init(codingPath: path, debugDescription: "Unkeyed container is at end."))
            }
            defer { currentIndex += 1 }
            return (elements[currentIndex], path)
        }

        mutating func decodeNil() throws -> Bool {
            guard !isAtEnd else {
                throw DecodingError.valueNotFound(Any?.self, .init(
                    codingPath: codingPath + [IndexKey(index: currentIndex)], debugDescription: "Unkeyed container is at end."))
            }
            guard elements[currentIndex] == .null else { return false }
            currentIndex += 1
            return true
        }

        mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
            let (value, path) = try next(type)
            return try JSONValueDecoder.value(type, from: value, path: path)
        }

        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
            let (value, path) = try next(KeyedDecodingContainer<NestedKey>.self)
            return try ValueDecoder(value: value, codingPath: path).container(keyedBy: type)
        }

        mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
            let (value, path) = try next((any UnkeyedDecodingContainer).self)
            return try ValueDecoder(value: value, codingPath: path).unkeyedContainer()
        }

        mutating func superDecoder() throws -> any Decoder {
            let (value, path) = try next((any Decoder).self)
            return ValueDecoder(value: value, codingPath: path)
        }
    }
}
