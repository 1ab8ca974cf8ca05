import Foundation
import Hummingbird
import Logging
import StratusCore
import StratusPostgres

/// The built-in identity provider: `POST /auth/1/{container}/signin` exchanges a login and password
/// from the container's user directory for a web auth token, which names a new session (the user
/// endpoints are `UserRoutes`; ID-token sign-in and sessions are `IdentityRoutes`).
struct AuthRoutes<Context: StratusRequestContext>: Sendable {
    let users: UserStore
    let sessions: SessionStore
    let containers: ContainerStore
    let authenticator: Authenticator
    let limits: APILimits
    /// Seconds a web auth token from sign-in stays valid.
    let tokenLifetime: Int64
    /// Failed sign-ins per login and per client address.
    let signInLimiter: SignInLimiter

    func register(on router: Router<Context>) {
        router.post("/auth/1/:container/signin") { request, context in try await signIn(request, context) }
    }

    struct SignInRequest: Decodable {
        var login: String
        var password: String
    }

    struct SignInResponse: Encodable {
        var ckWebAuthToken: String
        var userRecordName: String
        /// When the token expires, in milliseconds since 1970.
        var expiresAt: Int64
        /// The session the token names (Stratus extension).
        var sessionID: String
        /// Whether this sign-in created the user (ID-token sign-in only).
        var created: Bool?
    }

    /// The container the path names, checked.
    static func containerParameter(_ context: Context) throws(StratusError) -> String {
        guard let container = context.parameters.get("container"), !container.isEmpty, container.utf8.count <= 255 else {
            throw StratusError(.badRequest, "The path must name a container")
        }
        try ClientText.check(container, "The container in the path")
        return container
    }

    /// The container of the path, once the request shows it comes from one of its apps: its
    /// `ckAPIToken`, or the `ckSignInRequest` of the hosted sign-in page (`SignInPageRequest`), which
    /// stands for the app that page was opened for.
    /// A suspended container's apps are refused either way.
    static func appContainer(_ request: Request, _ context: Context, containers: ContainerStore, secretKey: SecretKey) async throws -> String {
        let container = try containerParameter(context)
        let suspended: Bool
        if let signInRequest = request.uri.queryParameters["ckSignInRequest"].map(String.init), request.uri.queryParameters["ckAPIToken"] == nil {
            _ = try SignInPageRequest.verify(signInRequest, key: secretKey, container: container, now: Int64(Date().timeIntervalSince1970))
            suspended = try await containers.isSuspended(container: container, logger: context.logger)
        } else {
            guard let apiToken = request.uri.queryParameters["ckAPIToken"].map(String.init), !apiToken.isEmpty else {
                throw StratusError(.authenticationFailed, "Missing ckAPIToken")
            }
            guard let access = try await containers.access(forAPIToken: apiToken, logger: context.logger), access.container == container else {
                throw StratusError(.authenticationFailed, "ckAPIToken is not valid for container '\(ClientText.excerpt(container))'")
            }
            suspended = access.suspended
            try ContainerSuspension.check(suspended, deleting: access.deleting, container: container)
        }
        try ContainerSuspension.check(suspended, container: container)
        return container
    }

    /// The answer of every sign-in: a web auth token naming the new session.
    static func signedIn(
        container: String, userRecordName: String, credentialEpoch: Int64, sessionID: String, expiresAt: Int64, created: Bool? = nil, key: SecretKey
    ) throws -> Response {
        let token = WebAuthToken(
            userRecordName: userRecordName, container: container, expiresAt: expiresAt, credentialEpoch: credentialEpoch, sessionID: sessionID
        ).signed(with: key)
        return try json(SignInResponse(ckWebAuthToken: token, userRecordName: userRecordName, expiresAt: expiresAt * 1000, sessionID: sessionID, created: created))
    }

    func signIn(_ request: Request, _ context: Context) async throws -> Response {
        let container = try await Self.appContainer(request, context, containers: containers, secretKey: authenticator.secretKey)
        // Read only for a known app, as every other body.
        let body = try await RequestBody.read(request, limit: 64 * 1024)
        let credentials = try RequestBody.decode(SignInRequest.self, from: body)
        try ClientText.check(credentials.login, "login")
        // Refused while the login or the address is locked, before the password is checked.
        let attempt = try signInLimiter.begin(container: container, login: credentials.login, address: context.clientAddress)
        guard let user = try await users.authenticate(
            container: container, login: credentials.login, password: credentials.password, logger: context.logger)
        else {
            throw StratusError(.authenticationFailed, "The login or the password is wrong")
        }
        attempt.succeeded()
        let expiresAt = Int64(Date().timeIntervalSince1970) + tokenLifetime
        let sessionID = try await sessions.create(
            container: container, userRecordName: user.userRecordName, method: .password, expiresAt: expiresAt, logger: context.logger)
        context.logger.info("signed in", metadata: ["user": "\(user.userRecordName)"])
        return try Self.signedIn(
            container: container, userRecordName: user.userRecordName, credentialEpoch: user.credentialEpoch, sessionID: sessionID, expiresAt: expiresAt,
            key: authenticator.secretKey)
    }
}
