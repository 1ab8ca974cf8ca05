import Foundation

/// What an upload URL from `assets/upload` allows: one upload of the asset of one field of one
/// record, until it expires. Signed into the URL, so the upload itself needs no other credential.
public struct AssetUploadGrant: Sendable, Hashable, Codable {
    /// The asset the upload creates (its receipt).
    public var assetID: UUID
    /// The database the record lives in.
    public var database: DatabaseID
    /// The record's zone.
    public var zoneName: String
    /// The record the asset may be bound to.
    public var recordName: String
    /// The record's type, as the token named it.
    public var recordType: String
    /// The ASSETID (or ASSETID_LIST) field the asset may be bound to.
    public var fieldName: String
    /// Milliseconds since 1970 after which the URL no longer takes an upload.
    public var expiresAt: Int64
    /// The user who asked for the URL (nil: a caller without a user, or a URL of an older release).
    public var uploader: String?

    enum CodingKeys: String, CodingKey {
        case assetID = "a", database = "d", zoneName = "z", recordName = "r", recordType = "t", fieldName = "f", expiresAt = "e", uploader = "u"
    }

    /// Creates a grant.
    public init(assetID: UUID, database: DatabaseID, zoneName: String, recordName: String, recordType: String, fieldName: String, expiresAt: Int64,
                uploader: String? = nil) {
        self.assetID = assetID
        self.database = database
        self.zoneName = zoneName
        self.recordName = recordName
        self.recordType = recordType
        self.fieldName = fieldName
        self.expiresAt = expiresAt
        self.uploader = uploader
    }

    /// Whom the upload's bytes count against in the storage quota: the database's owner, in the
    /// public database the uploader (as a public record counts against its creator).
    public var usageOwner: String {
        database.scope == .public ? (uploader ?? database.owner) : database.owner
    }

    /// The grant as the URL path segment that carries it.
    public func signed(with key: SecretKey) -> String { SignedToken.sign(self, kind: .assetUpload, key: key) }

    /// The grant of an upload URL's path segment; nil when this server did not sign it as an upload grant.
    public static func open(_ text: String, key: SecretKey) -> AssetUploadGrant? {
        SignedToken.open(text, as: AssetUploadGrant.self, kind: .assetUpload, key: key)
    }
}

/// What a `downloadURL` allows: reading one asset until it expires.
public struct AssetDownloadGrant: Sendable, Hashable, Codable {
    /// The asset.
    public var assetID: UUID
    /// Milliseconds since 1970 after which the URL no longer serves the asset.
    public var expiresAt: Int64

    enum CodingKeys: String, CodingKey {
        case assetID = "a", expiresAt = "e"
    }

    /// Creates a grant.
    public init(assetID: UUID, expiresAt: Int64) {
        self.assetID = assetID
        self.expiresAt = expiresAt
    }

    /// The grant as the URL path segment that carries it.
    public func signed(with key: SecretKey) -> String { SignedToken.sign(self, kind: .assetDownload, key: key) }

    /// The grant of a download URL's path segment; nil when this server did not sign it as a download grant.
    public static func open(_ text: String, key: SecretKey) -> AssetDownloadGrant? {
        SignedToken.open(text, as: AssetDownloadGrant.self, kind: .assetDownload, key: key)
    }
}
