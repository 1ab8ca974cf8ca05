import Foundation
import Hummingbird
import StratusCore

/// Signs the `downloadURL` of every asset a response carries: a URL on the host the client called
/// (https behind a proxy that says `X-Forwarded-Proto: https`), valid for the URL lifetime.
struct AssetLinks: Sendable {
    let key: SecretKey
    let base: String
    let expiresAt: Int64

    init(key: SecretKey, base: String, expiresAt: Int64) {
        self.key = key
        self.base = base
        self.expiresAt = expiresAt
    }

    init(request: Request, key: SecretKey, settings: AssetSettings) {
        self.key = key
        base = publicBaseURL(request)
        expiresAt = Int64(Date().timeIntervalSince1970 * 1000) + Int64(settings.urlLifetime.components.seconds) * 1000
    }

    /// The download URL of the asset a receipt names; nil for a receipt that names no asset.
    func downloadURL(receipt: String) -> String? {
        guard let id = AssetValue.assetID(receipt: receipt) else { return nil }
        return "\(base)/assets/1/download/\(AssetDownloadGrant(assetID: id, expiresAt: expiresAt).signed(with: key))"
    }

    /// A field as encoded, with `downloadURL` added to each asset dictionary that has a receipt.
    func decorate(_ encoded: JSONValue) -> JSONValue {
        guard case .object(var field) = encoded, let type = field["type"]?.stringValue, type == "ASSETID" || type == "ASSETID_LIST" else {
            return encoded
        }
        func link(_ value: JSONValue) -> JSONValue {
            guard case .object(var asset) = value, let receipt = asset["receipt"]?.stringValue, let url = downloadURL(receipt: receipt) else { return value }
            asset["downloadURL"] = .string(url)
            return .object(asset)
        }
        switch field["value"] {
        case .array(let values)?: field["value"] = .array(values.map(link))
        case let value?: field["value"] = link(value)
        case nil: break
        }
        return .object(field)
    }
}

/// `scheme://host` of the request as the client addressed it, or "" (a relative URL) when it named no usable host.
func publicBaseURL(_ request: Request) -> String {
    guard let host = request.head.authority, !host.isEmpty, host.utf8.count <= 255 else { return "" }
    let secure = request.headers[.init("X-Forwarded-Proto")!] == "https"
    return "\(secure ? "https" : "http")://\(host)"
}
