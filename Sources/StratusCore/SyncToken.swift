import Crypto
import Foundation

/// What a signed token is for. Each kind is signed with a key of its own, derived from the server's
/// secret key, so a token issued for one purpose never verifies as another.
public enum TokenKind: String, Sendable, CaseIterable {
    /// `ckWebAuthToken`: who the caller is.
    case webAuth = "web-auth"
    /// A zone's `syncToken` (`records/changes`, `changes/zone`).
    case zoneSync = "zone-sync"
    /// A database's `syncToken` (`zones/changes`, `changes/database`).
    case databaseSync = "database-sync"
    /// A query's `continuationMarker`.
    case continuationMarker = "continuation-marker"
    /// A user's position in the notification log (`notifications/changes`).
    case notificationSync = "notification-sync"
    /// An asset upload URL (`assets/upload`): one upload of one record field's asset.
    case assetUpload = "asset-upload"
    /// An asset's `downloadURL`: reading one asset until it expires.
    case assetDownload = "asset-download"
    /// A hosted sign-in page's request (`redirectURL`): which container, for which web origin,
    /// until when; it stands for the app on that page instead of the API token.
    case signInRequest = "sign-in-request"
    /// The `state` of the hosted sign-in page's authorization request to an issuer: the waiting
    /// sign-in request's container and origin, the issuer, the nonce the ID token must carry.
    case providerState = "provider-state"

    /// Whether tokens of this kind travel in URLs (query items): those keep the URL-safe text
    /// format 2; the others are written in format 3, standard base64 of bytes.
    var travelsInURL: Bool { self == .webAuth || self == .assetUpload || self == .assetDownload || self == .signInRequest || self == .providerState }

    /// The JSON members a token of the first format (one key for every kind, no version) may carry,
    /// for the kinds still accepted in that format; nil for the kinds that are not. A token of that
    /// format is accepted as this kind only if its members are exactly of this kind's shape, which no
    /// other kind's token ever had.
    var legacyMembers: (required: Set<String>, optional: Set<String>)? {
        switch self {
        case .zoneSync: (["z", "i", "v"], ["u", "b"])
        case .databaseSync: (["d", "z"], [])
        case .webAuth, .continuationMarker, .notificationSync, .assetUpload, .assetDownload, .signInRequest, .providerState: nil
        }
    }
}

/// A value carried to the client and back, authenticated with a key derived from the server's
/// secret key for the token's kind. Clients treat it as opaque.
///
/// Format 3, for the tokens that travel in request and response bodies (sync tokens, continuation
/// markers): standard padded base64 of the bytes `0x03 ‖ json ‖ mac`, where the MAC is
/// HMAC-SHA256 with the kind's key over `0x03 ‖ json` — the shape of Apple's own markers, which
/// some clients base64-decode to check before they page on.
///
/// Format 2, for web auth tokens (which travel in URLs, where `+ / =` would need escaping):
/// `2.base64url(json).base64url(mac)`, the MAC over `2.base64url(json)`. Sync tokens and
/// continuation markers of format 2 are still read, for this release only, as are sync tokens of the
/// first format (`base64url(json).base64url(mac)` with the secret key itself for every kind).
public enum SignedToken {
    /// The text format version of web auth tokens.
    static let textVersion = "2"
    /// The first byte of a format 3 token.
    static let binaryVersion: UInt8 = 3
    /// Bytes of an HMAC-SHA256.
    static let macBytes = 32

    /// Signs a value as a token of `kind`.
    public static func sign<T: Encodable>(_ value: T, kind: TokenKind, key: SecretKey) -> String {
        let json = EventCoding.encode(value)
        guard kind.travelsInURL else {
            var bytes = Data([binaryVersion])
            bytes.append(json)
            let mac = HMAC<SHA256>.authenticationCode(for: bytes, using: key.tokenKey(kind))
            bytes.append(contentsOf: mac)
            return bytes.base64EncodedString()
        }
        let signed = textVersion + "." + Base64URL.encode(json)
        let mac = HMAC<SHA256>.authenticationCode(for: Data(signed.utf8), using: key.tokenKey(kind))
        return signed + "." + Base64URL.encode(Data(mac))
    }

    /// Verifies and decodes a token of `kind`; nil when it was not made by this server for that kind,
    /// or does not decode.
    public static func open<T: Decodable>(_ text: String, as type: T.Type, kind: TokenKind, key: SecretKey) -> T? {
        if !text.contains("."), !kind.travelsInURL {
            guard let bytes = Data(base64Encoded: text), bytes.count > 1 + macBytes, bytes.first == binaryVersion else { return nil }
            let signed = bytes.prefix(bytes.count - macBytes)
            guard HMAC<SHA256>.isValidAuthenticationCode(bytes.suffix(macBytes), authenticating: signed, using: key.tokenKey(kind)) else { return nil }
            return decode(T.self, from: signed.dropFirst())
        }
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        if parts.count == 3, parts[0] == textVersion {
            let signed = Data((parts[0] + "." + parts[1]).utf8)
            guard let mac = Base64URL.decode(String(parts[2])),
                  HMAC<SHA256>.isValidAuthenticationCode(mac, authenticating: signed, using: key.tokenKey(kind)),
                  let body = Base64URL.decode(String(parts[1]))
            else { return nil }
            return decode(T.self, from: body)
        }
        if parts.count == 2, let members = kind.legacyMembers {
            guard let body = Base64URL.decode(String(parts[0])), let mac = Base64URL.decode(String(parts[1])),
                  HMAC<SHA256>.isValidAuthenticationCode(mac, authenticating: body, using: key.symmetricKey),
                  let object = (try? JSONSerialization.jsonObject(with: body)) as? [String: Any]
            else { return nil }
            let names = Set(object.keys)
            guard members.required.isSubset(of: names), names.isSubset(of: members.required.union(members.optional)) else { return nil }
            return try? EventCoding.decoder.decode(T.self, from: body)
        }
        return nil
    }

    /// A token's verified JSON as `T`: read directly when `T` reads itself (`JSONDirectReadable`),
    /// through `JSONDecoder` otherwise or when the direct reader declines.
    static func decode<T: Decodable>(_ type: T.Type, from body: Data) -> T? {
        if let direct = T.self as? any JSONDirectReadable.Type, let json = try? JSONParser.parse(Array(body)),
           let value = direct.init(json: json) as? T {
            return value
        }
        return try? EventCoding.decoder.decode(T.self, from: body)
    }
}

/// A value read from JSON directly (`JSONParser`'s tree), not through `JSONDecoder`: what is read on
/// every request of a kind (a zone sync token on every page). Reads at least what its `Decodable`
/// reads, and declines (nil) anything it does not, which `JSONDecoder` then reads as before.
public protocol JSONDirectReadable {
    init?(json: JSONValue)
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
    /// The zone's tombstone horizon when the token was issued (nil in tokens issued before it was
    /// carried: 0). A token below the horizon continues only while the horizon has not moved
    /// since: the page that issued it was read after those tombstones were gone, so the client
    /// cannot hold a record whose deletion they recorded.
    public var horizon: Int64?

    enum CodingKeys: String, CodingKey {
        case zoneKey = "z", incarnation = "i", version = "v", reverseUpTo = "u", reverseBelow = "b", horizon = "h"
    }

    /// Creates a token value.
    public init(zoneKey: String, incarnation: UUID, version: Int64, reverseUpTo: Int64? = nil, reverseBelow: Int64? = nil, horizon: Int64? = nil) {
        self.zoneKey = zoneKey
        self.incarnation = incarnation
        self.version = version
        self.reverseUpTo = reverseUpTo
        self.reverseBelow = reverseBelow
        self.horizon = horizon
    }
}

extension ZoneSyncToken: EncoderFormWritable, JSONDirectReadable {
    /// The token in `JSONEncoder`'s bytes (keys sorted: `b`, `h`, `i`, `u`, `v`, `z`), written
    /// directly: every sync page signs one, and `JSONEncoder` took about 2 % of the API's CPU over a
    /// full sync (docs/benchmarks.md). `EncoderFormTests` holds it to `JSONEncoder`'s bytes.
    public func writeEncoderForm(into bytes: inout [UInt8]) -> Bool {
        var first = true
        if let reverseBelow {
            EncoderForm.member("b", &bytes, &first)
            EncoderForm.integer(reverseBelow, &bytes)
        }
        if let horizon {
            EncoderForm.member("h", &bytes, &first)
            EncoderForm.integer(horizon, &bytes)
        }
        EncoderForm.member("i", &bytes, &first)
        EncoderForm.string(incarnation.uuidString, &bytes)
        if let reverseUpTo {
            EncoderForm.member("u", &bytes, &first)
            EncoderForm.integer(reverseUpTo, &bytes)
        }
        EncoderForm.member("v", &bytes, &first)
        EncoderForm.integer(version, &bytes)
        EncoderForm.member("z", &bytes, &first)
        EncoderForm.string(zoneKey, &bytes)
        EncoderForm.close(&bytes, first)
        return true
    }

    /// The token from its JSON, as its `Decodable` reads it (`z`, `i`, `v` required; `u`, `b`, `h`
    /// absent or null when not set); nil for anything else.
    public init?(json: JSONValue) {
        guard case .object(let members) = json, let zoneKey = JSONValue.text(of: members["z"]),
              let incarnation = JSONValue.text(of: members["i"]).flatMap(UUID.init(uuidString:)), let version = JSONValue.integer(of: members["v"]),
              let reverseUpTo = JSONValue.optionalInt(members["u"]), let reverseBelow = JSONValue.optionalInt(members["b"]),
              let horizon = JSONValue.optionalInt(members["h"])
        else { return nil }
        self.init(zoneKey: zoneKey, incarnation: incarnation, version: version, reverseUpTo: reverseUpTo, reverseBelow: reverseBelow, horizon: horizon)
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

/// A position in a user's notification log, for `notifications/changes`; bound to the user.
public struct NotificationSyncToken: Sendable, Hashable, Codable {
    /// The user the position belongs to.
    public var u: String
    /// The last position handed out.
    public var p: Int64

    /// Creates a token value.
    public init(subscriber: String, position: Int64) {
        u = subscriber
        p = position
    }
}
