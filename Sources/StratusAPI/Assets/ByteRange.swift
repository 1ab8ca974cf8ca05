import Foundation

/// A `Range` request header against a blob of known size (RFC 9110 §14): one byte range is served
/// as 206; several ranges, or a header that is not a byte range, get the whole blob (as the RFC
/// allows); a range that starts past the end is unsatisfiable (416).
enum ByteRange: Equatable {
    case whole
    case partial(Range<Int64>)
    case unsatisfiable

    static func parse(_ header: String?, size: Int64) -> ByteRange {
        guard let header, header.hasPrefix("bytes="), header.utf8.count <= 200 else { return .whole }
        let spec = header.dropFirst("bytes=".count).trimmingCharacters(in: .whitespaces)
        guard !spec.contains(","), let dash = spec.firstIndex(of: "-") else { return .whole }
        let first = spec[..<dash], last = spec[spec.index(after: dash)...]
        if first.isEmpty {
            // The last N bytes.
            guard let count = Int64(last), count >= 0 else { return .whole }
            guard count > 0, size > 0 else { return .unsatisfiable }
            return .partial(max(0, size - count)..<size)
        }
        guard let start = Int64(first), start >= 0 else { return .whole }
        var end = size - 1
        if !last.isEmpty {
            guard let stated = Int64(last), stated >= start else { return .whole }
            end = min(stated, size - 1)
        }
        guard start < size else { return .unsatisfiable }
        return .partial(start..<(end + 1))
    }
}
