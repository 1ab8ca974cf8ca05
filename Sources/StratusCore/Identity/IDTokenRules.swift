import Crypto
import Foundation

/// An issuer a container trusts for ID-token sign-in: its `iss`, where its key set is, and the
/// client ids (audiences) of the container's apps at that issuer.
public struct TrustedIssuer: Sendable, Equatable, CustomStringConvertible {
    /// The longest JWKS URL, in bytes.
    public static let maxURLBytes = 2048
    /// The longest client secret, in bytes.
    public static let maxClientSecretBytes = 1024
    /// The most audiences one issuer may list.
    public static let maxAudiences = 16

    /// `iss` exactly as the issuer writes it, e.g. `https://appleid.apple.com`.
    public var issuer: String
    /// The issuer's key set URL, e.g. `https://appleid.apple.com/auth/keys`.
    public var keySetURL: String
    /// The client ids a token must be issued to (one of them), e.g. an app's bundle id.
    public var audiences: [String]
    /// The client id the hosted sign-in page signs in with at this issuer (one of `audiences`, e.g.
    /// a Sign in with Apple Services ID); nil: the page names the issuer but offers no button.
    public var webClientID: String?
    /// The issuer's authorization endpoint; nil: the one its discovery document names.
    public var authorizationURL: String?
    /// The redirect URL registered at the issuer; nil: the callback under the server's public URL.
    public var redirectURL: String?
    /// The issuer's token endpoint: set, the hosted page signs in with the authorization-code flow
    /// and PKCE (the code exchanged here for the ID token); nil: the ID token comes back with the
    /// browser (`response_type=id_token`).
    public var tokenURL: String?
    /// The web client's secret, sent to the token endpoint (HTTP Basic) when set; a secret: never
    /// logged, described or shown. As given (by the CLI or the console), or read from a row stored
    /// before secrets were sealed; the database keeps it only as `sealedClientSecret`.
    public var clientSecret: String?
    /// The client secret as the database keeps it, sealed under the server's key
    /// (`SealedSecret`); opened only to send it to the token endpoint.
    public var sealedClientSecret: SealedSecret?

    /// Creates an issuer.
    public init(
        issuer: String, keySetURL: String, audiences: [String], webClientID: String? = nil, authorizationURL: String? = nil, redirectURL: String? = nil,
        tokenURL: String? = nil, clientSecret: String? = nil
    ) {
        self.issuer = issuer
        self.keySetURL = keySetURL
        self.audiences = audiences
        self.webClientID = webClientID
        self.authorizationURL = authorizationURL
        self.redirectURL = redirectURL
        self.tokenURL = tokenURL
        self.clientSecret = clientSecret
    }

    /// Whether the hosted page signs in through the authorization-code flow with PKCE.
    public var usesCodeFlow: Bool { tokenURL != nil }

    /// Whether the web client has a secret (given, or stored sealed).
    public var hasClientSecret: Bool { clientSecret != nil || sealedClientSecret != nil }

    /// The client secret sealed for storage as this container's (nil: none).
    public func sealClientSecret(container: String, key: SecretKey) -> SealedSecret? {
        clientSecret.map { SealedSecret.seal($0, purpose: .clientSecret, binding: [container, issuer], key: key) }
    }

    /// The client secret to send to the token endpoint: the stored one opened with the server's
    /// key (AUTHENTICATION_FAILED, naming no secret, when it does not open), or one not sealed yet;
    /// nil for a public client.
    public func openClientSecret(container: String, key: SecretKey) throws(StratusError) -> String? {
        if let sealedClientSecret { return try sealedClientSecret.open(purpose: .clientSecret, binding: [container, issuer], key: key) }
        return clientSecret
    }

    public var description: String {
        "TrustedIssuer(issuer: \(issuer), keySetURL: \(keySetURL), audiences: \(audiences), webClientID: \(webClientID ?? "none"), "
            + "tokenURL: \(tokenURL ?? "none"), clientSecret: \(hasClientSecret ? "<redacted>" : "none"))"
    }

    /// The issuer with its text checked: an issuer of 1 to 2,048 bytes, an absolute http(s) URL
    /// (which addresses it may reach is decided when it is fetched), 1 to 16 audiences of 1 to 255
    /// bytes; no control characters anywhere.
    public func validated() throws(StratusError) -> TrustedIssuer {
        func clean(_ text: String, _ place: String, max: Int) throws(StratusError) -> String {
            let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
            guard !trimmed.isEmpty, trimmed.utf8.count <= max, !trimmed.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
                throw StratusError(.badRequest, "\(place) must be 1 to \(max) bytes without control characters")
            }
            return trimmed
        }
        func absoluteURL(_ text: String, _ place: String) throws(StratusError) -> String {
            let url = try clean(text, place, max: Self.maxURLBytes)
            guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(), scheme == "https" || scheme == "http",
                  let host = components.host, !host.isEmpty, components.user == nil, components.password == nil, components.fragment == nil
            else {
                throw StratusError(.badRequest, "\(place) must be an absolute https URL without credentials or fragment")
            }
            return url
        }
        let issuer = try clean(issuer, "the issuer", max: IDToken.maxIssuerBytes)
        let url = try absoluteURL(keySetURL, "the JWKS URL")
        guard !audiences.isEmpty, audiences.count <= Self.maxAudiences else {
            throw StratusError(.badRequest, "an issuer needs 1 to \(Self.maxAudiences) audiences (client ids)")
        }
        var cleaned: [String] = []
        for audience in audiences { cleaned.append(try clean(audience, "an audience", max: IDToken.maxClaimBytes)) }
        var validated = TrustedIssuer(issuer: issuer, keySetURL: url, audiences: cleaned)
        if let webClientID, !webClientID.isEmpty {
            let client = try clean(webClientID, "the web client id", max: IDToken.maxClaimBytes)
            guard cleaned.contains(client) else {
                throw StratusError(.badRequest, "the web client id '\(ClientText.excerpt(client))' must be one of the issuer's audiences")
            }
            validated.webClientID = client
        }
        if let authorizationURL, !authorizationURL.isEmpty { validated.authorizationURL = try absoluteURL(authorizationURL, "the authorization URL") }
        if let redirectURL, !redirectURL.isEmpty { validated.redirectURL = try absoluteURL(redirectURL, "the redirect URL") }
        if let tokenURL, !tokenURL.isEmpty { validated.tokenURL = try absoluteURL(tokenURL, "the token URL") }
        if let clientSecret, !clientSecret.isEmpty {
            // Never quoted: it is a secret.
            guard clientSecret.utf8.count <= Self.maxClientSecretBytes,
                  !clientSecret.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
            else {
                throw StratusError(.badRequest, "the client secret must be 1 to \(Self.maxClientSecretBytes) bytes without control characters")
            }
            guard validated.tokenURL != nil else { throw StratusError(.badRequest, "a client secret needs a token URL: it is sent only to the token endpoint") }
            validated.clientSecret = clientSecret
        }
        guard validated.webClientID != nil || (validated.authorizationURL == nil && validated.redirectURL == nil && validated.tokenURL == nil) else {
            throw StratusError(.badRequest, "an authorization, redirect or token URL needs a web client id: the page signs in with that client id")
        }
        return validated
    }
}

/// The rules an ID token's claims must meet, once its signature is checked: which issuer, which
/// audience, which times, which nonce.
public enum IDTokenRules {
    /// Seconds of clock difference allowed between Stratus and the issuer.
    public static let leeway: Int64 = 60
    /// The longest a token may have been issued before it is used (Apple's and other providers'
    /// tokens are meant to be exchanged at once; their lifetimes are minutes).
    public static let maxAge: Int64 = 24 * 3600
    /// The longest nonce a client may send.
    public static let maxNonceBytes = 255

    /// What a sign-in gets from a good token: the account and what the claims say about its user.
    public struct Account: Sendable, Equatable {
        /// `iss`.
        public var issuer: String
        /// `sub`.
        public var subject: String
        /// The email address, when the issuer says it is verified (Apple's private relay
        /// addresses included).
        public var email: String?
        /// Whether the address is a private relay address.
        public var isPrivateEmail: Bool
        /// The name, when the token has one.
        public var nameComponents: NameComponents
        /// The nonce claim, which may be used only once for this issuer.
        public var nonce: String
        /// When the token expires: the nonce must be remembered at least until then.
        public var expiresAt: Int64
    }

    /// Checks the claims against the issuer the container trusts and the nonce the client sent.
    ///
    /// The nonce claim must be the client's nonce itself, or its SHA-256 in lowercase hex (Sign in
    /// with Apple's apps send the hash to Apple and keep the nonce); a token without a nonce claim
    /// is refused, as is a client that sends none.
    public static func check(_ claims: IDToken.Claims, trusted: TrustedIssuer, nonce: String?, now: Int64) throws(StratusError) -> Account {
        guard claims.issuer == trusted.issuer else {
            throw IDToken.failed("idToken was issued by '\(ClientText.excerpt(claims.issuer))', not by the trusted issuer '\(ClientText.excerpt(trusted.issuer))'")
        }
        guard claims.audiences.contains(where: { trusted.audiences.contains($0) }) else {
            throw IDToken.failed("idToken was issued to \(claims.audiences.map { "'\(ClientText.excerpt($0))'" }.joined(separator: ", ")), not to a client id this container trusts")
        }
        if let party = claims.authorizedParty, !trusted.audiences.contains(party) {
            throw IDToken.failed("idToken's authorized party '\(ClientText.excerpt(party))' is not a client id this container trusts")
        }
        if claims.audiences.count > 1, claims.authorizedParty == nil {
            throw IDToken.failed("idToken names several audiences but no authorized party (azp)")
        }
        guard claims.expiresAt + leeway > now else { throw IDToken.failed("idToken has expired") }
        if let notBefore = claims.notBefore, notBefore - leeway > now { throw IDToken.failed("idToken is not valid yet (nbf is in the future)") }
        guard claims.issuedAt - leeway <= now else { throw IDToken.failed("idToken was issued in the future (iat)") }
        guard now - claims.issuedAt <= maxAge else { throw IDToken.failed("idToken was issued more than \(maxAge / 3600) hours ago") }
        guard let nonce, !nonce.isEmpty else { throw StratusError(.badRequest, "nonce is required: the nonce the app asked the provider to put in the token") }
        guard nonce.utf8.count <= maxNonceBytes else { throw StratusError(.badRequest, "nonce is longer than \(maxNonceBytes) bytes") }
        guard let claimed = claims.nonce else { throw IDToken.failed("idToken carries no nonce") }
        guard claimed == nonce || claimed == hashedNonce(nonce) else { throw IDToken.failed("idToken's nonce does not match the nonce sent") }
        return Account(
            issuer: claims.issuer, subject: claims.subject, email: claims.emailVerified ? claims.email : nil, isPrivateEmail: claims.isPrivateEmail,
            nameComponents: NameComponents(givenName: claims.givenName, familyName: claims.familyName), nonce: claimed,
            expiresAt: max(claims.expiresAt, now) + leeway)
    }

    /// The SHA-256 of a nonce in lowercase hex, as Sign in with Apple's apps send it to Apple.
    public static func hashedNonce(_ nonce: String) -> String {
        SHA256.hash(data: Data(nonce.utf8)).map { String(format: "%02x", $0) }.joined()
    }

    /// The digest a used nonce is remembered by (the nonce itself is not kept).
    public static func nonceDigest(_ nonce: String) -> [UInt8] {
        Array(SHA256.hash(data: Data(("stratus/nonce/" + nonce).utf8)))
    }
}

/// What an ID-token sign-in, or a request to link an account, does with the account it names.
/// An account is linked to a user only explicitly: by the sign-in that creates the user, or by a
/// signed-in user's request to link it; never because an email address matches.
public enum AccountLinking {
    /// The outcome.
    public enum Decision: Sendable, Equatable {
        /// Sign in as the user the account is linked to.
        case signIn(userRecordName: String)
        /// Create a user and link the account to it.
        case createUser
        /// Link the account to the signed-in user.
        case link(userRecordName: String)
        /// The account is already linked to the signed-in user: nothing to do.
        case alreadyLinked(userRecordName: String)
    }

    /// Decides for an account linked to `linkedUser` (nil: to nobody); `caller` is the signed-in
    /// user asking to link it, nil for a sign-in.
    public static func decide(linkedUser: String?, caller: String?) throws(StratusError) -> Decision {
        switch (linkedUser, caller) {
        case (let linked?, nil): return .signIn(userRecordName: linked)
        case (nil, nil): return .createUser
        case (nil, let caller?): return .link(userRecordName: caller)
        case (let linked?, let caller?) where linked == caller: return .alreadyLinked(userRecordName: caller)
        case (_?, _?): throw StratusError(.exists, "this account is already linked to another user of this container")
        }
    }

    /// The email address a user created from an account keeps: the account's, unless another user
    /// of the container has it (it is then left out, not taken over).
    public static func emailForNewUser(_ account: IDTokenRules.Account, takenByAnother: Bool) -> String? {
        takenByAnother ? nil : account.email
    }
}

extension IDTokenRules.Account {
    /// The account with the name the app was told filled in where the token has none (Sign in with
    /// Apple tells the name to the app, at the first sign-in only, and never puts it in the token).
    public func naming(givenName: String?, familyName: String?) throws(StratusError) -> IDTokenRules.Account {
        var account = self
        if account.nameComponents.givenName == nil, let givenName, !givenName.isEmpty {
            account.nameComponents.givenName = try UserIdentityText.name(givenName, "givenName")
        }
        if account.nameComponents.familyName == nil, let familyName, !familyName.isEmpty {
            account.nameComponents.familyName = try UserIdentityText.name(familyName, "familyName")
        }
        return account
    }
}
