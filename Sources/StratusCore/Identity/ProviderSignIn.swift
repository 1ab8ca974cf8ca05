import Crypto
import Foundation

/// The `state` of the hosted sign-in page's authorization request to an issuer (OpenID Connect:
/// `response_type=id_token` with `response_mode=form_post`, or the authorization-code flow with
/// PKCE): it binds the issuer's answer to the sign-in request the page was opened with (its
/// container and the origin the token goes to), and carries the nonce the ID token must hold.
/// Signed as `TokenKind.providerState`; the nonce is used once (the ID-token sign-in remembers
/// it), so an answer replayed with this state is refused.
public struct ProviderSignInState: Sendable, Hashable, Codable {
    public var container: String
    /// `iss` of the issuer the request went to.
    public var issuer: String
    /// The nonce sent to the issuer; the ID token's nonce claim must be it.
    public var nonce: String
    /// The origin of the app's page (the waiting sign-in request's); nil: the page's own.
    public var origin: String?
    /// Seconds since 1970: no later than the waiting sign-in request's expiry.
    public var expiresAt: Int64
    /// true: the request asked for an authorization code (PKCE), which the callback exchanges at
    /// the issuer's token endpoint; nil: it asked for the ID token itself.
    public var codeFlow: Bool?

    /// How long an authorization request may take: ten minutes.
    public static let lifetime: Int64 = 600
    /// The longest `state` read.
    public static let maxBytes = 4096

    enum CodingKeys: String, CodingKey {
        case container = "c"
        case issuer = "i"
        case nonce = "n"
        case origin = "o"
        case expiresAt = "e"
        case codeFlow = "f"
    }

    /// The state of an authorization request started now for a waiting sign-in request: it
    /// expires with the request, or in `lifetime`, whichever comes first.
    public init(request: SignInPageRequest, issuer: String, nonce: String, now: Int64, codeFlow: Bool = false) {
        self.container = request.container
        self.issuer = issuer
        self.nonce = nonce
        self.origin = request.origin
        self.expiresAt = min(request.expiresAt, now + Self.lifetime)
        self.codeFlow = codeFlow ? true : nil
    }

    /// The PKCE code verifier of this request (RFC 7636): 43 characters of base64url, derived from
    /// the state's nonce under the server's key. Only this server can make it, it never leaves the
    /// server but for the token endpoint, and nothing is stored between the request and its answer.
    public func codeVerifier(key: SecretKey) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: Data("stratus/v2/pkce-verifier/\(nonce)".utf8), using: key.tokenKey(.providerState))
        return ProviderSignIn.base64URL(Data(mac))
    }

    public func signed(with key: SecretKey) -> String {
        SignedToken.sign(self, kind: .providerState, key: key)
    }

    /// The state an issuer's answer came back with, once it is one this server issued for this
    /// container and has not expired; AUTHENTICATION_FAILED otherwise (no sign-in waits for it).
    public static func verify(_ text: String?, key: SecretKey, container: String, now: Int64) throws(StratusError) -> ProviderSignInState {
        guard let text, !text.isEmpty else {
            throw StratusError(.authenticationFailed, "the provider's answer has no state: no sign-in is waiting for it; start again from the app")
        }
        guard text.utf8.count <= maxBytes, let state = SignedToken.open(text, as: ProviderSignInState.self, kind: .providerState, key: key) else {
            throw StratusError(.authenticationFailed, "the provider's answer carries a state this server did not issue: no sign-in is waiting for it; start again from the app")
        }
        guard state.container == container else {
            throw StratusError(.authenticationFailed, "the provider's answer belongs to a sign-in to another container")
        }
        guard state.expiresAt > now else {
            throw StratusError(.authenticationFailed, "the sign-in this answer belongs to has expired; start again from the app")
        }
        return state
    }
}

/// The hosted sign-in page's sign-in through an issuer: the authorization request it sends the
/// user to, and where the issuer answers.
public enum ProviderSignIn {
    /// Apple's issuer, whose scopes are `name email` (not OpenID's `openid email profile`).
    public static let appleIssuer = "https://appleid.apple.com"

    /// The path of the callback the issuer posts its answer to.
    public static func callbackPath(container: String) -> String {
        "/auth/1/\(container.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? container)/signin/provider/callback"
    }

    /// The redirect URL of an issuer: the configured one, or the callback under the public URL.
    public static func redirectURL(of issuer: TrustedIssuer, publicURL: String, container: String) -> String {
        issuer.redirectURL ?? publicURL + callbackPath(container: container)
    }

    /// The scopes asked for: Apple's names, or OpenID Connect's.
    public static func scope(of issuer: String) -> String {
        issuer == appleIssuer ? "name email" : "openid email profile"
    }

    /// What the page's button says for an issuer.
    public static func label(of issuer: String) -> String {
        if issuer == appleIssuer { return "Sign in with Apple" }
        return "Sign in with " + (URLComponents(string: issuer)?.host ?? issuer)
    }

    /// The authorization request's URL: the endpoint with OpenID Connect's request added to its
    /// own query: the client id, redirect URL, scope, state and nonce, and either the ID token
    /// posted back (`response_type=id_token`, `response_mode=form_post`) or, with a code
    /// challenge, an authorization code sent back in the callback's query (`response_type=code`,
    /// `code_challenge`, `code_challenge_method=S256`).
    public static func authorizationURL(
        endpoint: String, issuer: TrustedIssuer, clientID: String, redirectURL: String, state: String, nonce: String, codeChallenge: String? = nil
    ) throws(StratusError) -> String {
        guard var components = URLComponents(string: endpoint), let scheme = components.scheme?.lowercased(), scheme == "https" || scheme == "http",
            components.host?.isEmpty == false
        else {
            throw StratusError(.tryAgainLater, "the issuer's authorization endpoint is not an absolute URL")
        }
        let response =
            if let codeChallenge {
                [
                    URLQueryItem(name: "response_type", value: "code"), URLQueryItem(name: "code_challenge", value: codeChallenge),
                    URLQueryItem(name: "code_challenge_method", value: "S256"),
                ]
            } else {
                [URLQueryItem(name: "response_type", value: "id_token"), URLQueryItem(name: "response_mode", value: "form_post")]
            }
        let added = response + [
            URLQueryItem(name: "client_id", value: clientID), URLQueryItem(name: "redirect_uri", value: redirectURL),
            URLQueryItem(name: "scope", value: scope(of: issuer.issuer)), URLQueryItem(name: "state", value: state),
            URLQueryItem(name: "nonce", value: nonce),
        ]
        let names = Set(added.map(\.name) + ["response_mode", "code_challenge", "code_challenge_method"])
        components.queryItems = (components.queryItems ?? []).filter { !names.contains($0.name) } + added
        // `+` is a space in a form-encoded query; issuers read it so, so it is escaped.
        components.percentEncodedQuery = components.percentEncodedQuery?.replacingOccurrences(of: "+", with: "%2B")
        guard let url = components.string else { throw StratusError(.tryAgainLater, "the issuer's authorization endpoint is not an absolute URL") }
        return url
    }

    /// The authorization endpoint an issuer's discovery document (`/.well-known/openid-configuration`)
    /// names, once the document is the issuer's own (its `issuer` is the issuer's) and the endpoint
    /// an absolute http(s) URL of at most 2,048 bytes.
    public static func authorizationEndpoint(discovery: [UInt8], issuer: String) throws(StratusError) -> String {
        struct Document: Decodable {
            var issuer: String?
            var authorization_endpoint: String?
        }
        guard let document = try? JSONDecoder().decode(Document.self, from: Data(discovery)) else {
            throw StratusError(.tryAgainLater, "the issuer's discovery document is not JSON of the expected shape")
        }
        guard document.issuer == issuer else {
            throw StratusError(.tryAgainLater, "the issuer's discovery document names another issuer")
        }
        guard let endpoint = document.authorization_endpoint, endpoint.utf8.count <= TrustedIssuer.maxURLBytes,
            let components = URLComponents(string: endpoint), let scheme = components.scheme?.lowercased(), scheme == "https" || scheme == "http",
            components.host?.isEmpty == false, components.user == nil, components.password == nil
        else {
            throw StratusError(.tryAgainLater, "the issuer's discovery document names no usable authorization_endpoint")
        }
        return endpoint
    }

    /// The PKCE challenge of a verifier: base64url of its SHA-256 (`S256`).
    public static func codeChallenge(of verifier: String) -> String {
        base64URL(Data(SHA256.hash(data: Data(verifier.utf8))))
    }

    /// base64url without padding.
    static func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    /// The discovery document's URL of an issuer.
    public static func discoveryURL(of issuer: String) -> String {
        (issuer.hasSuffix("/") ? String(issuer.dropLast()) : issuer) + "/.well-known/openid-configuration"
    }
}

/// What an issuer sends the callback, posted as a form or in the query (both
/// `application/x-www-form-urlencoded`): the ID token or an authorization code, and the state; or
/// an error. Sign in with Apple adds `user` (the name, at the first sign-in only).
public struct ProviderCallback: Sendable, Equatable {
    /// The largest body read.
    public static let maxBytes = 32 * 1024
    /// The most fields read.
    public static let maxFields = 16
    /// The longest authorization code taken.
    public static let maxCodeBytes = 4096

    public var idToken: String?
    public var code: String?
    public var state: String?
    public var error: String?
    public var givenName: String?
    public var familyName: String?

    public init(idToken: String? = nil, state: String? = nil, error: String? = nil, givenName: String? = nil, familyName: String? = nil) {
        self.idToken = idToken
        self.state = state
        self.error = error
        self.givenName = givenName
        self.familyName = familyName
    }

    /// Reads a form body; BAD_REQUEST when it is not one (too many fields, not UTF-8, NUL).
    public static func parse(_ body: [UInt8]) throws(StratusError) -> ProviderCallback {
        guard body.count <= maxBytes else { throw StratusError(.badRequest, "the provider's answer is larger than \(maxBytes) bytes") }
        guard let text = String(validating: body, as: UTF8.self) else { throw StratusError(.badRequest, "the provider's answer is not UTF-8") }
        var fields: [String: String] = [:]
        let pairs = text.split(separator: "&", omittingEmptySubsequences: true)
        guard pairs.count <= maxFields else { throw StratusError(.badRequest, "the provider's answer has more than \(maxFields) fields") }
        for pair in pairs {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decoded(_ part: Substring) throws(StratusError) -> String {
                guard let value = String(part).replacingOccurrences(of: "+", with: " ").removingPercentEncoding else {
                    throw StratusError(.badRequest, "the provider's answer is not a form (bad percent-encoding)")
                }
                try ClientText.check(value, "a field of the provider's answer")
                return value
            }
            let name = try decoded(parts[0])
            if fields[name] == nil { fields[name] = try decoded(parts.count > 1 ? parts[1] : "") }
        }
        var callback = ProviderCallback(idToken: fields["id_token"], state: fields["state"], error: fields["error"])
        callback.code = fields["code"]
        if let user = fields["user"], let data = user.data(using: .utf8) {
            struct User: Decodable {
                struct Name: Decodable {
                    var firstName: String?
                    var lastName: String?
                }
                var name: Name?
            }
            if let name = (try? JSONDecoder().decode(User.self, from: data))?.name {
                callback.givenName = name.firstName
                callback.familyName = name.lastName
            }
        }
        return callback
    }

    /// The ID token, or AUTHENTICATION_FAILED naming the issuer's error (or its absence).
    public func requireIDToken() throws(StratusError) -> String {
        if let error { throw StratusError(.authenticationFailed, "the provider refused the sign-in: '\(ClientText.excerpt(error))'") }
        guard let idToken, !idToken.isEmpty else { throw StratusError(.authenticationFailed, "the provider's answer has no id_token") }
        return idToken
    }

    /// The authorization code (at most `maxCodeBytes`), or AUTHENTICATION_FAILED naming the
    /// issuer's error (or the code's absence). An ID token instead of a code is refused: the
    /// request asked for a code, and a token the browser carried is not what it is exchanged for.
    public func requireCode() throws(StratusError) -> String {
        if let error { throw StratusError(.authenticationFailed, "the provider refused the sign-in: '\(ClientText.excerpt(error))'") }
        guard let code, !code.isEmpty else { throw StratusError(.authenticationFailed, "the provider's answer has no authorization code") }
        guard code.utf8.count <= Self.maxCodeBytes else {
            throw StratusError(.authenticationFailed, "the provider's authorization code is longer than \(Self.maxCodeBytes) bytes")
        }
        return code
    }
}

/// The authorization-code flow's exchange at an issuer's token endpoint (OAuth 2.0, RFC 6749
/// section 4.1.3, with PKCE's `code_verifier`, RFC 7636): the form posted, and the client's
/// authentication when it has a secret (HTTP Basic, `client_secret_basic`, OpenID Connect's
/// default).
public struct ProviderTokenRequest: Sendable, Equatable {
    /// The form (`application/x-www-form-urlencoded`).
    public var body: String
    /// The `Authorization` header; nil for a client without a secret.
    public var authorization: String?

    public init(code: String, codeVerifier: String, clientID: String, redirectURL: String, clientSecret: String?) {
        body = [
            ("grant_type", "authorization_code"), ("code", code), ("redirect_uri", redirectURL), ("client_id", clientID), ("code_verifier", codeVerifier),
        ].map { "\($0)=\(Self.formEncoded($1))" }.joined(separator: "&")
        authorization = clientSecret.map { secret in
            "Basic " + Data("\(Self.formEncoded(clientID)):\(Self.formEncoded(secret))".utf8).base64EncodedString()
        }
    }

    /// A form value: everything but unreserved characters percent-encoded.
    static func formEncoded(_ text: String) -> String {
        var allowed = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        allowed.insert(charactersIn: "-._~")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text
    }

    /// The largest answer read.
    public static let maxAnswerBytes = 64 * 1024

    /// The ID token of the token endpoint's answer (HTTP 200, JSON with `id_token`). A refusal
    /// (4xx, OAuth's `error`, e.g. `invalid_grant` for a used code or a wrong verifier) is
    /// AUTHENTICATION_FAILED naming the error; an endpoint that fails (5xx) is TRY_AGAIN_LATER.
    public static func idToken(status: Int, answer: [UInt8]) throws(StratusError) -> String {
        struct Answer: Decodable {
            var id_token: String?
            var error: String?
        }
        let decoded = try? JSONDecoder().decode(Answer.self, from: Data(answer))
        guard status == 200 else {
            guard (400..<500).contains(status) else {
                throw StratusError(.tryAgainLater, "the issuer's token endpoint answered HTTP \(status); retry later")
            }
            let error = decoded?.error.map { " ('\(ClientText.excerpt($0))')" } ?? ""
            throw StratusError(.authenticationFailed, "the issuer refused the authorization code\(error): start again from the app")
        }
        guard let idToken = decoded?.id_token, !idToken.isEmpty else {
            throw StratusError(.authenticationFailed, "the issuer's token endpoint answered without an id_token")
        }
        return idToken
    }
}

/// Which web origins may call a container's API from a browser (CORS). Apple's API tokens allow
/// any origin unless their settings list some; a container does the same.
public enum AllowedOrigins {
    /// The most origins a container may list.
    public static let maxOrigins = 32
    /// How long a browser may keep a preflight's answer, in seconds.
    public static let preflightMaxAge = 600
    /// The request headers a preflight allows (what CloudKit's clients send).
    public static let allowedHeaders = "Content-Type, X-Apple-CloudKit-Request-KeyID, X-Apple-CloudKit-Request-ISO8601Date, X-Apple-CloudKit-Request-SignatureV1, X-Stratus-Device-ID"
    /// The methods the API answers.
    public static let allowedMethods = "GET, POST, OPTIONS"

    /// Whether `origin` may call a container that lists `allowed` (nil: any origin).
    public static func allows(_ origin: String, _ allowed: [String]?) -> Bool {
        guard let allowed else { return true }
        guard let normalized = SignInPageRequest.origin(origin) else { return false }
        return allowed.contains(normalized)
    }

    /// A list of origins, checked and normalized (`scheme://host[:port]`, lowercase); nil for `*`
    /// alone (any origin). BAD_REQUEST for anything else.
    public static func validated(_ origins: [String]) throws(StratusError) -> [String]? {
        if origins == ["*"] { return nil }
        guard origins.count <= maxOrigins else { throw StratusError(.badRequest, "a container lists at most \(maxOrigins) origins") }
        var normalized: [String] = []
        for origin in origins {
            guard let clean = SignInPageRequest.origin(origin.trimmingCharacters(in: .whitespaces)) else {
                throw StratusError(.badRequest, "'\(ClientText.excerpt(origin))' is not a web origin (scheme://host[:port]), nor '*' alone")
            }
            if !normalized.contains(clean) { normalized.append(clean) }
        }
        return normalized
    }
}
