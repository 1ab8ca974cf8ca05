import Foundation
import NIOCore
import StratusCore

/// What the load generator reads of a `records/changes`, `records/query` or `records/modify`
/// answer, read on demand: every byte of the answer is checked as JSON (strings and their UTF-8,
/// escapes, numbers, literals, nesting), every record must be an object with a string
/// `recordName` or a `serverErrorCode`, and only what the caller goes on with is kept — the count,
/// the token, whether more are coming, the first error. A client that keeps
/// its records in its own store reads a page this way instead of building a tree of dictionaries
/// first, which cost the load generator more CPU per page than the API's whole answer
/// (docs/benchmarks.md, "The load generator's page reading").
struct RecordsAnswer: Equatable, Sendable {
    var records = 0
    var syncToken: String?
    var moreComing = false
    /// The answer's own `serverErrorCode`, or else the first record's.
    var errorCode: String?
    /// The answer's `reason`, when it has one.
    var reason: String?

    struct Invalid: Error, CustomStringConvertible {
        var offset: Int
        var reason: String
        var description: String { "not a records answer at byte \(offset): \(reason)" }
    }

    /// Reads an answer's body as it arrived.
    static func read(_ buffer: ByteBuffer) throws(Invalid) -> RecordsAnswer {
        try buffer.readableBytesView.withUnsafeBytes { bytes throws(Invalid) in try read(bytes) }
    }

    /// Reads `bytes`, which must be one JSON object and nothing else but whitespace.
    static func read(_ bytes: UnsafeRawBufferPointer) throws(Invalid) -> RecordsAnswer {
        var reader = Reader(bytes: bytes)
        let page = try reader.answer()
        reader.skipWhitespace()
        guard reader.offset == bytes.count else { throw reader.invalid("text after the answer") }
        return page
    }

    private struct Reader {
        let bytes: UnsafeRawBufferPointer
        var offset = 0
        /// Deeper than any record's field value needs (lists of lists are refused by the API).
        static let maxDepth = 64

        init(bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

        func invalid(_ reason: String) -> Invalid { Invalid(offset: offset, reason: reason) }

        mutating func skipWhitespace() {
            while offset < bytes.count {
                switch bytes[offset] {
                case 0x20, 0x0A, 0x0D, 0x09: offset += 1
                default: return
                }
            }
        }

        mutating func take(_ byte: UInt8) -> Bool {
            skipWhitespace()
            guard offset < bytes.count, bytes[offset] == byte else { return false }
            offset += 1
            return true
        }

        mutating func expect(_ byte: UInt8, _ what: String) throws(Invalid) {
            guard take(byte) else { throw invalid("expected \(what)") }
        }

        /// Whether the string at `range` (without its quotes, no escapes) is `name`.
        func equals(_ range: Range<Int>, _ name: StaticString) -> Bool {
            guard range.count == name.utf8CodeUnitCount else { return false }
            let expected = UnsafeRawBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount)
            return memcmp(bytes.baseAddress! + range.lowerBound, expected.baseAddress!, range.count) == 0
        }

        /// The members of an object whose `{` was just read: `member` reads each value.
        mutating func members(_ member: (inout Reader, Range<Int>?) throws(Invalid) -> Void) throws(Invalid) {
            if take(UInt8(ascii: "}")) { return }
            repeat {
                let key = try string()
                try expect(UInt8(ascii: ":"), "':' after a member's name")
                try member(&self, key)
            } while take(UInt8(ascii: ","))
            try expect(UInt8(ascii: "}"), "',' or '}' in an object")
        }

        /// The elements of a list whose `[` was just read: `element` reads each.
        mutating func elements(_ element: (inout Reader) throws(Invalid) -> Void) throws(Invalid) {
            if take(UInt8(ascii: "]")) { return }
            repeat { try element(&self) } while take(UInt8(ascii: ","))
            try expect(UInt8(ascii: "]"), "',' or ']' in a list")
        }

        mutating func answer() throws(Invalid) -> RecordsAnswer {
            try expect(UInt8(ascii: "{"), "an object")
            var page = RecordsAnswer()
            var recordError: String?
            try members { (reader: inout Reader, key: Range<Int>?) throws(Invalid) in
                guard let key else { return try reader.skipValue(depth: 1) }
                if reader.equals(key, "records") {
                    // A member named twice counts as its last, as the server's reader reads it.
                    (page.records, recordError) = (0, nil)
                    try reader.expect(UInt8(ascii: "["), "the records' list")
                    try reader.elements { (reader: inout Reader) throws(Invalid) in
                        let error = try reader.record()
                        if recordError == nil { recordError = error }
                        page.records += 1
                    }
                } else if reader.equals(key, "syncToken") {
                    page.syncToken = try reader.stringValue()
                } else if reader.equals(key, "moreComing") {
                    page.moreComing = try reader.bool()
                } else if reader.equals(key, "serverErrorCode") {
                    page.errorCode = try reader.stringValue()
                } else if reader.equals(key, "reason") {
                    page.reason = try reader.stringValue()
                } else {
                    try reader.skipValue(depth: 1)
                }
            }
            if page.errorCode == nil { page.errorCode = recordError }
            return page
        }

        /// One entry of `records`: an object with a string `recordName` (a saved or deleted
        /// record) or a `serverErrorCode` (returned).
        mutating func record() throws(Invalid) -> String? {
            try expect(UInt8(ascii: "{"), "a record object")
            var named = false
            var error: String?
            try members { (reader: inout Reader, key: Range<Int>?) throws(Invalid) in
                if let key, reader.equals(key, "recordName") {
                    _ = try reader.string()
                    named = true
                } else if let key, reader.equals(key, "serverErrorCode") {
                    error = try reader.stringValue()
                } else {
                    try reader.skipValue(depth: 2)
                }
            }
            guard named || error != nil else { throw invalid("a record without a recordName") }
            return error
        }

        mutating func skipValue(depth: Int) throws(Invalid) {
            guard depth < Self.maxDepth else { throw invalid("nested too deep") }
            skipWhitespace()
            guard offset < bytes.count else { throw invalid("the answer ends early") }
            switch bytes[offset] {
            case UInt8(ascii: "{"):
                offset += 1
                try members { (reader: inout Reader, _: Range<Int>?) throws(Invalid) in try reader.skipValue(depth: depth + 1) }
            case UInt8(ascii: "["):
                offset += 1
                try elements { (reader: inout Reader) throws(Invalid) in try reader.skipValue(depth: depth + 1) }
            case UInt8(ascii: "\""): _ = try string()
            case UInt8(ascii: "t"): try literal("true")
            case UInt8(ascii: "f"): try literal("false")
            case UInt8(ascii: "n"): try literal("null")
            default: try number()
            }
        }

        mutating func literal(_ word: StaticString) throws(Invalid) {
            let count = word.utf8CodeUnitCount
            guard offset + count <= bytes.count,
                  memcmp(bytes.baseAddress! + offset, word.utf8Start, count) == 0 else { throw invalid("not a JSON value") }
            offset += count
        }

        mutating func bool() throws(Invalid) -> Bool {
            skipWhitespace()
            if offset < bytes.count, bytes[offset] == UInt8(ascii: "t") { try literal("true"); return true }
            try literal("false")
            return false
        }

        mutating func number() throws(Invalid) {
            let start = offset
            if offset < bytes.count, bytes[offset] == UInt8(ascii: "-") { offset += 1 }
            let integral = offset
            guard digits() > 0 else {
                offset = start
                throw invalid("not a JSON value")
            }
            // No leading zero: "0" alone or a digit from 1 to 9 first.
            guard bytes[integral] != UInt8(ascii: "0") || offset - integral == 1 else { throw invalid("a number with a leading zero") }
            if offset < bytes.count, bytes[offset] == UInt8(ascii: ".") {
                offset += 1
                guard digits() > 0 else { throw invalid("a number without digits after its point") }
            }
            var exponent = false
            if offset < bytes.count, bytes[offset] | 0x20 == UInt8(ascii: "e") {
                exponent = true
                offset += 1
                if offset < bytes.count, bytes[offset] == UInt8(ascii: "+") || bytes[offset] == UInt8(ascii: "-") { offset += 1 }
                guard digits() > 0 else { throw invalid("a number without digits in its exponent") }
            }
            // Only an exponent or a long number can pass a double's range (rare: read it then).
            if exponent || offset - start > 18 {
                let text = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<offset]), as: UTF8.self)
                guard let value = Double(text), value.isFinite else { throw Invalid(offset: start, reason: "a number beyond a double's range") }
            }
        }

        mutating func digits() -> Int {
            let start = offset
            while offset < bytes.count, bytes[offset] >= UInt8(ascii: "0"), bytes[offset] <= UInt8(ascii: "9") { offset += 1 }
            return offset - start
        }

        /// A string's bytes between its quotes (nil when it holds an escape), checked: no control
        /// character, every escape one JSON allows.
        mutating func string() throws(Invalid) -> Range<Int>? {
            skipWhitespace()
            guard offset < bytes.count, bytes[offset] == UInt8(ascii: "\"") else { throw invalid("expected a string") }
            offset += 1
            let start = offset
            var escaped = false
            while offset < bytes.count {
                let byte = bytes[offset]
                if byte == UInt8(ascii: "\"") {
                    offset += 1
                    return escaped ? nil : start..<(offset - 1)
                }
                guard byte >= 0x20 else { throw invalid("a control character in a string") }
                if byte == UInt8(ascii: "\\") {
                    escaped = true
                    offset += 1
                    guard offset < bytes.count else { break }
                    switch bytes[offset] {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
                         UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                        offset += 1
                    case UInt8(ascii: "u"):
                        guard offset + 4 < bytes.count else { throw invalid("a short \\u escape") }
                        for index in 1...4 where !bytes[offset + index].isHexDigit { throw invalid("a bad \\u escape") }
                        offset += 5
                    default:
                        throw invalid("an escape JSON does not have")
                    }
                } else if byte < 0x80 {
                    offset += 1
                } else {
                    try utf8Sequence()
                }
            }
            throw invalid("a string without its closing quote")
        }

        /// One multi-byte UTF-8 sequence at `offset` (RFC 3629: no overlong form, no surrogate,
        /// nothing past U+10FFFF).
        mutating func utf8Sequence() throws(Invalid) {
            let lead = bytes[offset]
            let count: Int, second: ClosedRange<UInt8>
            switch lead {
            case 0xC2...0xDF: (count, second) = (1, 0x80...0xBF)
            case 0xE0: (count, second) = (2, 0xA0...0xBF)
            case 0xE1...0xEC, 0xEE...0xEF: (count, second) = (2, 0x80...0xBF)
            case 0xED: (count, second) = (2, 0x80...0x9F)
            case 0xF0: (count, second) = (3, 0x90...0xBF)
            case 0xF1...0xF3: (count, second) = (3, 0x80...0xBF)
            case 0xF4: (count, second) = (3, 0x80...0x8F)
            default: throw invalid("a string that is not UTF-8")
            }
            guard offset + count < bytes.count, second.contains(bytes[offset + 1]) else { throw invalid("a string that is not UTF-8") }
            for index in stride(from: 2, through: count, by: 1) where bytes[offset + index] & 0xC0 != 0x80 {
                throw invalid("a string that is not UTF-8")
            }
            offset += count + 1
        }

        /// A string value as text (`\uXXXX` escapes and the rest decoded).
        mutating func stringValue() throws(Invalid) -> String {
            skipWhitespace()
            let start = offset
            if let range = try string() {
                return String(decoding: UnsafeRawBufferPointer(rebasing: bytes[range]), as: UTF8.self)
            }
            // Rare in the names and tokens the pull keeps: the server's own reader decodes it.
            let text = UnsafeRawBufferPointer(rebasing: bytes[start..<offset]).withMemoryRebound(to: UInt8.self) { (raw) -> String? in
                guard case .string(let text)? = try? JSONParser.parse(raw) else { return nil }
                return text
            }
            guard let text else { throw Invalid(offset: start, reason: "a string that does not decode") }
            return text
        }
    }
}

private extension UInt8 {
    var isHexDigit: Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(self) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(self | 0x20)
    }
}
