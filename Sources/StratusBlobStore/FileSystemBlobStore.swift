import Logging
import NIOCore
import _NIOFileSystem

/// Blobs as files under a folder (by default the data folder's `assets/`): one file per key, written
/// through NIOFileSystem (its own thread pool, never the cooperative threads) and made visible only
/// when complete.
public struct FileSystemBlobStore: BlobStore {
    /// The folder the blobs live in.
    public let directory: String

    /// Creates the store; the folder is created when the first blob is written.
    public init(directory: String) {
        self.directory = directory
    }

    func path(_ key: BlobKey) -> FilePath {
        FilePath(directory).appending(key.rawValue)
    }

    public func put<Body: AsyncSequence & Sendable>(key: BlobKey, body: Body, logger: Logger) async throws where Body.Element == ByteBuffer {
        let path = path(key)
        try await FileSystem.shared.createDirectory(at: path.removingLastComponent(), withIntermediateDirectories: true, permissions: nil)
        // A new file stays invisible until the handle closes after a complete write; a thrown error
        // closes it without making anything visible.
        try await FileSystem.shared.withFileHandle(forWritingAt: path, options: .newFile(replaceExisting: true)) { handle in
            var offset: Int64 = 0
            for try await buffer in body {
                try await handle.write(contentsOf: buffer, toAbsoluteOffset: offset)
                offset += Int64(buffer.readableBytes)
            }
        }
    }

    public func read(key: BlobKey, range: Range<Int64>, logger: Logger, consume: (ByteBuffer) async throws -> Void) async throws {
        do {
            try await FileSystem.shared.withFileHandle(forReadingAt: path(key)) { handle in
                for try await chunk in handle.readChunks(in: range, chunkLength: .kibibytes(256)) {
                    try await consume(chunk)
                }
            }
        } catch let error as FileSystemError where error.code == .notFound {
            throw BlobStoreError(.notFound, "no blob \(key)")
        }
    }

    public func delete(key: BlobKey, logger: Logger) async throws {
        _ = try await FileSystem.shared.removeItem(at: path(key), recursively: false)
    }
}
