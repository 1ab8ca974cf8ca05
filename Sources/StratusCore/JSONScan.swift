import Foundation

/// Finds values in JSON text without building it: for cutting a large member out of a small document
/// (an event's payload out of its envelope) so only the rest goes through the JSON decoder.
enum JSONScan {
    /// The byte range of the value of the top-level member `key` of the object in `bytes`; nil when
    /// the text is not an object, has no such member, or the scan meets something malformed (the
    /// caller then decodes the whole text, which reports what is wrong). The value itself is not
    /// validated, only delimited. A key written with escapes is not recognised.
    /// The members of the object in `payload`, read by `JSONParser` with the value of member `key`
    /// cut out unread (read as null); nil when the text is not an object or does not parse.
    static func members(of payload: Data, cutting key: String) -> [String: JSONValue]? {
        var bytes = [UInt8](payload)
        if let value = member(key, in: bytes) { bytes.replaceSubrange(value, with: "null".utf8) }
        guard let json = try? JSONParser.parse(bytes), case .object(let members) = json else { return nil }
        return members
    }

    static func member(_ key: String, in bytes: [UInt8]) -> Range<Int>? {
        let wanted = Array(key.utf8)
        var found: Range<Int>?
        let complete = forEachMember(in: bytes, within: 0..<bytes.count) { name, value in
            guard bytes[name].elementsEqual(wanted) else { return true }
            found = value
            return false
        }
        return complete == nil ? nil : found
    }

    /// Calls `body` with the byte ranges of each member's name (inside its quotes) and value, of
    /// the object that `range` of `bytes` holds, in order, until `body` returns false. Returns the
    /// number of members visited; nil when the text is not an object or the scan meets something
    /// malformed (members visited until then were delimited correctly). Values are delimited, not
    /// validated; a name is its raw bytes, escapes not undone.
    @discardableResult
    static func forEachMember(in bytes: [UInt8], within range: Range<Int>, _ body: (Range<Int>, Range<Int>) -> Bool) -> Int? {
        var index = skipSpace(bytes, range.lowerBound, end: range.upperBound)
        guard index < range.upperBound, bytes[index] == UInt8(ascii: "{") else { return nil }
        index = skipSpace(bytes, index + 1, end: range.upperBound)
        if index < range.upperBound, bytes[index] == UInt8(ascii: "}") { return 0 }
        var count = 0
        while true {
            guard index < range.upperBound, bytes[index] == UInt8(ascii: "\"") else { return nil }
            guard let keyEnd = stringEnd(bytes, index, end: range.upperBound) else { return nil }
            let name = (index + 1)..<(keyEnd - 1)
            index = skipSpace(bytes, keyEnd, end: range.upperBound)
            guard index < range.upperBound, bytes[index] == UInt8(ascii: ":") else { return nil }
            let start = skipSpace(bytes, index + 1, end: range.upperBound)
            guard let end = valueEnd(bytes, start, end: range.upperBound) else { return nil }
            count += 1
            guard body(name, start..<end) else { return count }
            index = skipSpace(bytes, end, end: range.upperBound)
            guard index < range.upperBound else { return nil }
            if bytes[index] == UInt8(ascii: "}") { return count }
            guard bytes[index] == UInt8(ascii: ",") else { return nil }
            index = skipSpace(bytes, index + 1, end: range.upperBound)
        }
    }

    private static func skipSpace(_ bytes: [UInt8], _ start: Int, end: Int) -> Int {
        var index = start
        while index < end {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return index
            }
        }
        return index
    }

    /// The index after the closing quote of the string starting at `start`.
    private static func stringEnd(_ bytes: [UInt8], _ start: Int, end: Int) -> Int? {
        var index = start + 1
        while index < end {
            switch bytes[index] {
            case UInt8(ascii: "\\"): index += 2
            case UInt8(ascii: "\""): return index + 1
            default: index += 1
            }
        }
        return nil
    }

    /// The index after the value starting at `start`.
    private static func valueEnd(_ bytes: [UInt8], _ start: Int, end: Int) -> Int? {
        guard start < end else { return nil }
        switch bytes[start] {
        case UInt8(ascii: "\""):
            return stringEnd(bytes, start, end: end)
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            var depth = 0
            var index = start
            while index < end {
                switch bytes[index] {
                case UInt8(ascii: "\""):
                    guard let stringEnd = stringEnd(bytes, index, end: end) else { return nil }
                    index = stringEnd
                    continue
                case UInt8(ascii: "{"), UInt8(ascii: "["):
                    depth += 1
                case UInt8(ascii: "}"), UInt8(ascii: "]"):
                    depth -= 1
                    if depth == 0 { return index + 1 }
                default:
                    break
                }
                index += 1
            }
            return nil
        default:
            // A number, true, false or null: up to the next delimiter.
            var index = start
            scan: while index < end {
                switch bytes[index] {
                case UInt8(ascii: ","), UInt8(ascii: "}"), UInt8(ascii: "]"), 0x20, 0x09, 0x0A, 0x0D: break scan
                default: index += 1
                }
            }
            return index > start ? index : nil
        }
    }
}
