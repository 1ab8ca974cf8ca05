/// The tar (ustar) framing of an export archive (docs/operations.md, "Exporting and importing"):
/// each file a 512-byte header, its bytes, and zeros up to the next 512-byte boundary; two zero
/// blocks end the archive. Only what an export writes is read back: regular files whose names are
/// archive paths (`ArchivePath`), no links, no directories, no extended headers, so a hostile
/// archive cannot name a file outside the place it is read into.
public enum ArchiveTar {
    /// The size of a header and of the blocks a file's bytes are padded to.
    public static let blockSize = 512

    /// One file's header as the archive holds it.
    public struct Header: Sendable, Hashable {
        /// The file's path in the archive (checked by `ArchivePath.check`).
        public var path: String
        /// The file's size in bytes.
        public var size: Int64

        /// Creates a header.
        public init(path: String, size: Int64) {
            self.path = path
            self.size = size
        }
    }

    /// The largest size an octal size field of 11 digits holds (8 GiB - 1).
    public static let maxFileSize: Int64 = 0o77777777777

    /// A header block for a regular file (mode 0644, owner 0, time 0: an archive's bytes depend only
    /// on its contents). The path must be an archive path of at most 100 bytes.
    public static func header(path: String, size: Int64) -> [UInt8] {
        precondition(size >= 0 && size <= maxFileSize && path.utf8.count <= ArchivePath.maxBytes)
        var block = [UInt8](repeating: 0, count: blockSize)
        func put(_ text: String, at offset: Int) {
            for (index, byte) in text.utf8.enumerated() { block[offset + index] = byte }
        }
        put(path, at: 0)
        put("0000644", at: 100)
        put("0000000", at: 108)
        put("0000000", at: 116)
        put(octal(size, digits: 11), at: 124)
        put(octal(0, digits: 11), at: 136)
        block[156] = UInt8(ascii: "0")
        put("ustar", at: 257)
        put("00", at: 263)
        return sealed(block)
    }

    /// A header block with its checksum (written again): the sum of its bytes, its own field
    /// counted as spaces, as six octal digits, a NUL and a space.
    public static func sealed(_ header: [UInt8]) -> [UInt8] {
        var block = header
        for index in 148..<156 { block[index] = UInt8(ascii: " ") }
        let sum = block.reduce(0) { $0 + Int64($1) }
        block.replaceSubrange(148..<156, with: Array(octal(sum, digits: 6).utf8) + [0, UInt8(ascii: " ")])
        return block
    }

    /// The zeros that pad a file of `size` bytes to a block boundary.
    public static func padding(_ size: Int64) -> Int {
        let rest = Int(size % Int64(blockSize))
        return rest == 0 ? 0 : blockSize - rest
    }

    /// The two zero blocks that end an archive.
    public static var end: [UInt8] { [UInt8](repeating: 0, count: 2 * blockSize) }

    /// Reads a header block: nil for a zero block (the archive's end); a clear refusal for a block
    /// whose checksum is wrong, that is not a ustar regular file, or whose path or size is not one
    /// an export writes.
    public static func read(_ block: [UInt8]) throws(StratusError) -> Header? {
        guard block.count == blockSize else { throw ArchiveProblem.refuse("the archive is truncated inside a file header") }
        if block.allSatisfy({ $0 == 0 }) { return nil }
        var unsigned: Int64 = 0
        for (index, byte) in block.enumerated() { unsigned += (148..<156).contains(index) ? 32 : Int64(byte) }
        guard let stored = number(block[148..<156]), stored == unsigned else {
            throw ArchiveProblem.refuse("a file header's checksum is wrong: the archive is damaged")
        }
        guard block[257..<262].elementsEqual("ustar".utf8) else { throw ArchiveProblem.refuse("a file header is not a ustar header") }
        guard block[156] == UInt8(ascii: "0") || block[156] == 0 else {
            throw ArchiveProblem.refuse("the archive holds something other than a regular file (a link, a directory or an extended header)")
        }
        guard block[345..<500].allSatisfy({ $0 == 0 }) else {
            throw ArchiveProblem.refuse("a file header uses a path prefix; an export's paths fit in the name field")
        }
        let nameBytes = block[0..<100].prefix { $0 != 0 }
        guard let path = String(validating: nameBytes, as: UTF8.self) else { throw ArchiveProblem.refuse("a file's path is not UTF-8") }
        try ArchivePath.check(path)
        guard let size = number(block[124..<136]), size <= maxFileSize else {
            throw ArchiveProblem.refuse("the size of '\(ClientText.excerpt(path))' is not an octal number of at most 11 digits")
        }
        return Header(path: path, size: size)
    }

    /// An octal field: digits, then NUL or spaces. Nil for anything else (a base-256 size among them).
    static func number(_ field: ArraySlice<UInt8>) -> Int64? {
        var value: Int64 = 0
        var digits = 0
        var ended = false
        for byte in field {
            if byte == 0 || byte == UInt8(ascii: " ") {
                ended = digits > 0 || ended
                continue
            }
            guard !ended, (UInt8(ascii: "0")...UInt8(ascii: "7")).contains(byte), digits < 11 else { return nil }
            value = value * 8 + Int64(byte - UInt8(ascii: "0"))
            digits += 1
        }
        return digits > 0 ? value : nil
    }

    static func octal(_ value: Int64, digits: Int) -> String {
        let text = String(value, radix: 8)
        return String(repeating: "0", count: max(0, digits - text.count)) + text
    }
}

/// A file's path inside an archive: relative, at most 100 bytes, segments of letters, digits, `.`,
/// `_` and `-` that are not `.` or `..`; so `../`, absolute paths and odd bytes are refused before
/// anything is read or written.
public enum ArchivePath {
    /// The longest path (the ustar name field).
    public static let maxBytes = 100

    /// Refuses a path an export never writes.
    public static func check(_ path: String) throws(StratusError) {
        let segments = path.split(separator: "/", omittingEmptySubsequences: false)
        guard !path.isEmpty, path.utf8.count <= maxBytes, segments.count <= 4,
              segments.allSatisfy({ segment in
                  !segment.isEmpty && segment != "." && segment != ".."
                      && segment.utf8.allSatisfy { $0.isArchivePathByte }
              })
        else {
            throw ArchiveProblem.refuse("the archive names a file '\(ClientText.excerpt(path))' outside its own layout (absolute, '..', or odd characters)")
        }
    }
}

extension UInt8 {
    fileprivate var isArchivePathByte: Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(self) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(self)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(self) || self == UInt8(ascii: ".") || self == UInt8(ascii: "_") || self == UInt8(ascii: "-")
    }
}

/// Refusals of an archive: BAD_REQUEST with a reason that names what is wrong.
public enum ArchiveProblem {
    /// The error an unusable archive is refused with.
    public static func refuse(_ reason: String) -> StratusError {
        StratusError(.badRequest, "Archive refused, nothing was loaded: \(reason)")
    }
}

/// Reads an archive's bytes as they arrive, in chunks of any size, into its files: a header, the
/// file's bytes, its end; then the archive's end. Only zeros may follow the end; an archive that
/// stops before it (`finish`) is truncated. Holds at most one header block.
public struct ArchiveTarReader: Sendable {
    /// What a chunk brought.
    public enum Event: Sendable, Hashable {
        /// A file begins; its bytes start at `offset` in the archive.
        case file(ArchiveTar.Header, offset: Int64)
        /// Some of the current file's bytes.
        case data([UInt8])
        /// The current file's bytes are complete.
        case fileEnd
        /// The archive's end (its first zero block).
        case end
    }

    enum State: Sendable {
        case header
        case data(remaining: Int64, padding: Int)
        case padding(Int)
        case end
    }

    var state = State.header
    var block: [UInt8] = []
    /// Bytes read so far.
    public private(set) var offset: Int64 = 0

    /// A reader at the archive's start.
    public init() {}

    /// The events `chunk` completes.
    public mutating func feed(_ chunk: some Collection<UInt8>) throws(StratusError) -> [Event] {
        var events: [Event] = []
        var index = chunk.startIndex
        while index != chunk.endIndex {
            switch state {
            case .header:
                let take = min(ArchiveTar.blockSize - block.count, chunk.distance(from: index, to: chunk.endIndex))
                let next = chunk.index(index, offsetBy: take)
                block.append(contentsOf: chunk[index..<next])
                offset += Int64(take)
                index = next
                guard block.count == ArchiveTar.blockSize else { continue }
                let read = try ArchiveTar.read(block)
                block.removeAll(keepingCapacity: true)
                guard let header = read else {
                    state = .end
                    events.append(.end)
                    continue
                }
                events.append(.file(header, offset: offset))
                if header.size == 0 {
                    events.append(.fileEnd)
                    state = .header
                } else {
                    state = .data(remaining: header.size, padding: ArchiveTar.padding(header.size))
                }
            case .data(let remaining, let padding):
                let take = Int(min(remaining, Int64(chunk.distance(from: index, to: chunk.endIndex))))
                let next = chunk.index(index, offsetBy: take)
                events.append(.data(Array(chunk[index..<next])))
                offset += Int64(take)
                index = next
                if Int64(take) == remaining {
                    events.append(.fileEnd)
                    state = padding > 0 ? .padding(padding) : .header
                } else {
                    state = .data(remaining: remaining - Int64(take), padding: padding)
                }
            case .padding(let left):
                let take = min(left, chunk.distance(from: index, to: chunk.endIndex))
                let next = chunk.index(index, offsetBy: take)
                offset += Int64(take)
                index = next
                state = take == left ? .header : .padding(left - take)
            case .end:
                guard chunk[index] == 0 else { throw ArchiveProblem.refuse("something follows the archive's end") }
                offset += 1
                index = chunk.index(after: index)
            }
        }
        return events
    }

    /// Refuses an archive that stopped before its end.
    public func finish() throws(StratusError) {
        guard case .end = state else { throw ArchiveProblem.refuse("the archive is truncated: it stops before its end") }
    }
}
