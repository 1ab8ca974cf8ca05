import Crypto
import Foundation

/// A user's web auth token (`ckWebAuthToken`): the user's record name in a container, an expiry,
/// and, for a user of the container's directory, the user's credential epoch when it was issued;
/// signed as a `TokenKind.webAuth` token.
///
/// A password change raises the user's credential epoch, so every token issued before it stops
/// working. A token for a user outside the directory (minted by `stratus user token`) carries no
/// epoch and is refused once the directory holds that user.
public struct WebAuthToken: Sendable, Hashable, Codable {
    /// The container-scoped user record name (`_` + opaque id).
    public var userRecordName: String
    /// The container the token is valid for.
    public var container: String
    /// Expiry in seconds since 1970.
    public var expiresAt: Int64
    /// The user's credential epoch in the directory when the token was issued; nil for a user
    /// outside the directory.
    public var credentialEpoch: Int64?
    /// The session the token belongs to (`Session`); nil for a token minted without signing in
    /// (`stratus user token`) or before sessions existed.
    public var sessionID: String?

    enum CodingKeys: String, CodingKey {
        case userRecordName = "u"
        case container = "c"
        case expiresAt = "e"
        case credentialEpoch = "p"
        case sessionID = "s"
    }

    /// Creates a token value.
    public init(userRecordName: String, container: String, expiresAt: Int64, credentialEpoch: Int64? = nil, sessionID: String? = nil) {
        self.userRecordName = userRecordName
        self.container = container
        self.expiresAt = expiresAt
        self.credentialEpoch = credentialEpoch
        self.sessionID = sessionID
    }

    /// Signs the token with the secret key.
    public func signed(with key: SecretKey) -> String {
        SignedToken.sign(self, kind: .webAuth, key: key)
    }

    /// Reads a token's text form, checking only its signature; nil when this server did not issue it
    /// as a web auth token. `check` decides whether it is still good.
    public static func open(_ text: String, key: SecretKey) -> WebAuthToken? {
        SignedToken.open(text, as: WebAuthToken.self, kind: .webAuth, key: key)
    }

    /// Whether an opened token is good now: its container, its expiry, its credential epoch
    /// against the user's current one in the directory (`directoryEpoch`, nil when the directory has
    /// no such user in the container), and for a token of a session, the session (`sessionActive`:
    /// true while it is signed in, false once signed out, nil when there is no such session of the
    /// user).
    public func check(container: String, now: Int64, directoryEpoch: Int64?, sessionActive: Bool? = nil) throws(StratusError) {
        guard self.container == container else {
            throw StratusError(.authenticationFailed, "ckWebAuthToken belongs to another container")
        }
        guard expiresAt > now else {
            throw StratusError(.authenticationFailed, "ckWebAuthToken has expired")
        }
        guard credentialEpoch == directoryEpoch else {
            throw StratusError(
                .authenticationFailed, "ckWebAuthToken is no longer valid: the user's password changed, or the user signed out everywhere, since it was issued; sign in again")
        }
        if sessionID != nil, sessionActive != true {
            throw StratusError(.authenticationFailed, "ckWebAuthToken is no longer valid: its session was signed out; sign in again")
        }
    }

    /// Verifies a token's text form: signature, container, expiry and credential epoch.
    public static func verify(_ text: String, key: SecretKey, container: String, now: Int64, directoryEpoch: Int64?) throws(StratusError) -> WebAuthToken {
        guard let token = open(text, key: key) else {
            throw StratusError(.authenticationFailed, "ckWebAuthToken is not valid")
        }
        try token.check(container: container, now: now, directoryEpoch: directoryEpoch)
        return token
    }
}

/// Unpadded base64url, as used in tokens that travel in query strings.
public enum Base64URL {
    /// Encodes bytes.
    public static func encode(_ data: Data) -> String {
        data.base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// Decodes text; nil if it is not base64url.
    public static func decode(_ text: String) -> Data? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64)
    }
}

/// API tokens (`ckAPIToken`) are random and stored only as their SHA-256 digest.
public enum APIToken {
    /// A new random token: 32 bytes as 64 hex digits.
    public static func generate() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
    }

    /// The digest stored in the database and compared on each request.
    public static func digest(_ token: String) -> [UInt8] {
        Array(SHA256.hash(data: Data(token.utf8)))
    }
}

/// The server's secret key for signing tokens. Never logged: its description hides the bytes.
/// Tokens are signed with keys derived from it, one per `TokenKind` (HKDF-SHA256, info
/// `stratus/v2/token/<kind>`).
public struct SecretKey: Sendable, CustomStringConvertible {
    let bytes: [UInt8]
    /// The derived key of each kind.
    private let derived: [TokenKind: [UInt8]]

    /// Wraps key bytes (at least 32).
    public init(bytes: [UInt8]) throws(StratusError) {
        guard bytes.count >= 32 else { throw StratusError(.internalError, "the secret key must be at least 32 bytes") }
        self.bytes = bytes
        let secret = SymmetricKey(data: bytes)
        var derived: [TokenKind: [UInt8]] = [:]
        for kind in TokenKind.allCases {
            let key = HKDF<SHA256>.deriveKey(inputKeyMaterial: secret, info: Data("stratus/v2/token/\(kind.rawValue)".utf8), outputByteCount: 32)
            derived[kind] = key.withUnsafeBytes { Array($0) }
        }
        self.derived = derived
    }

    /// Reads a key from its hex or base64 text form.
    public init(text: String) throws(StratusError) {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        if trimmed.count >= 64, trimmed.count % 2 == 0, trimmed.allSatisfy(\.isHexDigit) {
            var bytes: [UInt8] = []
            var index = trimmed.startIndex
            while index < trimmed.endIndex {
                let next = trimmed.index(index, offsetBy: 2)
                // `isHexDigit` also admits full-width digits, which this conversion refuses.
                guard let byte = UInt8(trimmed[index..<next], radix: 16) else {
                    throw StratusError(.internalError, "the secret key must be hex or base64")
                }
                bytes.append(byte)
                index = next
            }
            try self.init(bytes: bytes)
        } else if let data = Data(base64Encoded: trimmed) {
            try self.init(bytes: Array(data))
        } else {
            throw StratusError(.internalError, "the secret key must be hex or base64")
        }
    }

    /// A new random key, for a locally generated development secret.
    public static func generate() -> SecretKey {
        var generator = SystemRandomNumberGenerator()
        // 32 random bytes always satisfy the length check.
        return try! SecretKey(bytes: (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }

    /// The key as hex, for writing it to a local file.
    public var hex: String { bytes.map { String(format: "%02x", $0) }.joined() }

    /// The secret key itself: only the first token format was signed with it.
    var symmetricKey: SymmetricKey { SymmetricKey(data: bytes) }

    /// The key tokens of `kind` are signed with.
    func tokenKey(_ kind: TokenKind) -> SymmetricKey {
        // Every kind is derived in init.
        SymmetricKey(data: derived[kind]!)
    }

    public var description: String { "SecretKey(redacted)" }
}

extension WebAuthToken: JSONDirectReadable {
    /// The token from its JSON, as its `Decodable` reads it (`u`, `c`, `e` required; `p`, `s`
    /// absent or null when not set); nil for anything else. Read the first time a process opens a
    /// token's text (`OpenedWebAuthTokens` answers it from then on).
    public init?(json: JSONValue) {
        guard case .object(let members) = json, let user = JSONValue.text(of: members["u"]), let container = JSONValue.text(of: members["c"]),
              let expiresAt = JSONValue.integer(of: members["e"]), let epoch = JSONValue.optionalInt(members["p"]),
              let session = JSONValue.optionalString(members["s"])
        else { return nil }
        self.init(userRecordName: user, container: container, expiresAt: expiresAt, credentialEpoch: epoch, sessionID: session)
    }
}
