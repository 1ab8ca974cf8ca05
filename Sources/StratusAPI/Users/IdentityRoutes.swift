import Foundation
import Hummingbird
import Logging
import NIOCore
import StratusCore
import StratusIdentity
import StratusPostgres

/// ID-token sign-in and sessions (Stratus extensions; Apple's service has neither):
///
/// - `POST /auth/1/{container}/signin/idtoken`: an app exchanges an ID token of an issuer the
///   container trusts (Sign in with Apple's `identityToken`, any OpenID Connect provider's
///   `id_token`) and its nonce for a web auth token; the user is found, or created, by the account.
/// - `POST /auth/1/{container}/link/idtoken`: a signed-in user links another account.
/// - `GET /auth/1/{container}/sessions`, `POST …/sessions/revoke`, `POST …/signout`,
///   `POST …/signout/everywhere`: a signed-in user's sessions.
/// - `POST /auth/1/{container}/account/delete`: a user who signed in recently deletes their account
///   (docs/operations.md, "Deleting a user"): signed out at once, the rest by stratus-gc.
/// - `POST /auth/1/{container}/account/export`: a user who signed in recently downloads their data
///   as an export archive, streamed as it is made (docs/operations.md, "Exporting and importing").
struct IdentityRoutes<Context: StratusRequestContext>: Sendable {
    let identities: IdentityStore
    let sessions: SessionStore
    let containers: ContainerStore
    let authenticator: Authenticator
    let issuerKeys: IssuerKeys
    /// Seconds a web auth token from sign-in stays valid.
    let tokenLifetime: Int64
    /// Failed sign-ins per account and per client address, shared with the password sign-in.
    let signInLimiter: SignInLimiter
    let deletions: UserDeletionStore
    /// How recent a sign-in must be for its user to delete or export their account, in seconds.
    let deletionSignIn: Int64
    let exports: ArchiveExport

    /// The largest request body these routes read.
    static var maxBodyBytes: Int { 16 * 1024 }

    func register(on router: Router<Context>) {
        router.post("/auth/1/:container/signin/idtoken") { request, context in try await signIn(request, context) }
        router.post("/auth/1/:container/link/idtoken") { request, context in try await link(request, context) }
        router.get("/auth/1/:container/sessions") { request, context in try await list(request, context) }
        router.post("/auth/1/:container/sessions/revoke") { request, context in try await revoke(request, context) }
        router.post("/auth/1/:container/signout") { request, context in try await signOut(request, context) }
        router.post("/auth/1/:container/signout/everywhere") { request, context in try await signOutEverywhere(request, context) }
        router.post("/auth/1/:container/account/delete") { request, context in try await deleteAccount(request, context) }
        router.post("/auth/1/:container/account/export") { request, context in try await exportAccount(request, context) }
    }

    struct IDTokenRequest: Decodable {
        /// The provider's ID token.
        var idToken: String
        /// The nonce the app asked the provider to put in the token (or whose SHA-256 it asked for).
        var nonce: String?
        /// The name the app was told (Sign in with Apple tells it to the app, not in the token), used
        /// for a new user when the token has none.
        var givenName: String?
        var familyName: String?
    }

    // MARK: ID tokens

    func signIn(_ request: Request, _ context: Context) async throws -> Response {
        let container = try await AuthRoutes<Context>.appContainer(request, context, containers: containers, secretKey: authenticator.secretKey)
        let input = try await Self.readIDTokenRequest(request)
        // Throttled by the password sign-in's limiter, per client address (the account is known
        // only once the token is verified); a refused token counts as a failed sign-in.
        let attempt = try signInLimiter.begin(container: container, login: nil, address: context.clientAddress)
        let account = try await checkedAccount(input, container: container, logger: context.logger)
        let expiresAt = Int64(Date().timeIntervalSince1970) + tokenLifetime
        let signedIn = try await identities.signIn(container: container, account: account, expiresAt: expiresAt, logger: context.logger)
        attempt.succeeded()
        context.logger.info(
            "signed in with an ID token", metadata: ["user": "\(signedIn.userRecordName)", "issuer": "\(account.issuer)", "created": "\(signedIn.created)"])
        return try AuthRoutes<Context>.signedIn(
            container: container, userRecordName: signedIn.userRecordName, credentialEpoch: signedIn.credentialEpoch, sessionID: signedIn.sessionID,
            expiresAt: expiresAt, created: signedIn.created, key: authenticator.secretKey)
    }

    struct LinkResponse: Encodable {
        var userRecordName: String
        var issuer: String
        /// False when the account was linked to this user already.
        var linked: Bool
    }

    func link(_ request: Request, _ context: Context) async throws -> Response {
        let caller = try await signedInCaller(request, context)
        let input = try await Self.readIDTokenRequest(request)
        let account = try await checkedAccount(input, container: caller.container, logger: context.logger)
        let decision = try await identities.link(container: caller.container, account: account, to: caller.user, logger: context.logger)
        let linked: Bool = if case .link = decision { true } else { false }
        context.logger.info("linked an account", metadata: ["user": "\(caller.user)", "issuer": "\(account.issuer)", "linked": "\(linked)"])
        return try json(LinkResponse(userRecordName: caller.user, issuer: account.issuer, linked: linked))
    }

    static func readIDTokenRequest(_ request: Request) async throws -> IDTokenRequest {
        let body = try await RequestBody.read(request, limit: maxBodyBytes)
        let input = try RequestBody.decode(IDTokenRequest.self, from: body)
        try ClientText.check(input.idToken, "idToken")
        if let nonce = input.nonce { try ClientText.check(nonce, "nonce") }
        return input
    }

    /// The account a posted ID token names, once its issuer is one the container trusts, its
    /// signature is the issuer's, and its claims meet `IDTokenRules`.
    func checkedAccount(_ input: IDTokenRequest, container: String, logger: Logger) async throws -> IDTokenRules.Account {
        let token = try IDToken.parse(input.idToken)
        guard let trusted = try await identities.trustedIssuer(container: container, issuer: token.claims.issuer, logger: logger) else {
            throw StratusError(.authenticationFailed, "idToken's issuer '\(ClientText.excerpt(token.claims.issuer))' is not trusted by this container")
        }
        return try await Self.verifiedAccount(
            token, trusted: trusted, nonce: input.nonce, givenName: input.givenName, familyName: input.familyName, issuerKeys: issuerKeys)
    }

    /// The account a token of a trusted issuer names, once its signature is the issuer's and its
    /// claims meet `IDTokenRules` (the name the app was told filled in where the token has none).
    static func verifiedAccount(
        _ token: IDToken, trusted: TrustedIssuer, nonce: String?, givenName: String?, familyName: String?, issuerKeys: IssuerKeys
    ) async throws -> IDTokenRules.Account {
        let key = try await issuerKeys.key(token.keyID, of: trusted)
        try token.verify(with: key)
        let account = try IDTokenRules.check(token.claims, trusted: trusted, nonce: nonce, now: Int64(Date().timeIntervalSince1970))
        return try account.naming(givenName: givenName, familyName: familyName)
    }

    // MARK: Sessions

    struct SignedInCaller {
        var container: String
        var user: String
        var sessionID: String?
    }

    /// The signed-in user of a request with `ckAPIToken` and `ckWebAuthToken` (checked as every
    /// database call's are: epoch, expiry, container, session).
    func signedInCaller(_ request: Request, _ context: Context) async throws -> SignedInCaller {
        let container = try AuthRoutes<Context>.containerParameter(context)
        guard case .caller(let caller) = try await authenticator.identify(request, container: container, logger: context.logger) else {
            throw StratusError(.accessDenied, "Server-to-server keys have no sessions; call with ckAPIToken and ckWebAuthToken")
        }
        guard let user = caller.userRecordName else {
            throw StratusError(.authenticationFailed, "Sign in first: this call needs ckWebAuthToken")
        }
        return SignedInCaller(container: caller.container, user: user, sessionID: caller.sessionID)
    }

    struct SessionJSON: Encodable {
        var sessionID: String
        var method: String
        var issuer: String?
        /// Milliseconds since 1970.
        var createdAt: Int64
        var expiresAt: Int64
        var revokedAt: Int64?
        /// Whether the session is signed in now.
        var active: Bool
        /// Whether this request's token belongs to it.
        var current: Bool
    }

    func list(_ request: Request, _ context: Context) async throws -> Response {
        let caller = try await signedInCaller(request, context)
        let now = Int64(Date().timeIntervalSince1970)
        let found = try await sessions.list(container: caller.container, userRecordName: caller.user, logger: context.logger)
        let listed = found.map { session in
            SessionJSON(
                sessionID: session.sessionID, method: session.method.rawValue, issuer: session.issuer, createdAt: session.createdAt * 1000,
                expiresAt: session.expiresAt * 1000, revokedAt: session.revokedAt.map { $0 * 1000 }, active: session.isActive(now: now),
                current: session.sessionID == caller.sessionID)
        }
        return try json(["sessions": listed])
    }

    struct RevokeRequest: Decodable {
        var sessionID: String
    }

    struct RevokeResponse: Encodable {
        var revokedSessions: Int
    }

    func revoke(_ request: Request, _ context: Context) async throws -> Response {
        let caller = try await signedInCaller(request, context)
        let body = try await RequestBody.read(request, limit: Self.maxBodyBytes)
        let sessionID = try Session.validateID(try RequestBody.decode(RevokeRequest.self, from: body).sessionID)
        guard try await sessions.revoke(container: caller.container, userRecordName: caller.user, sessionID: sessionID, logger: context.logger) else {
            throw StratusError(.notFound, "you have no session '\(sessionID)'")
        }
        context.logger.info("revoked a session", metadata: ["user": "\(caller.user)"])
        return try json(RevokeResponse(revokedSessions: 1))
    }

    func signOut(_ request: Request, _ context: Context) async throws -> Response {
        let caller = try await signedInCaller(request, context)
        guard let sessionID = caller.sessionID else {
            throw StratusError(.badRequest, "this ckWebAuthToken belongs to no session; sign out everywhere to end it")
        }
        _ = try await sessions.revoke(container: caller.container, userRecordName: caller.user, sessionID: sessionID, logger: context.logger)
        context.logger.info("signed out", metadata: ["user": "\(caller.user)"])
        return try json(RevokeResponse(revokedSessions: 1))
    }

    func signOutEverywhere(_ request: Request, _ context: Context) async throws -> Response {
        let caller = try await signedInCaller(request, context)
        let revoked = try await sessions.revokeAll(container: caller.container, userRecordName: caller.user, logger: context.logger)
        context.logger.info("signed out everywhere", metadata: ["user": "\(caller.user)", "sessions": "\(revoked)"])
        return try json(RevokeResponse(revokedSessions: revoked))
    }

    struct DeletionResponse: Encodable {
        var userRecordName: String
        /// The step the deletion reached (`sign-out` is done once this answers).
        var step: String
    }

    /// Deletes the signed-in user's account: their sign-in must be recent (`deletionSignIn`); the
    /// job is recorded and its sign-out step run before the answer, so every token of theirs is
    /// refused from then on; stratus-gc's `UserDeletionRunner` runs the rest.
    func deleteAccount(_ request: Request, _ context: Context) async throws -> Response {
        let caller = try await recentlySignedInCaller(request, context)
        _ = try await deletions.start(container: caller.container, user: caller.user, requestedBy: "self", logger: context.logger)
        let progress = try await deletions.signOut(container: caller.container, user: caller.user, logger: context.logger)
        context.logger.info("account deletion requested", metadata: ["user": "\(caller.user)"])
        return try json(DeletionResponse(userRecordName: caller.user, step: progress.step.rawValue))
    }

    /// The caller, whose session must have signed in within `deletionSignIn` seconds.
    func recentlySignedInCaller(_ request: Request, _ context: Context) async throws -> (container: String, user: String) {
        let caller = try await signedInCaller(request, context)
        var createdAt: Int64?
        if let sessionID = caller.sessionID,
           let session = try await sessions.session(container: caller.container, sessionID: sessionID, logger: context.logger),
           session.userRecordName == caller.user {
            createdAt = session.createdAt
        }
        try UserDeletion.checkRecentSignIn(sessionCreatedAt: createdAt, now: Int64(Date().timeIntervalSince1970), window: deletionSignIn)
        return (caller.container, caller.user)
    }

    /// The signed-in user's own export (their private database, the public records they created,
    /// their subscriptions), as a tar archive streamed while it is made; their sign-in must be
    /// recent, as for deleting the account. A failure once the answer has begun ends the stream
    /// without the manifest, so the archive is refused by an import.
    func exportAccount(_ request: Request, _ context: Context) async throws -> Response {
        let caller = try await recentlySignedInCaller(request, context)
        let exports = exports
        let logger = context.logger
        let createdAt = Int64(Date().timeIntervalSince1970 * 1000)
        context.logger.info("account export requested", metadata: ["user": "\(caller.user)"])
        var headers = HTTPFields()
        headers[.contentType] = "application/x-tar"
        headers[.contentDisposition] = "attachment; filename=\"export.tar\""
        return Response(status: .ok, headers: headers, body: ResponseBody { writer in
            var output = ResponseOutput(writer: writer)
            _ = try await exports.run(container: caller.container, user: caller.user, createdAt: createdAt, logger: logger, to: &output)
            writer = output.writer
            try await writer.finish(nil)
        })
    }

    /// A response body as an archive's output.
    struct ResponseOutput: ArchiveOutput {
        var writer: any ResponseBodyWriter

        mutating func write(_ bytes: [UInt8]) async throws { try await writer.write(ByteBuffer(bytes: bytes)) }
    }
}
