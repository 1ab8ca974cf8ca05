import Logging
import NIOCore

/// Where asset bytes live: written once, read by ranges, deleted by `stratus-gc`. Every
/// implementation streams: no call holds a whole blob in memory.
public protocol BlobStore: Sendable {
    /// Stores the bytes `body` yields under `key`. The blob becomes readable only once the whole
    /// body arrived; when `body` or the store throws, nothing is left under `key`.
    func put<Body: AsyncSequence & Sendable>(key: BlobKey, body: Body, logger: Logger) async throws where Body.Element == ByteBuffer
    /// Hands the bytes of `range` of the blob to `consume`, in order, one chunk at a time.
    func read(key: BlobKey, range: Range<Int64>, logger: Logger, consume: (ByteBuffer) async throws -> Void) async throws
    /// Deletes the blob; deleting a blob that is not there is no error (collection may be replayed).
    func delete(key: BlobKey, logger: Logger) async throws
}

/// A blob's name in a store: lower-case letters, digits, `-` and `/` only, so it is the same
/// path on a filesystem and the same object key on any S3-compatible store, with nothing to escape.
public struct BlobKey: Sendable, Hashable, CustomStringConvertible {
    /// The key's text.
    public let rawValue: String

    /// Wraps a key; nil when it has a character outside `a-z 0-9 - /`, is empty or longer than 512
    /// bytes, or has an empty or dot segment.
    public init?(_ rawValue: String) {
        guard !rawValue.isEmpty, rawValue.utf8.count <= 512,
              rawValue.utf8.allSatisfy({ (UInt8(ascii: "a")...UInt8(ascii: "z")).contains($0) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0)
                  || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "/") }),
              !rawValue.split(separator: "/", omittingEmptySubsequences: false).contains(where: \.isEmpty)
        else { return nil }
        self.rawValue = rawValue
    }

    public var description: String { rawValue }
}

/// A failure of a blob store, safe to log (never carries credentials).
public struct BlobStoreError: Error, Sendable, CustomStringConvertible {
    /// What went wrong.
    public enum Kind: Sendable, Equatable {
        /// No blob under the key.
        case notFound
        /// The store refused or failed the request.
        case failed
    }

    /// The kind of failure.
    public var kind: Kind
    /// What happened, for the log.
    public var message: String

    /// Creates an error.
    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { "blob store: \(message)" }
}
