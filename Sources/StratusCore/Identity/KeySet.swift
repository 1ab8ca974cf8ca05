import _CryptoExtras
import Crypto
import Foundation

/// A public key an issuer signs ID tokens with, from its key set (JWKS).
public struct VerificationKey: Sendable {
    /// The key itself.
    public enum Material: Sendable {
        /// An RSA key (RS256), 2,048 to 8,192 bits.
        case rsa(_RSA.Signing.PublicKey)
        /// A P-256 key (ES256), as its raw representation (x and y), checked to be a point of the curve.
        case p256([UInt8])
    }

    /// `kid`.
    public var keyID: String
    /// The key.
    public var material: Material
    /// `alg`, when the set names one (an unknown one excludes the key from the set).
    public var algorithm: IDToken.Algorithm?
}

/// An issuer's key set (JWKS, RFC 7517) as its URL serves it: the signing keys Stratus can use,
/// by key id. Keys of other types, curves or uses are left out; a set too large, or with no usable
/// key, is refused.
public struct KeySet: Sendable {
    /// The largest key set document read, in bytes.
    public static let maxBytes = 64 * 1024
    /// The most keys a set may list.
    public static let maxKeys = 32

    /// The usable keys by key id.
    public var keys: [String: VerificationKey]

    /// Creates a set of keys.
    public init(keys: [VerificationKey]) {
        var byID: [String: VerificationKey] = [:]
        for key in keys { byID[key.keyID] = key }
        self.keys = byID
    }

    /// Reads a key set document. The error (a plain message for the operator's log and for the
    /// reason of a refused sign-in) says what is wrong.
    public static func parse(_ bytes: [UInt8]) throws(StratusError) -> KeySet {
        guard bytes.count <= maxBytes else { throw problem("is larger than \(maxBytes) bytes") }
        guard let value = try? JSONParser.parse(bytes), case .array(let entries)? = value["keys"] else {
            throw problem("is not a JSON object with a 'keys' list")
        }
        guard entries.count <= maxKeys else { throw problem("lists \(entries.count) keys; at most \(maxKeys) are read") }
        var keys: [VerificationKey] = []
        for entry in entries {
            if let key = usableKey(entry) { keys.append(key) }
        }
        guard !keys.isEmpty else { throw problem("has no RS256 or ES256 signing key with a key id") }
        return KeySet(keys: keys)
    }

    /// One entry's key, when it is a signing key of a supported type with a key id; nil otherwise.
    public static func usableKey(_ entry: JSONValue) -> VerificationKey? {
        guard case .string(let kid)? = entry["kid"], !kid.isEmpty, kid.utf8.count <= IDToken.maxClaimBytes,
              case .string(let kty)? = entry["kty"]
        else { return nil }
        if let use = entry["use"], use != .string("sig") { return nil }
        var algorithm: IDToken.Algorithm?
        if let alg = entry["alg"] {
            guard let name = alg.stringValue, let known = IDToken.Algorithm(rawValue: name) else { return nil }
            algorithm = known
        }
        func bytes(_ name: String) -> [UInt8]? { entry[name]?.stringValue.flatMap { Base64URL.strictDecode($0, maxBytes: 2048) } }
        switch kty {
        case "RSA":
            guard algorithm == nil || algorithm == .rs256, let n = bytes("n"), let e = bytes("e"), e.count <= 8,
                  let key = try? _RSA.Signing.PublicKey(n: n, e: e), (2048...8192).contains(key.keySizeInBits)
            else { return nil }
            return VerificationKey(keyID: kid, material: .rsa(key), algorithm: algorithm)
        case "EC":
            guard algorithm == nil || algorithm == .es256, entry["crv"] == .string("P-256"), let x = bytes("x"), let y = bytes("y"),
                  x.count == 32, y.count == 32, (try? P256.Signing.PublicKey(rawRepresentation: x + y)) != nil
            else { return nil }
            return VerificationKey(keyID: kid, material: .p256(x + y), algorithm: algorithm)
        default:
            return nil
        }
    }

    static func problem(_ what: String) -> StratusError {
        StratusError(.authenticationFailed, "the issuer's key set \(what)")
    }
}

/// When an issuer's key set is fetched again. A set is kept for `maxAge`; a token whose key id the
/// kept set does not hold may make it be fetched again at once (the issuer rotated its keys), but
/// at most once per `refetchInterval`, so tokens with made-up key ids cannot make Stratus hammer
/// the issuer: a key id still unknown after that fetch is refused.
public struct KeySetRefresh: Sendable, Equatable {
    /// How long a fetched set is used.
    public var maxAge: Int64
    /// The least time between two fetches caused by unknown key ids.
    public var refetchInterval: Int64

    /// The defaults: a set is kept an hour; an unknown key id fetches again at most once a minute.
    public init(maxAge: Int64 = 3600, refetchInterval: Int64 = 60) {
        self.maxAge = maxAge
        self.refetchInterval = refetchInterval
    }

    /// What a cache holds for one key set URL.
    public struct Kept: Sendable, Equatable {
        /// When the set was fetched (seconds).
        public var fetchedAt: Int64
        /// The key ids it holds.
        public var keyIDs: Set<String>
        /// When an unknown key id last caused a fetch, if ever.
        public var lastRefetchAt: Int64?

        /// Creates a cache entry.
        public init(fetchedAt: Int64, keyIDs: Set<String>, lastRefetchAt: Int64? = nil) {
            self.fetchedAt = fetchedAt
            self.keyIDs = keyIDs
            self.lastRefetchAt = lastRefetchAt
        }
    }

    /// What to do for a token signed with `keyID`.
    public enum Decision: Sendable, Equatable {
        /// Use the kept set.
        case use
        /// Fetch the set (none kept, or it is too old).
        case fetch
        /// Fetch the set again, because the kept one lacks the key id (record the time).
        case refetch
        /// Refuse: the key id is unknown and the set was fetched for an unknown key id too recently.
        case unknownKey
    }

    /// The decision for `keyID` at `now`, given what is kept.
    public func decide(keyID: String, kept: Kept?, now: Int64) -> Decision {
        guard let kept, now - kept.fetchedAt < maxAge, now >= kept.fetchedAt else { return .fetch }
        if kept.keyIDs.contains(keyID) { return .use }
        if let last = kept.lastRefetchAt, now - last < refetchInterval, now >= last { return .unknownKey }
        return .refetch
    }
}
