import Crypto
import Foundation

/// An uploaded asset as an ASSETID field holds it: CloudKit's asset dictionary, without the
/// `downloadURL` (signed afresh for every answer) and without `wrappingKey` (Stratus does not
/// encrypt asset bytes on the client's behalf).
public struct AssetValue: Sendable, Hashable {
    /// The receipt: the asset's id, lower-case.
    public var receipt: String
    /// Bytes.
    public var size: Int64
    /// Base64 of the SHA-256 of the bytes (Apple leaves the format unspecified; see docs/assets.md).
    public var fileChecksum: String

    /// Creates a value.
    public init(receipt: String, size: Int64, fileChecksum: String) {
        self.receipt = receipt
        self.size = size
        self.fileChecksum = fileChecksum
    }

    /// Base64 of the SHA-256 of the receipt: stands for CloudKit's checksum of the (absent) wrapping
    /// key, so clients that copy it along find it.
    public var referenceChecksum: String { Data(SHA256.hash(data: Data(receipt.utf8))).base64EncodedString() }

    /// The dictionary an upload answers (`singleFile`) and an ASSETID field stores.
    public var json: JSONValue {
        .object([
            "receipt": .string(receipt), "size": .int(size), "fileChecksum": .string(fileChecksum),
            "referenceChecksum": .string(referenceChecksum),
        ])
    }

    /// The asset id a receipt names; nil when the text is not one.
    public static func assetID(receipt: String) -> UUID? {
        guard receipt.utf8.count == 36 else { return nil }
        return UUID(uuidString: receipt)
    }

    /// The receipt of an asset id.
    public static func receipt(_ assetID: UUID) -> String { assetID.uuidString.lowercased() }

    /// The `fileChecksum` of bytes whose SHA-256 is `digest`.
    public static func fileChecksum(_ digest: [UInt8]) -> String { Data(digest).base64EncodedString() }
}

extension FieldValue {
    /// The receipts the value's asset dictionaries carry (one, or a list's), in order; a dictionary
    /// without a string `receipt` gives nil in its place.
    public var assetReceipts: [String?] {
        switch self {
        case .asset(let json): [json["receipt"]?.stringValue]
        case .list(.asset, let values): values.flatMap(\.assetReceipts)
        default: []
        }
    }
}

extension Record {
    /// The ids of the assets the record's fields hold (receipts that are asset ids).
    public var assetIDs: Set<UUID> {
        var ids = Set<UUID>()
        for value in fields.values {
            for case let receipt? in value.assetReceipts {
                if let id = AssetValue.assetID(receipt: receipt) { ids.insert(id) }
            }
        }
        return ids
    }
}
