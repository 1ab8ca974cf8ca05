import Crypto
import NIOCore
import StratusCore
import Synchronization

/// Counts and hashes an upload's bytes while the blob store pulls them, and stops the upload as
/// soon as it passes the asset limit: the checksum is computed in passing, never over a buffered copy.
final class UploadMeter: Sendable {
    let limit: Int64
    private let state: Mutex<(bytes: Int64, hash: SHA256, exceeded: Bool)>

    init(limit: Int64) {
        self.limit = limit
        state = Mutex((0, SHA256(), false))
    }

    /// Counts one chunk; throws LIMIT_EXCEEDED (413) once the total passes the limit.
    func count(_ buffer: ByteBuffer) throws(StratusError) {
        let passed = state.withLock { state -> Bool in
            state.bytes += Int64(buffer.readableBytes)
            if state.bytes > limit {
                state.exceeded = true
                return true
            }
            buffer.withUnsafeReadableBytes { state.hash.update(bufferPointer: $0) }
            return false
        }
        if passed { throw Self.tooLarge(limit) }
    }

    /// Whether the upload passed the limit.
    var exceeded: Bool { state.withLock { $0.exceeded } }

    /// The bytes counted and their SHA-256.
    var total: (bytes: Int64, digest: [UInt8]) { state.withLock { ($0.bytes, Array($0.hash.finalize())) } }

    /// The error of an upload past `limit`.
    static func tooLarge(_ limit: Int64) -> StratusError {
        StratusError(ServerErrorCode("LIMIT_EXCEEDED", httpStatus: 413), "An asset may hold at most \(limit) bytes (STRATUS_MAX_ASSET_BYTES)")
    }
}

/// A request body as the blob store reads it, through an `UploadMeter`.
struct MeteredBody<Base: AsyncSequence & Sendable>: AsyncSequence, Sendable where Base.Element == ByteBuffer {
    typealias Element = ByteBuffer
    let base: Base
    let meter: UploadMeter

    struct AsyncIterator: AsyncIteratorProtocol {
        var base: Base.AsyncIterator
        let meter: UploadMeter

        mutating func next() async throws -> ByteBuffer? {
            guard let buffer = try await base.next() else { return nil }
            try meter.count(buffer)
            return buffer
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(base: base.makeAsyncIterator(), meter: meter) }
}
