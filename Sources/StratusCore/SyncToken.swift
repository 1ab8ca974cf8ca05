import Crypto
import Foundation

/// A value carried to the client and back, authenticated with the server's secret key:
/// `base64url(json).base64url(hmac)`. Clients treat it as opaque.
public enum SignedToken {
    /// Signs a value.
    public static func sign<T: Encodable>(_ value: T, key: SecretKey) -> String {
        let body = EventCoding.encode(value)
        let mac = HMAC<SHA256>.authenticationCode(for: body, using: key.symmetricKey)
        return Base64URL.encode(body) + "." + Base64URL.encode(Data(mac))
    }

    /// Verifies and decodes a token; nil when it was not made by this server or does not decode.
    public static func open<T: Decodable>(_ text: String, as type: T.Type, key: SecretKey) -> T? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, let body = Base64URL.decode(String(parts[0])), let mac = Base64URL.decode(String(parts[1])),
              HMAC<SHA256>.isValidAuthenticationCode(mac, authenticating: body, using: key.symmetricKey)
        else { return nil }
        return try? EventCoding.decoder.decode(T.self, from: body)
    }
}

/// A zone sync token: which zone incarnation and which point of its change history the client holds.
public struct ZoneSyncToken: Sendable, Hashable, Codable {
    /// The zone key (binds the token to one zone of one database).
    public var zoneKey: String
    /// The zone incarnation: a token for a deleted-and-re-created zone is refused.
    public var incarnation: UUID
    /// The zone change counter value the client has seen everything up to.
    public var version: Int64
    /// During a reverse (newest-first) sync: the counter value the sync is bringing the client up to.
    public var reverseUpTo: Int64?
    /// During a reverse sync: the next page holds versions below this.
    public var reverseBelow: Int64?

    enum CodingKeys: String, CodingKey {
        case zoneKey = "z", incarnation = "i", version = "v", reverseUpTo = "u", reverseBelow = "b"
    }

    /// Creates a token value.
    public init(zoneKey: String, incarnation: UUID, version: Int64, reverseUpTo: Int64? = nil, reverseBelow: Int64? = nil) {
        self.zoneKey = zoneKey
        self.incarnation = incarnation
        self.version = version
        self.reverseUpTo = reverseUpTo
        self.reverseBelow = reverseBelow
    }
}

/// A database sync token: for every zone the client has seen, its incarnation and change counter.
/// Zones whose pair differs (or that are new) are the database's changes since the token.
public struct DatabaseSyncToken: Sendable, Hashable, Codable {
    /// Binds the token to one database: `container/environment/scope/owner`.
    public var database: String
    /// Zone name → "incarnation-prefix:counter" (or "deleted").
    public var zones: [String: String]

    enum CodingKeys: String, CodingKey {
        case database = "d", zones = "z"
    }

    /// Creates a token value.
    public init(database: String, zones: [String: String]) {
        self.database = database
        self.zones = zones
    }
}

extension ServerErrorCode {
    /// A sync token the server can no longer honour (zone re-created, tombstones collected past it):
    /// drop the local copy and sync from scratch.
    public static let changeTokenExpired = ServerErrorCode("CHANGE_TOKEN_EXPIRED", httpStatus: 410)
}
