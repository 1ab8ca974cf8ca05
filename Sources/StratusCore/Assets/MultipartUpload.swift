import Foundation

/// An asset upload sent as `multipart/form-data` (as Apple's service accepts it): the file part's
/// bytes are the asset, everything else (the boundaries, the parts' headers, other form fields, the
/// preamble and epilogue) is the envelope and is not stored.
///
/// The body is read as it streams: `MultipartScanner.feed` hands back the file bytes of each chunk
/// and keeps at most a boundary's length (or one part's header block) of what it has not decided
/// yet. The envelope is bounded: the boundary's length, one part's header block and header lines,
/// the number of parts, and all of the envelope's bytes together. Anything malformed is refused
/// with BAD_REQUEST, an envelope past its bounds with LIMIT_EXCEEDED.
public enum MultipartUpload {
    /// The longest boundary (RFC 2046).
    public static let maxBoundaryBytes = 70
    /// The largest header block of one part.
    public static let maxHeaderBytes = 8192
    /// The most header lines of one part.
    public static let maxHeaderLines = 16
    /// The most parts of one body.
    public static let maxParts = 16
    /// The most bytes the envelope may add to the file (boundaries, headers, other fields, preamble, epilogue).
    public static let maxEnvelopeBytes: Int64 = 1 << 20

    /// The boundary of a `multipart/form-data` Content-Type; nil for any other Content-Type (the body
    /// is the file itself). Another `multipart/` type, or a missing or malformed boundary, is refused.
    public static func boundary(contentType: String?) throws(StratusError) -> [UInt8]? {
        guard let contentType else { return nil }
        let parameters = HeaderParameters.split(contentType)
        guard let type = parameters.first?.name.lowercased(), type.hasPrefix("multipart/") else { return nil }
        guard type == "multipart/form-data" else {
            throw StratusError(.badRequest, "An upload is the file's bytes or multipart/form-data, not '\(ClientText.excerpt(type))'")
        }
        guard let boundary = parameters.dropFirst().first(where: { $0.name.lowercased() == "boundary" })?.value else {
            throw StratusError(.badRequest, "multipart/form-data needs a boundary parameter")
        }
        let bytes = Array(boundary.utf8)
        guard (1...maxBoundaryBytes).contains(bytes.count), bytes.allSatisfy({ (0x20...0x7E).contains($0) }), bytes.last != 0x20 else {
            throw StratusError(.badRequest, "The multipart boundary must be 1 to \(maxBoundaryBytes) printable ASCII characters, not ending in a space")
        }
        return bytes
    }
}

/// Reads a `multipart/form-data` body chunk by chunk and hands back the file part's bytes.
///
/// The file part is the one whose Content-Disposition has a `filename` (or that has a
/// Content-Type); other parts are form fields and are skipped. A body holds exactly one file part.
public struct MultipartScanner: Sendable {
    private enum State: Sendable {
        /// Before the first boundary.
        case preamble
        /// A part's content; `file` when it is the file part.
        case content(file: Bool)
        /// Just after a boundary: `--` closes the body, CRLF opens a part.
        case afterBoundary
        /// A part's header block.
        case headers
        /// After the closing boundary.
        case epilogue
    }

    /// CRLF, `--` and the boundary: what ends a part's content.
    private let delimiter: [UInt8]
    /// Bytes read but not yet decided (at most a delimiter's length or a header block).
    private var pending: [UInt8]
    private var state = State.preamble
    private var parts = 0
    private var envelopeBytes: Int64
    /// Whether the body had its file part.
    public private(set) var sawFile = false

    public init(boundary: [UInt8]) {
        delimiter = [13, 10, 45, 45] + boundary
        // The first boundary opens the body without a CRLF before it: one is read ahead of it.
        pending = [13, 10]
        envelopeBytes = -2
    }

    /// Reads the next chunk of the body; returns the file bytes it completes (possibly none).
    public mutating func feed(_ bytes: some Collection<UInt8>) throws(StratusError) -> [UInt8] {
        pending.append(contentsOf: bytes)
        var out: [UInt8] = []
        var start = 0
        scanning: while true {
            switch state {
            case .preamble, .content:
                let isFile = if case .content(file: true) = state { true } else { false }
                if let found = Self.find(delimiter, in: pending, from: start) {
                    try take(start..<found, isFile: isFile, into: &out)
                    try countEnvelope(delimiter.count)
                    start = found + delimiter.count
                    state = .afterBoundary
                } else {
                    // The last bytes may be the start of a delimiter: they wait for the next chunk.
                    let safe = max(start, pending.count - (delimiter.count - 1))
                    try take(start..<safe, isFile: isFile, into: &out)
                    start = safe
                    break scanning
                }
            case .afterBoundary:
                guard pending.count - start >= 2 else { break scanning }
                if pending[start] == 45, pending[start + 1] == 45 {
                    try countEnvelope(2)
                    start += 2
                    state = .epilogue
                    continue
                }
                // Transport padding (spaces and tabs) may follow a boundary before its CRLF.
                var end = start
                while end < pending.count, pending[end] == 32 || pending[end] == 9 { end += 1 }
                guard end - start <= 64 else { throw Self.malformed("a boundary line holds more than its boundary") }
                guard end + 1 < pending.count else { break scanning }
                guard pending[end] == 13, pending[end + 1] == 10 else { throw Self.malformed("a boundary must end its line") }
                try countEnvelope(end + 2 - start)
                start = end + 2
                state = .headers
            case .headers:
                var blockEnd = start
                var next = start + 2
                if pending.count - start >= 2, pending[start] == 13, pending[start + 1] == 10 {
                    // A part without headers.
                } else if let found = Self.find([13, 10, 13, 10], in: pending, from: start) {
                    blockEnd = found
                    next = found + 4
                } else {
                    guard pending.count - start <= MultipartUpload.maxHeaderBytes else {
                        throw StratusError(.limitExceeded, "A multipart part's headers may hold at most \(MultipartUpload.maxHeaderBytes) bytes")
                    }
                    break scanning
                }
                guard blockEnd - start <= MultipartUpload.maxHeaderBytes else {
                    throw StratusError(.limitExceeded, "A multipart part's headers may hold at most \(MultipartUpload.maxHeaderBytes) bytes")
                }
                let isFile = try Self.isFilePart(headers: pending[start..<blockEnd])
                try countEnvelope(next - start)
                start = next
                parts += 1
                guard parts <= MultipartUpload.maxParts else {
                    throw StratusError(.limitExceeded, "A multipart upload may hold at most \(MultipartUpload.maxParts) parts")
                }
                if isFile {
                    guard !sawFile else { throw Self.malformed("it holds more than one file part; send one file per upload") }
                    sawFile = true
                }
                state = .content(file: isFile)
            case .epilogue:
                try countEnvelope(pending.count - start)
                start = pending.count
                break scanning
            }
        }
        pending.removeSubrange(0..<start)
        return out
    }

    /// Checks the body's end: its closing boundary came and it held a file part.
    public func finish() throws(StratusError) {
        guard case .epilogue = state else { throw Self.malformed("it ends before its closing boundary") }
        guard sawFile else { throw Self.malformed("it holds no file part (a part whose Content-Disposition has a filename)") }
    }

    private mutating func take(_ range: Range<Int>, isFile: Bool, into out: inout [UInt8]) throws(StratusError) {
        guard !range.isEmpty else { return }
        if isFile {
            out.append(contentsOf: pending[range])
        } else {
            try countEnvelope(range.count)
        }
    }

    private mutating func countEnvelope(_ count: Int) throws(StratusError) {
        envelopeBytes += Int64(count)
        guard envelopeBytes <= MultipartUpload.maxEnvelopeBytes else {
            throw StratusError(.limitExceeded, "A multipart upload's envelope (all but the file's bytes) may hold at most \(MultipartUpload.maxEnvelopeBytes) bytes")
        }
    }

    /// Whether a part with these headers is the file: its Content-Disposition (which every part
    /// needs, `form-data`) has a `filename`, or it has a Content-Type.
    private static func isFilePart(headers block: ArraySlice<UInt8>) throws(StratusError) -> Bool {
        var disposition: [HeaderParameters.Parameter]?
        var hasContentType = false
        let lines = block.isEmpty ? [] : Self.lines(block)
        guard lines.count <= MultipartUpload.maxHeaderLines else {
            throw StratusError(.limitExceeded, "A multipart part may have at most \(MultipartUpload.maxHeaderLines) header lines")
        }
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { throw malformed("a part's header line has no colon") }
            let name = line[..<colon].trimmingCharacters(in: .whitespaces).lowercased()
            let value = String(line[line.index(after: colon)...])
            switch name {
            case "content-disposition": disposition = HeaderParameters.split(value)
            case "content-type": hasContentType = true
            default: break
            }
        }
        guard let disposition, disposition.first?.name.lowercased() == "form-data" else {
            throw malformed("each part needs Content-Disposition: form-data")
        }
        let hasFilename = disposition.dropFirst().contains { ["filename", "filename*"].contains($0.name.lowercased()) }
        return hasFilename || hasContentType
    }

    private static func lines(_ block: ArraySlice<UInt8>) -> [String] {
        var lines: [String] = []
        var lineStart = block.startIndex
        var index = block.startIndex
        while index < block.endIndex {
            if block[index] == 13, index + 1 < block.endIndex, block[index + 1] == 10 {
                lines.append(String(decoding: block[lineStart..<index], as: UTF8.self))
                index += 2
                lineStart = index
            } else {
                index += 1
            }
        }
        lines.append(String(decoding: block[lineStart..<block.endIndex], as: UTF8.self))
        return lines
    }

    /// The first index at or after `from` where `needle` occurs in `haystack`.
    static func find(_ needle: [UInt8], in haystack: [UInt8], from: Int) -> Int? {
        guard let first = needle.first, haystack.count - from >= needle.count else { return nil }
        return haystack.withUnsafeBufferPointer { bytes -> Int? in
            needle.withUnsafeBufferPointer { wanted -> Int? in
                var index = from
                let last = bytes.count - wanted.count
                while index <= last {
                    if bytes[index] == first {
                        var matched = 1
                        while matched < wanted.count, bytes[index + matched] == wanted[matched] { matched += 1 }
                        if matched == wanted.count { return index }
                    }
                    index += 1
                }
                return nil
            }
        }
    }

    static func malformed(_ what: String) -> StratusError {
        StratusError(.badRequest, "The multipart upload is malformed: \(what)")
    }
}

/// A header value split at its `;` (outside quotes) into its first token and its `name=value`
/// parameters, quotes removed.
enum HeaderParameters {
    struct Parameter: Equatable {
        var name: String
        var value: String?
    }

    static func split(_ text: String) -> [Parameter] {
        var pieces: [String] = []
        var current = ""
        var quoted = false
        var escaped = false
        for character in text {
            if escaped {
                current.append(character)
                escaped = false
            } else if quoted, character == "\\" {
                escaped = true
            } else if character == "\"" {
                quoted.toggle()
                current.append(character)
            } else if character == ";", !quoted {
                pieces.append(current)
                current = ""
            } else {
                current.append(character)
            }
        }
        pieces.append(current)
        return pieces.map { piece in
            let trimmed = piece.trimmingCharacters(in: .whitespaces)
            guard let equals = trimmed.firstIndex(of: "=") else { return Parameter(name: trimmed, value: nil) }
            var value = trimmed[trimmed.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            if value.count >= 2, value.hasPrefix("\""), value.hasSuffix("\"") { value = String(value.dropFirst().dropLast()) }
            return Parameter(name: trimmed[..<equals].trimmingCharacters(in: .whitespaces), value: value)
        }
    }
}
