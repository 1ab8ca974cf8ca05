import _CryptoExtras
import Crypto
import Foundation

/// An OpenID Connect ID token (a compact JWS, e.g. Sign in with Apple's `identityToken`) as a client
/// posts it: read and bounded here, its signature checked against a key of the issuer's key set
/// (`verify`), its claims judged by `IDTokenRules`. Nothing here trusts the token before both.
public struct IDToken: Sendable, Equatable {
    /// The longest token read, in bytes (providers' tokens are about 1 KB).
    public static let maxBytes = 8 * 1024
    /// The longest claim kept as text (subject, nonce, names), in bytes.
    public static let maxClaimBytes = 255
    /// The longest issuer, in bytes.
    public static let maxIssuerBytes = 2048
    /// The most audiences one token may name.
    public static let maxAudiences = 16

    /// The signing algorithms accepted; anything else (`none`, HMAC, …) is refused.
    public enum Algorithm: String, Sendable, CaseIterable {
        /// RSASSA-PKCS1-v1_5 with SHA-256.
        case rs256 = "RS256"
        /// ECDSA on P-256 with SHA-256.
        case es256 = "ES256"
    }

    /// The header's algorithm.
    public var algorithm: Algorithm
    /// The header's key id (`kid`): which key of the issuer's set signed the token.
    public var keyID: String
    /// The claims.
    public var claims: Claims
    /// The bytes signed: the header and payload segments with their dot.
    public var signingInput: [UInt8]
    /// The signature's bytes.
    public var signature: [UInt8]

    /// The claims Stratus reads; the others are ignored.
    public struct Claims: Sendable, Equatable {
        /// `iss`.
        public var issuer: String
        /// `sub`: the user at the issuer.
        public var subject: String
        /// `aud`: one or more client ids.
        public var audiences: [String]
        /// `azp`, when present.
        public var authorizedParty: String?
        /// `exp`, seconds since 1970.
        public var expiresAt: Int64
        /// `nbf`, when present.
        public var notBefore: Int64?
        /// `iat`.
        public var issuedAt: Int64
        /// `nonce`, when present.
        public var nonce: String?
        /// `email`, when present and an email address.
        public var email: String?
        /// `email_verified` (a boolean, or Apple's "true"/"false").
        public var emailVerified: Bool
        /// Apple's `is_private_email`: the address is a private relay address.
        public var isPrivateEmail: Bool
        /// `given_name`, when present.
        public var givenName: String?
        /// `family_name`, when present.
        public var familyName: String?

        /// Creates claims (tests build them directly).
        public init(
            issuer: String, subject: String, audiences: [String], authorizedParty: String? = nil, expiresAt: Int64, notBefore: Int64? = nil,
            issuedAt: Int64, nonce: String? = nil, email: String? = nil, emailVerified: Bool = false, isPrivateEmail: Bool = false,
            givenName: String? = nil, familyName: String? = nil
        ) {
            self.issuer = issuer
            self.subject = subject
            self.audiences = audiences
            self.authorizedParty = authorizedParty
            self.expiresAt = expiresAt
            self.notBefore = notBefore
            self.issuedAt = issuedAt
            self.nonce = nonce
            self.email = email
            self.emailVerified = emailVerified
            self.isPrivateEmail = isPrivateEmail
            self.givenName = givenName
            self.familyName = familyName
        }
    }

    /// Reads a token's compact form: three base64url segments, a header naming an accepted
    /// algorithm and a key id, and claims of the right types and lengths. AUTHENTICATION_FAILED
    /// says what is wrong; nothing is checked against keys or time yet.
    public static func parse(_ text: String) throws(StratusError) -> IDToken {
        guard !text.isEmpty else { throw failed("idToken is empty") }
        guard text.utf8.count <= maxBytes else { throw failed("idToken is longer than \(maxBytes) bytes") }
        let segments = text.split(separator: ".", omittingEmptySubsequences: false)
        guard segments.count == 3 else { throw failed("idToken is not a signed JWT (three dot-separated parts)") }
        guard let headerBytes = Base64URL.strictDecode(segments[0]), let payloadBytes = Base64URL.strictDecode(segments[1]),
              let signature = Base64URL.strictDecode(segments[2])
        else { throw failed("idToken has a part that is not base64url") }
        let header = try object(headerBytes, "header")
        guard case .string(let alg)? = header["alg"] else { throw failed("idToken's header names no algorithm") }
        guard let algorithm = Algorithm(rawValue: alg) else {
            throw failed("idToken is signed with '\(ClientText.excerpt(alg))'; only \(Algorithm.allCases.map(\.rawValue).joined(separator: " and ")) are accepted")
        }
        if let crit = header["crit"], crit != .null { throw failed("idToken's header has critical extensions, which are not supported") }
        guard case .string(let kid)? = header["kid"], !kid.isEmpty, kid.utf8.count <= maxClaimBytes else {
            throw failed("idToken's header names no key id (kid) of at most \(maxClaimBytes) bytes")
        }
        let claims = try Claims(try object(payloadBytes, "payload"))
        return IDToken(
            algorithm: algorithm, keyID: kid, claims: claims, signingInput: Array((segments[0] + "." + segments[1]).utf8), signature: signature)
    }

    /// Whether `key` signed the token; the key must be of the algorithm's type (an RSA key never
    /// checks an ES256 token) and, when its set names an algorithm, that one.
    public func verify(with key: VerificationKey) throws(StratusError) {
        let digest = SHA256.hash(data: signingInput)
        let valid: Bool
        switch (algorithm, key.material) {
        case (.rs256, .rsa(let publicKey)):
            valid = publicKey.isValidSignature(_RSA.Signing.RSASignature(rawRepresentation: signature), for: digest, padding: .insecurePKCS1v1_5)
        case (.es256, .p256(let point)):
            guard signature.count == 64, let ecdsa = try? P256.Signing.ECDSASignature(rawRepresentation: signature),
                  let publicKey = try? P256.Signing.PublicKey(rawRepresentation: point)
            else {
                throw Self.failed("idToken's signature is not valid")
            }
            valid = publicKey.isValidSignature(ecdsa, for: digest)
        default:
            throw Self.failed("idToken's key '\(ClientText.excerpt(keyID))' is not a key for \(algorithm.rawValue)")
        }
        if let declared = key.algorithm, declared != algorithm {
            throw Self.failed("idToken's key '\(ClientText.excerpt(keyID))' is declared for \(declared.rawValue), not \(algorithm.rawValue)")
        }
        guard valid else { throw Self.failed("idToken's signature is not valid") }
    }

    static func failed(_ reason: String) -> StratusError { StratusError(.authenticationFailed, reason) }

    private static func object(_ bytes: [UInt8], _ part: String) throws(StratusError) -> [String: JSONValue] {
        guard let value = try? JSONParser.parse(bytes), case .object(let members) = value else {
            throw failed("idToken's \(part) is not a JSON object")
        }
        return members
    }
}

extension IDToken.Claims {
    /// Reads the claims from the payload's members, bounded.
    init(_ members: [String: JSONValue]) throws(StratusError) {
        func text(_ name: String, max: Int = IDToken.maxClaimBytes) throws(StratusError) -> String? {
            guard let value = members[name], value != .null else { return nil }
            guard case .string(let text) = value, !text.isEmpty, text.utf8.count <= max, !text.utf8.contains(0) else {
                throw IDToken.failed("idToken's claim '\(name)' must be a string of 1 to \(max) bytes")
            }
            return text
        }
        func required(_ name: String, max: Int = IDToken.maxClaimBytes) throws(StratusError) -> String {
            guard let value = try text(name, max: max) else { throw IDToken.failed("idToken has no '\(name)' claim") }
            return value
        }
        func time(_ name: String) throws(StratusError) -> Int64? {
            switch members[name] {
            case nil, .null?: return nil
            case .int(let value)?: return value
            case .double(let value)? where value.isFinite && abs(value) < 1e15: return Int64(value)
            default: throw IDToken.failed("idToken's claim '\(name)' must be a number of seconds since 1970")
            }
        }
        func flag(_ name: String) throws(StratusError) -> Bool {
            switch members[name] {
            case nil, .null?: return false
            case .bool(let value)?: return value
            case .string("true")?: return true
            case .string("false")?: return false
            default: throw IDToken.failed("idToken's claim '\(name)' must be a boolean")
            }
        }
        let audiences: [String]
        switch members["aud"] {
        case .string(let one)?:
            audiences = [one]
        case .array(let many)? where !many.isEmpty && many.count <= IDToken.maxAudiences:
            var names: [String] = []
            for value in many {
                guard case .string(let name) = value else { throw IDToken.failed("idToken's claim 'aud' must be a string or a list of strings") }
                names.append(name)
            }
            audiences = names
        case nil:
            throw IDToken.failed("idToken has no 'aud' claim")
        default:
            throw IDToken.failed("idToken's claim 'aud' must be a string or a list of 1 to \(IDToken.maxAudiences) strings")
        }
        guard audiences.allSatisfy({ !$0.isEmpty && $0.utf8.count <= IDToken.maxClaimBytes }) else {
            throw IDToken.failed("idToken's audiences must be 1 to \(IDToken.maxClaimBytes) bytes each")
        }
        guard let expiresAt = try time("exp") else { throw IDToken.failed("idToken has no 'exp' claim") }
        guard let issuedAt = try time("iat") else { throw IDToken.failed("idToken has no 'iat' claim") }
        // An address that is not one is dropped, not refused: the token still names its user.
        let email = try text("email", max: UserIdentityText.maxEmailBytes).flatMap { try? UserIdentityText.email($0) }
        self.init(
            issuer: try required("iss", max: IDToken.maxIssuerBytes), subject: try required("sub"), audiences: audiences,
            authorizedParty: try text("azp"), expiresAt: expiresAt, notBefore: try time("nbf"), issuedAt: issuedAt, nonce: try text("nonce"),
            email: email, emailVerified: try flag("email_verified"), isPrivateEmail: try flag("is_private_email"),
            givenName: try text("given_name").flatMap { try? UserIdentityText.name($0, "given_name") },
            familyName: try text("family_name").flatMap { try? UserIdentityText.name($0, "family_name") })
    }
}

extension Base64URL {
    /// Decodes unpadded base64url only (no `+`, `/`, `=` or whitespace), at most `maxBytes` of text.
    public static func strictDecode(_ text: some StringProtocol, maxBytes: Int = IDToken.maxBytes) -> [UInt8]? {
        guard text.utf8.count <= maxBytes, text.utf8.count % 4 != 1,
              text.utf8.allSatisfy({ byte in
                  (65...90).contains(byte) || (97...122).contains(byte) || (48...57).contains(byte) || byte == 45 || byte == 95
              })
        else { return nil }
        return decode(String(text)).map { Array($0) }
    }
}
