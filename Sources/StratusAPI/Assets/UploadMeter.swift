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

/// What an upload's bytes pass through on their way to the blob store: each chunk in, what goes on
/// out (possibly nothing), and a check at the end of the body.
protocol UploadStage: Sendable {
    func pass(_ buffer: ByteBuffer) throws(StratusError) -> ByteBuffer
    func finish() throws(StratusError)
}

extension UploadMeter: UploadStage {
    func pass(_ buffer: ByteBuffer) throws(StratusError) -> ByteBuffer {
        try count(buffer)
        return buffer
    }

    func finish() {}
}

/// A request body as the blob store reads it, through an `UploadStage` (an `UploadMeter`, or the
/// `MultipartFile` that keeps a multipart body's file part). Chunks the stage passes on empty are skipped.
struct StagedBody<Base: AsyncSequence & Sendable, Stage: UploadStage>: AsyncSequence, Sendable where Base.Element == ByteBuffer {
    typealias Element = ByteBuffer
    let base: Base
    let stage: Stage

    struct AsyncIterator: AsyncIteratorProtocol {
        var base: Base.AsyncIterator
        let stage: Stage
        var finished = false

        mutating func next() async throws -> ByteBuffer? {
            while !finished {
                guard let buffer = try await base.next() else {
                    finished = true
                    try stage.finish()
                    return nil
                }
                let passed = try stage.pass(buffer)
                if passed.readableBytes > 0 { return passed }
            }
            return nil
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(base: base.makeAsyncIterator(), stage: stage) }
}

/// The file part of a `multipart/form-data` upload as the blob store reads it: each chunk of the
/// body goes through a `MultipartScanner` (StratusCore), which hands back the file's bytes; the end
/// of the body checks that the envelope closed and held a file. A refusal is kept, so the route
/// answers it whatever the blob store made of the error.
final class MultipartFile: UploadStage {
    private let state: Mutex<(scanner: MultipartScanner, refusal: StratusError?)>

    init(boundary: [UInt8]) {
        state = Mutex((MultipartScanner(boundary: boundary), nil))
    }

    /// Why the envelope was refused, if it was.
    var refusal: StratusError? { state.withLock { $0.refusal } }

    /// The file bytes of one chunk of the body (possibly none).
    func pass(_ buffer: ByteBuffer) throws(StratusError) -> ByteBuffer {
        try record { scanner throws(StratusError) in ByteBuffer(bytes: try scanner.feed(buffer.readableBytesView)) }
    }

    /// Checks the end of the body.
    func finish() throws(StratusError) {
        try record { scanner throws(StratusError) in try scanner.finish() }
    }

    private func record<T: Sendable>(_ body: (inout MultipartScanner) throws(StratusError) -> T) throws(StratusError) -> T {
        let result: Result<T, StratusError> = state.withLock { state in
            do throws(StratusError) {
                return .success(try body(&state.scanner))
            } catch {
                state.refusal = error
                return .failure(error)
            }
        }
        return try result.get()
    }
}
