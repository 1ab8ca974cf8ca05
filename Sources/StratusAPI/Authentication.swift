import Foundation
import Hummingbird
import Logging
import StratusCore
import StratusPostgres

/// Who is calling: the container, how the call authenticated and, when known, the user.
struct Caller: Sendable {
    /// How a call proves where it comes from.
    enum Credential: Sendable {
        /// `ckAPIToken`.
        case apiToken(String)
        /// A server-to-server signature made with this key id.
        case serverKey(String)
    }

    var container: String
    var credential: Credential
    /// The signed-in user (web auth token) or the server key's own user.
    var userRecordName: String?
    /// Whether the container lets callers without a user read its public database.
    var allowsAnonymousPublic: Bool
    /// The session of the caller's web auth token, when it has one.
    var sessionID: String? = nil
    /// The web origin of the page that made the call (its `Origin` header, when it is one), which a
    /// sign-in page hands the web auth token to.
    var origin: String? = nil
    /// Where this server is reached, for the absolute `redirectURL` (`STRATUS_PUBLIC_URL`, else the
    /// request's own scheme and `Host`).
    var publicURL: String? = nil
    /// The container's own limits (its request rates and quotas).
    var limits = ContainerLimits()
}

/// What a call does with the database it addresses.
enum DatabaseAccess: Sendable {
    /// Reads: the public database is open to users, server keys, and anonymous callers where the container allows it.
    case read
    /// Writes: need a user (or a server key) everywhere.
    case write
    /// Calls about the caller itself (`users/caller`): need a user.
    case user
}

/// Authenticates calls: either `ckAPIToken` (+ `ckWebAuthToken` for a user) or a server-to-server
/// signature (three `X-Apple-CloudKit-Request-*` headers), never both.
struct Authenticator: Sendable {
    let containers: ContainerStore
    let serverKeys: ServerKeyStore
    let secretKey: SecretKey
    /// The sign-in address template (`{container}` is replaced); nil for the hosted sign-in page.
    let signInURL: String?
    /// `STRATUS_PUBLIC_URL`: where clients reach this server (`https://host[:port]`), the base of
    /// the hosted sign-in page's absolute address; nil: the request's `Host`.
    var publicURL: String? = nil
    /// The request rate limits, applied once the caller is known.
    var limiter = RequestLimiter(RateLimits())
    /// Recent answers about API tokens; nil: every call reads the database.
    var accessCache: AccessCache? = nil
    /// Counts calls per container (`STRATUS_METRICS_CONTAINERS`); nil: not counted.
    var requestMetrics: ContainerMetrics? = nil
    /// The web auth tokens opened so far (signed with `secretKey`), so each is opened once.
    let webAuthTokens: OpenedWebAuthTokens

    /// A call identified from its URL and headers: either its caller, or a signed request whose key
    /// exists and whose date is fresh, and whose signature (over the body) is still to be checked.
    enum Identified: Sendable {
        case caller(Caller)
        case signed(SignedRequest)
    }

    /// A signed request waiting for its body.
    struct SignedRequest: Sendable {
        var key: ServerKey
        var date: String
        var signature: String
        /// The path alone, and the path with its query as received (`ServerSignature.subpaths`).
        var subpaths: [String]
    }

    /// Checks everything that needs no body, so that a caller who cannot authenticate is refused
    /// before the server reads (and buffers) what it sends.
    func identify(_ request: Request, path: DatabasePath, logger: Logger) async throws -> Identified {
        try await identify(request, container: path.container, logger: logger)
    }

    /// `identify(_:path:logger:)` for a call about the caller rather than a database (the session
    /// routes): the same credentials, for the container of the path.
    func identify(_ request: Request, container: String, logger: Logger) async throws -> Identified {
        let query = request.uri.queryParameters
        let apiToken = query["ckAPIToken"].map(String.init)
        let webToken = query["ckWebAuthToken"].map(String.init)
        let keyID = request.headers[.init(ServerSignature.keyIDHeader)!]
        let date = request.headers[.init(ServerSignature.dateHeader)!]
        let signature = request.headers[.init(ServerSignature.signatureHeader)!]
        let signed = keyID != nil || date != nil || signature != nil
        if signed {
            guard apiToken == nil, webToken == nil else {
                throw StratusError(.authenticationFailed, "Authenticate with either ckAPIToken/ckWebAuthToken or a server-to-server signature, not both")
            }
            guard let keyID, let date, let signature else {
                let missing = [(ServerSignature.keyIDHeader, keyID), (ServerSignature.dateHeader, date), (ServerSignature.signatureHeader, signature)]
                    .filter { $0.1 == nil }.map(\.0)
                throw StratusError(.authenticationFailed, "A signed request needs the headers \(missing.joined(separator: ", ")) too")
            }
            let subpaths = try ServerSignature.subpaths(path: request.uri.path, query: request.uri.query)
            return .signed(try await identifySigned(keyID: keyID, date: date, signature: signature, subpaths: subpaths, container: container, logger: logger))
        }
        guard let apiToken, !apiToken.isEmpty else {
            throw StratusError(.authenticationFailed, "Missing ckAPIToken (or a server-to-server signature)")
        }
        // The web auth token's signature is checked first, so that the statement that checks the API
        // token also reads the named user's credential epoch (one round trip for both).
        let presentedToken = webToken.flatMap { $0.isEmpty ? nil : $0 }
        let user = presentedToken.flatMap { webAuthTokens.open($0) }
        guard let access = try await containers.access(
            forAPIToken: apiToken, user: user?.userRecordName, session: user?.sessionID, cache: accessCache, logger: logger),
              access.container == container
        else {
            throw StratusError(.authenticationFailed, "ckAPIToken is not valid for container '\(ClientText.excerpt(container))'")
        }
        try ContainerSuspension.check(access.suspended, deleting: access.deleting, container: access.container)
        var caller = Caller(container: access.container, credential: .apiToken(apiToken), allowsAnonymousPublic: access.allowsAnonymousPublic)
        caller.limits = access.limits
        caller.origin = SignInPageRequest.origin(request.headers[.origin])
        caller.publicURL = publicURL ?? Self.publicURL(of: request)
        if presentedToken != nil {
            guard let user else { throw StratusError(.authenticationFailed, "ckWebAuthToken is not valid") }
            try user.check(
                container: access.container, now: Int64(Date().timeIntervalSince1970), directoryEpoch: access.credentialEpoch,
                sessionActive: access.sessionActive)
            caller.userRecordName = user.userRecordName
            caller.sessionID = user.sessionID
        }
        return .caller(caller)
    }

    /// The caller, once the body is read: a signed request's signature is checked against it.
    func verify(_ identified: Identified, body: Data) throws(StratusError) -> Caller {
        switch identified {
        case .caller(let caller):
            return caller
        case .signed(let signed):
            try ServerSignature.verify(
                signature: signed.signature, date: signed.date, body: body, subpaths: signed.subpaths, publicKey: signed.key.publicKey,
                now: Int64(Date().timeIntervalSince1970))
            let key = signed.key
            var caller = Caller(container: key.container, credential: .serverKey(key.keyID), userRecordName: key.userRecordName, allowsAnonymousPublic: false)
            caller.limits = key.containerLimits
            return caller
        }
    }

    private func identifySigned(
        keyID: String, date: String, signature: String, subpaths: [String], container: String, logger: Logger
    ) async throws -> SignedRequest {
        // Key ids are 64 hex digits; anything else names no key and is not looked up.
        guard keyID.utf8.count == 64, keyID.utf8.allSatisfy({ (48...57).contains($0) || (97...102).contains($0 | 0x20) }),
              let key = try await serverKeys.key(id: keyID, logger: logger)
        else {
            throw StratusError(.authenticationFailed, "\(ServerSignature.keyIDHeader) names no active server-to-server key")
        }
        guard key.container == container else {
            throw StratusError(.authenticationFailed, "The server-to-server key is not valid for container '\(ClientText.excerpt(container))'")
        }
        try ContainerSuspension.check(key.containerSuspended, deleting: key.containerDeleting, container: key.container)
        try ServerSignature.checkDate(date, now: Int64(Date().timeIntervalSince1970))
        return SignedRequest(key: key, date: date, signature: signature, subpaths: subpaths)
    }

    /// The database the caller addresses, if the caller may do `access` there.
    func database(for caller: Caller, path: DatabasePath, access: DatabaseAccess) throws(StratusError) -> DatabaseID {
        switch path.scope {
        case .public:
            if caller.userRecordName == nil, access != .read || !caller.allowsAnonymousPublic {
                let what = access == .read ? "read the public database of this container" : access == .write ? "write to the public database" : "identify yourself"
                throw StratusError(.authenticationRequired, "Sign in to \(what)", redirectURL: redirectURL(for: caller))
            }
            return DatabaseID(container: path.container, environment: path.environment, scope: .public, owner: DatabaseID.publicOwner)
        case .private, .shared:
            if case .serverKey = caller.credential {
                throw StratusError(.accessDenied, "Server-to-server keys reach only the public database")
            }
            guard let user = caller.userRecordName else {
                throw StratusError(.authenticationRequired, "Sign in to use the \(path.scope.rawValue) database", redirectURL: redirectURL(for: caller))
            }
            return DatabaseID(container: path.container, environment: path.environment, scope: path.scope, owner: user)
        }
    }

    /// Where a caller without a user signs in, as an absolute URL: the configured address, or the
    /// hosted sign-in page with a signed sign-in request (the container, the calling page's origin,
    /// an expiry) — never the API token.
    func redirectURL(for caller: Caller) -> String {
        let container = caller.container.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? caller.container
        if let signInURL { return signInURL.replacingOccurrences(of: "{container}", with: container) }
        let request = SignInPageRequest(
            container: caller.container, origin: caller.origin, expiresAt: Int64(Date().timeIntervalSince1970) + SignInPageRequest.lifetime)
        return (caller.publicURL ?? publicURL ?? "http://localhost") + "/auth/1/\(container)/signin/page?request=" + request.signed(with: secretKey)
    }

    /// `http://` and the request's `Host` when it is a host and an optional port; nil otherwise.
    static func publicURL(of request: Request) -> String? {
        guard let host = request.head.authority, host.utf8.count <= 255,
            host.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7f && $0 != UInt8(ascii: "/") && $0 != UInt8(ascii: "@") && $0 != UInt8(ascii: "?") && $0 != UInt8(ascii: "#") && $0 != UInt8(ascii: "\\") }),
            !host.isEmpty
        else { return nil }
        return "http://" + host
    }
}
