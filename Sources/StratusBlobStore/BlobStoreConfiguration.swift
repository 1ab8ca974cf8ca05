/// Which blob store a process uses (`STRATUS_ASSET_STORE`).
public enum BlobStoreConfiguration: Sendable, CustomStringConvertible {
    /// Files under a folder (`STRATUS_ASSET_DIR`, by default the data folder's `assets/`).
    case fileSystem(directory: String)
    /// An S3-compatible object store (`STRATUS_S3_*`).
    case s3(S3Configuration)

    /// The store.
    public func makeStore() -> any BlobStore {
        switch self {
        case .fileSystem(let directory): FileSystemBlobStore(directory: directory)
        case .s3(let configuration): S3BlobStore(configuration: configuration)
        }
    }

    public var description: String {
        switch self {
        case .fileSystem(let directory): "filesystem \(directory)"
        case .s3(let configuration): "\(configuration)"
        }
    }
}
