/// Reads JSON text into a `JSONValue` directly, without a `Decoder`: the records of every page a
/// query, a lookup or a sync returns come from PostgreSQL as JSON text, and reading them through
/// `JSONDecoder` and `Codable` was most of the API's work per query (docs/benchmarks.md). Strict
/// RFC 8259: one value, optional whitespace around it, UTF-8 checked, nesting bounded; anything
/// else is a `JSONParser.Failure` with its byte offset, never a trap.
public enum JSONParser {
    /// Why a text is not JSON, and where.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        /// The byte offset at which reading stopped.
        public var offset: Int
        /// What was wrong there.
        public var reason: String

        public var description: String { "not JSON at byte \(offset): \(reason)" }
    }

    /// The deepest nesting of arrays and objects read (deeper text is refused, not recursed into).
    public static let maxDepth = 512

    /// The deepest nesting a request's body may have (`Reading.request`): CloudKit's deepest
    /// request (a list of references in a record in a batch) nests about ten deep, and a body of
    /// objects nested hundreds deep cost a tenth of a second of CPU per MB to read only to be refused.
    public static let maxRequestDepth = 64

    /// Reads one JSON value from UTF-8 text.
    public static func parse(_ text: String) throws(Failure) -> JSONValue {
        var text = text
        let result = text.withUTF8 { bytes in Result { () throws(Failure) -> JSONValue in try parse(bytes) } }
        return try result.get()
    }

    /// How a text is read into values.
    public enum Reading: Sendable {
        /// A number with a fraction or an exponent is a double, and a repeated member name's last
        /// value counts: for text PostgreSQL wrote, where a stored double's `1.0` stays a double.
        case exact
        /// As `JSONDecoder` reads a request's values (`JSONValueDecoder`): a number with a fraction
        /// or an exponent that is a whole number below 2^53 is an integer (`1.0`, `1e2`, `1e-400`),
        /// and a repeated member name's first value counts.
        case request
    }

    /// Reads one JSON value from UTF-8 bytes.
    public static func parse(_ bytes: UnsafeBufferPointer<UInt8>, reading: Reading = .exact) throws(Failure) -> JSONValue {
        var reader = Reader(bytes: bytes, request: reading == .request)
        reader.skipWhitespace()
        let value = try reader.value(depth: 0)
        reader.skipWhitespace()
        guard reader.offset == bytes.count else { throw reader.failure("text after the value") }
        return value
    }

    /// Reads one JSON value from UTF-8 bytes.
    public static func parse(_ bytes: [UInt8], reading: Reading = .exact) throws(Failure) -> JSONValue {
        try bytes.withUnsafeBufferPointer { (buffer) throws(Failure) -> JSONValue in try parse(buffer, reading: reading) }
    }

    private struct Reader {
        let bytes: UnsafeBufferPointer<UInt8>
        /// `Reading.request`.
        let request: Bool
        /// `maxRequestDepth` for a request, `maxDepth` otherwise.
        let maxDepth: Int
        var offset = 0

        init(bytes: UnsafeBufferPointer<UInt8>, request: Bool) {
            self.bytes = bytes
            self.request = request
            maxDepth = request ? JSONParser.maxRequestDepth : JSONParser.maxDepth
        }

        func failure(_ reason: String) -> Failure { Failure(offset: offset, reason: reason) }

        mutating func skipWhitespace() {
            while offset < bytes.count {
                switch bytes[offset] {
                case 0x20, 0x09, 0x0A, 0x0D: offset += 1
                default: return
                }
            }
        }

        mutating func value(depth: Int) throws(Failure) -> JSONValue {
            guard offset < bytes.count else { throw failure("the text ends where a value should be") }
            switch bytes[offset] {
            case UInt8(ascii: "{"): return try object(depth: depth + 1)
            case UInt8(ascii: "["): return try array(depth: depth + 1)
            case UInt8(ascii: "\""): return .string(try string())
            case UInt8(ascii: "t"): try literal("true"); return .bool(true)
            case UInt8(ascii: "f"): try literal("false"); return .bool(false)
            case UInt8(ascii: "n"): try literal("null"); return .null
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
            default: throw failure("no JSON value starts with byte \(bytes[offset])")
            }
        }

        mutating func literal(_ word: StaticString) throws(Failure) {
            let count = word.utf8CodeUnitCount
            guard bytes.count - offset >= count else { throw failure("the text ends inside \(word)") }
            for index in 0..<count where bytes[offset + index] != word.utf8Start[index] {
                throw failure("expected \(word)")
            }
            offset += count
        }

        mutating func object(depth: Int) throws(Failure) -> JSONValue {
            guard depth <= maxDepth else { throw failure("nested deeper than \(maxDepth)") }
            offset += 1
            // Room for six members at once: a record's objects (a field, a stamp, a zone id) are
            // that small, and growing an empty dictionary to six allocates three times.
            var members = [String: JSONValue](minimumCapacity: 6)
            skipWhitespace()
            if offset < bytes.count, bytes[offset] == UInt8(ascii: "}") {
                offset += 1
                return .object(members)
            }
            while true {
                skipWhitespace()
                guard offset < bytes.count, bytes[offset] == UInt8(ascii: "\"") else { throw failure("expected a member name") }
                let key = try string()
                skipWhitespace()
                guard offset < bytes.count, bytes[offset] == UInt8(ascii: ":") else { throw failure("expected ':' after a member name") }
                offset += 1
                skipWhitespace()
                let member = try value(depth: depth)
                if !request || members.index(forKey: key) == nil { members[key] = member }
                skipWhitespace()
                guard offset < bytes.count else { throw failure("the text ends inside an object") }
                if bytes[offset] == UInt8(ascii: ",") {
                    offset += 1
                    continue
                }
                guard bytes[offset] == UInt8(ascii: "}") else { throw failure("expected ',' or '}' in an object") }
                offset += 1
                return .object(members)
            }
        }

        mutating func array(depth: Int) throws(Failure) -> JSONValue {
            guard depth <= maxDepth else { throw failure("nested deeper than \(maxDepth)") }
            offset += 1
            var elements: [JSONValue] = []
            skipWhitespace()
            if offset < bytes.count, bytes[offset] == UInt8(ascii: "]") {
                offset += 1
                return .array(elements)
            }
            while true {
                skipWhitespace()
                elements.append(try value(depth: depth))
                skipWhitespace()
                guard offset < bytes.count else { throw failure("the text ends inside an array") }
                if bytes[offset] == UInt8(ascii: ",") {
                    offset += 1
                    continue
                }
                guard bytes[offset] == UInt8(ascii: "]") else { throw failure("expected ',' or ']' in an array") }
                offset += 1
                return .array(elements)
            }
        }

        /// A string from its opening quote; the common case (no escapes) is one scan and one copy.
        /// The scan reads eight bytes at a time while none of them is a quote, a backslash or a
        /// control character.
        mutating func string() throws(Failure) -> String {
            offset += 1
            let start = offset
            // The bytes seen ORed together: ASCII (no bit 7) needs no UTF-8 validation.
            var words: UInt64 = 0
            if let base = bytes.baseAddress {
                let ones: UInt64 = 0x0101_0101_0101_0101
                while bytes.count - offset >= 8 {
                    let word = UnsafeRawPointer(base + offset).loadUnaligned(as: UInt64.self)
                    let quote = word ^ (ones &* 0x22)
                    let backslash = word ^ (ones &* 0x5C)
                    // Each term sets a byte's top bit where the word has a zero byte (a quote, a
                    // backslash) or one below 0x20: exact as to whether there is one, which is all
                    // it decides.
                    let stop = ((quote &- ones) & ~quote) | ((backslash &- ones) & ~backslash) | ((word &- ones &* 0x20) & ~word)
                    if stop & (ones &* 0x80) != 0 { break }
                    words |= word
                    offset += 8
                }
            }
            var high: UInt8 = 0
            while offset < bytes.count {
                let byte = bytes[offset]
                if byte == UInt8(ascii: "\"") {
                    let text = high < 0x80 && words & 0x8080_8080_8080_8080 == 0 ? ascii(start..<offset) : try utf8(start..<offset)
                    offset += 1
                    return text
                }
                if byte == UInt8(ascii: "\\") { return try escapedString(from: start) }
                guard byte >= 0x20 else { throw failure("a control character inside a string") }
                high |= byte
                offset += 1
            }
            throw failure("the text ends inside a string")
        }

        /// Bytes known to be ASCII as a string: one of at most 15 bytes (most member names and
        /// values) is made without checking them again, as `String(decoding:as:)` would; a longer
        /// one the standard library still checks. `String(validating:as:)` is generic over the
        /// encoding and looked its metadata up at every call: about a fifth of reading a sync page.
        func ascii(_ range: Range<Int>) -> String {
            let source = UnsafeBufferPointer(rebasing: bytes[range])
            return String(unsafeUninitializedCapacity: source.count) { target in
                _ = target.initialize(fromContentsOf: source)
                return source.count
            }
        }

        func utf8(_ range: Range<Int>) throws(Failure) -> String {
            guard let text = String(validating: UnsafeBufferPointer(rebasing: bytes[range]), as: UTF8.self) else {
                throw Failure(offset: range.lowerBound, reason: "a string that is not UTF-8")
            }
            return text
        }

        mutating func escapedString(from start: Int) throws(Failure) -> String {
            var text = try utf8(start..<offset)
            var run = offset
            while offset < bytes.count {
                let byte = bytes[offset]
                if byte == UInt8(ascii: "\"") {
                    text += try utf8(run..<offset)
                    offset += 1
                    return text
                }
                if byte == UInt8(ascii: "\\") {
                    text += try utf8(run..<offset)
                    offset += 1
                    guard offset < bytes.count else { throw failure("the text ends inside an escape") }
                    let escape = bytes[offset]
                    offset += 1
                    switch escape {
                    case UInt8(ascii: "\""): text += "\""
                    case UInt8(ascii: "\\"): text += "\\"
                    case UInt8(ascii: "/"): text += "/"
                    case UInt8(ascii: "b"): text += "\u{08}"
                    case UInt8(ascii: "f"): text += "\u{0C}"
                    case UInt8(ascii: "n"): text += "\n"
                    case UInt8(ascii: "r"): text += "\r"
                    case UInt8(ascii: "t"): text += "\t"
                    case UInt8(ascii: "u"): text.unicodeScalars.append(try unicodeEscape())
                    default: throw failure("an unknown escape")
                    }
                    run = offset
                    continue
                }
                guard byte >= 0x20 else { throw failure("a control character inside a string") }
                offset += 1
            }
            throw failure("the text ends inside a string")
        }

        /// The scalar of `\uXXXX` (after the `u`), a surrogate pair read whole.
        mutating func unicodeEscape() throws(Failure) -> Unicode.Scalar {
            let first = try hex4()
            if (0xD800...0xDBFF).contains(first) {
                guard bytes.count - offset >= 6, bytes[offset] == UInt8(ascii: "\\"), bytes[offset + 1] == UInt8(ascii: "u") else {
                    throw failure("a high surrogate without its low surrogate")
                }
                offset += 2
                let second = try hex4()
                guard (0xDC00...0xDFFF).contains(second) else { throw failure("a high surrogate without its low surrogate") }
                let scalar = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
                guard let value = Unicode.Scalar(scalar) else { throw failure("an escape that is no Unicode scalar") }
                return value
            }
            guard let value = Unicode.Scalar(first) else { throw failure("a low surrogate on its own") }
            return value
        }

        mutating func hex4() throws(Failure) -> UInt32 {
            guard bytes.count - offset >= 4 else { throw failure("the text ends inside a \\u escape") }
            var value: UInt32 = 0
            for _ in 0..<4 {
                let byte = bytes[offset]
                let digit: UInt8
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
                default: throw failure("a \\u escape needs four hex digits")
                }
                value = value << 4 | UInt32(digit)
                offset += 1
            }
            return value
        }

        /// A number: an integer that fits 64 bits is `.int`, anything with a fraction or an exponent,
        /// or beyond 64 bits, is `.double` (as `JSONValue`'s decoding reads them).
        mutating func number() throws(Failure) -> JSONValue {
            let start = offset
            var integral = true
            if bytes[offset] == UInt8(ascii: "-") { offset += 1 }
            guard offset < bytes.count, isDigit(bytes[offset]) else { throw failure("a number needs digits") }
            if bytes[offset] == UInt8(ascii: "0") {
                offset += 1
            } else {
                while offset < bytes.count, isDigit(bytes[offset]) { offset += 1 }
            }
            if offset < bytes.count, bytes[offset] == UInt8(ascii: ".") {
                integral = false
                offset += 1
                guard offset < bytes.count, isDigit(bytes[offset]) else { throw failure("a fraction needs digits") }
                while offset < bytes.count, isDigit(bytes[offset]) { offset += 1 }
            }
            if offset < bytes.count, bytes[offset] == UInt8(ascii: "e") || bytes[offset] == UInt8(ascii: "E") {
                integral = false
                offset += 1
                if offset < bytes.count, bytes[offset] == UInt8(ascii: "+") || bytes[offset] == UInt8(ascii: "-") { offset += 1 }
                guard offset < bytes.count, isDigit(bytes[offset]) else { throw failure("an exponent needs digits") }
                while offset < bytes.count, isDigit(bytes[offset]) { offset += 1 }
            }
            if integral, let value = integer(start..<offset) { return .int(value) }
            // The number's bytes are ASCII digits and signs: always valid UTF-8.
            let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<offset]), as: UTF8.self)
            if integral, let value = Int64(text) { return .int(value) }
            guard let value = Double(text), value.isFinite else { throw Failure(offset: start, reason: "a number beyond a double's range") }
            // JSONDecoder reads such a number as an integer when its double is one below 2^53
            // (beyond, it reads the text again as a decimal; here it stays a double).
            if request, value.magnitude < 9_007_199_254_740_992, let exact = Int64(exactly: value) { return .int(exact) }
            return .double(value)
        }

        /// An integer of at most 18 digits, which cannot overflow, read from its bytes; nil for a
        /// longer one, which `Int64(_:)` reads.
        func integer(_ range: Range<Int>) -> Int64? {
            var index = range.lowerBound
            let negative = bytes[index] == UInt8(ascii: "-")
            if negative { index += 1 }
            guard range.upperBound - index <= 18 else { return nil }
            var value: Int64 = 0
            while index < range.upperBound {
                value = value &* 10 &+ Int64(bytes[index] &- UInt8(ascii: "0"))
                index += 1
            }
            return negative ? -value : value
        }

        func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }
    }
}
