/// Finds values in JSON text without building it: for cutting a large member out of a small document
/// (an event's payload out of its envelope) so only the rest goes through the JSON decoder.
enum JSONScan {
    /// The byte range of the value of the top-level member `key` of the object in `bytes`; nil when
    /// the text is not an object, has no such member, or the scan meets something malformed (the
    /// caller then decodes the whole text, which reports what is wrong). The value itself is not
    /// validated, only delimited. A key written with escapes is not recognised.
    static func member(_ key: String, in bytes: [UInt8]) -> Range<Int>? {
        let wanted = Array(key.utf8)
        var index = skipSpace(bytes, 0)
        guard index < bytes.count, bytes[index] == UInt8(ascii: "{") else { return nil }
        index += 1
        while true {
            index = skipSpace(bytes, index)
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { return nil }
            guard let keyEnd = stringEnd(bytes, index) else { return nil }
            let name = bytes[(index + 1)..<(keyEnd - 1)]
            index = skipSpace(bytes, keyEnd)
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { return nil }
            let start = skipSpace(bytes, index + 1)
            guard let end = valueEnd(bytes, start) else { return nil }
            if name.elementsEqual(wanted) { return start..<end }
            index = skipSpace(bytes, end)
            guard index < bytes.count, bytes[index] == UInt8(ascii: ",") else { return nil }
            index += 1
        }
    }

    private static func skipSpace(_ bytes: [UInt8], _ start: Int) -> Int {
        var index = start
        while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
        return index
    }

    /// The index after the closing quote of the string starting at `start`.
    private static func stringEnd(_ bytes: [UInt8], _ start: Int) -> Int? {
        var index = start + 1
        while index < bytes.count {
            switch bytes[index] {
            case UInt8(ascii: "\\"): index += 2
            case UInt8(ascii: "\""): return index + 1
            default: index += 1
            }
        }
        return nil
    }

    /// The index after the value starting at `start`.
    private static func valueEnd(_ bytes: [UInt8], _ start: Int) -> Int? {
        guard start < bytes.count else { return nil }
        switch bytes[start] {
        case UInt8(ascii: "\""):
            return stringEnd(bytes, start)
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            var depth = 0
            var index = start
            while index < bytes.count {
                switch bytes[index] {
                case UInt8(ascii: "\""):
                    guard let end = stringEnd(bytes, index) else { return nil }
                    index = end
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
            while index < bytes.count, ![UInt8(ascii: ","), UInt8(ascii: "}"), UInt8(ascii: "]"), 0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) {
                index += 1
            }
            return index > start ? index : nil
        }
    }
}
