import Foundation

/// Where an S3-compatible store is and how to reach it (`STRATUS_S3_*`, see docs/assets.md).
public struct S3Configuration: Sendable, CustomStringConvertible {
    /// How the bucket is named in a request's URL.
    public enum Addressing: String, Sendable {
        /// `https://host/bucket/key`: MinIO, moto, most self-hosted stores.
        case path
        /// `https://bucket.host/key`: AWS S3's default.
        case virtualHost = "virtual"
    }

    /// The store's base URL, e.g. `https://s3.eu-west-1.amazonaws.com` or `http://127.0.0.1:9000`.
    public var endpoint: URL
    /// The signing region (`us-east-1` for most self-hosted stores).
    public var region: String
    /// The bucket the blobs go to.
    public var bucket: String
    /// The access key id.
    public var accessKeyID: String
    /// The secret access key; never logged.
    public var secretAccessKey: String
    /// Path-style or virtual-host addressing.
    public var addressing: Addressing
    /// A prefix put before every key (e.g. `stratus/`), empty by default.
    public var keyPrefix: String
    /// Bytes of each part of a multipart upload (at least 5 MiB, S3's minimum); a blob up to this
    /// size goes in one PUT. The most a put holds in memory.
    public var partSize: Int

    /// Creates a configuration.
    public init(
        endpoint: URL, region: String, bucket: String, accessKeyID: String, secretAccessKey: String, addressing: Addressing = .path,
        keyPrefix: String = "", partSize: Int = 8 * 1024 * 1024
    ) {
        self.endpoint = endpoint
        self.region = region
        self.bucket = bucket
        self.accessKeyID = accessKeyID
        self.secretAccessKey = secretAccessKey
        self.addressing = addressing
        self.keyPrefix = keyPrefix
        self.partSize = max(partSize, 5 * 1024 * 1024)
    }

    /// The scheme, Host header value and path of a request for `key` (nil: the bucket itself).
    /// The path is percent-encoded as SigV4 signs it.
    public func location(of key: String?) -> (scheme: String, host: String, path: String) {
        let scheme = endpoint.scheme ?? "https"
        var host = endpoint.host ?? "localhost"
        if let port = endpoint.port, !(scheme == "https" && port == 443), !(scheme == "http" && port == 80) { host += ":\(port)" }
        let base = endpoint.path.hasSuffix("/") ? String(endpoint.path.dropLast()) : endpoint.path
        let object = key.map { "/" + S3Signer.encode(keyPrefix + $0, keepSlash: true) } ?? ""
        switch addressing {
        case .path:
            return (scheme, host, base + "/" + S3Signer.encode(bucket) + object)
        case .virtualHost:
            return (scheme, "\(bucket).\(host)", base + (object.isEmpty ? "/" : object))
        }
    }

    public var description: String {
        "S3Configuration(endpoint: \(endpoint), region: \(region), bucket: \(bucket), addressing: \(addressing.rawValue), accessKeyID: \(accessKeyID), secret: redacted)"
    }
}
