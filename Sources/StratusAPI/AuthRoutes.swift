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

    /// The container of the path, once the request's `ckAPIToken` is shown to be one of its apps'.
    static func appContainer(_ request: Request, _ context: Context, containers: ContainerStore) async throws -> String {
        let container = try containerParameter(context)
        guard let apiToken = request.uri.queryParameters["ckAPIToken"].map(String.init), !apiToken.isEmpty else {
            throw StratusError(.authenticationFailed, "Missing ckAPIToken")
        }
        guard let access = try await containers.access(forAPIToken: apiToken, logger: context.logger), access.container == container else {
            throw StratusError(.authenticationFailed, "ckAPIToken is not valid for container '\(ClientText.excerpt(container))'")
        }
        try ContainerSuspension.check(access.suspended, container: container)
        return container
    }

    func signIn(_ request: Request, _ context: Context) async throws -> Response {
        let container = try await Self.appContainer(request, context, containers: containers)
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
        let token = WebAuthToken(
            userRecordName: user.userRecordName, container: container, expiresAt: expiresAt, credentialEpoch: user.credentialEpoch, sessionID: sessionID
        ).signed(with: authenticator.secretKey)
        context.logger.info("signed in", metadata: ["user": "\(user.userRecordName)"])
        return try json(SignInResponse(ckWebAuthToken: token, userRecordName: user.userRecordName, expiresAt: expiresAt * 1000, sessionID: sessionID))
    }
}
