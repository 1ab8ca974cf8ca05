import AsyncHTTPClient
import NIOCore

/// Reads at most a few KiB of a response body: enough to explain a refusal, never enough for a
/// hostile receiver to fill memory or a log line.
enum BoundedBody {
    /// The most bytes read of any response body.
    static let limit = 4096

    /// The first `limit` bytes of `body`; the rest is left unread (the connection is then dropped
    /// rather than reused). Errors while reading give what arrived before them.
    static func read(_ body: HTTPClientResponse.Body, limit: Int = limit) async -> [UInt8] {
        var bytes = [UInt8]()
        do {
            for try await chunk in body {
                bytes.append(contentsOf: chunk.readableBytesView.prefix(limit - bytes.count))
                if bytes.count >= limit { break }
            }
        } catch {}
        return bytes
    }

    /// A short, printable excerpt of `bytes` for a reason string: control characters replaced,
    /// at most `length` characters.
    static func excerpt(_ bytes: [UInt8], length: Int = 200) -> String {
        let text = String(decoding: bytes, as: UTF8.self)
        let cleaned = text.unicodeScalars.prefix(length).map { scalar in
            scalar.properties.generalCategory == .control ? " " : String(scalar)
        }.joined()
        return text.unicodeScalars.count > length ? cleaned + "…" : cleaned
    }
}
