import Foundation
import Hummingbird
import Logging
import StratusCore
import StratusPostgres
import StratusPush

/// Email sign-up, verification and password reset (Stratus extensions), per container and off by
/// default (`stratus container set NAME --sign-up open|invite-only|off`):
///
/// - `POST /auth/1/{container}/signup` `{email, password}` (an app's `ckAPIToken`, or the hosted
///   page's `ckSignInRequest`): sends a verification message when `SignUpRules` says so; the answer
///   is the same whether or not it did.
/// - `POST /auth/1/{container}/signup/verify` `{token}`: creates the user and signs in.
/// - `POST /auth/1/{container}/password/reset` `{email}`: sends a reset message to a user's
///   address; the same answer for every address.
/// - `POST /auth/1/{container}/password/reset/confirm` `{token, password}`: sets the password,
///   ends every earlier token of the user, and signs in.
///
/// Requests are throttled by the sign-in limiter, per address and per client; every request for a
/// message counts, as does every refused token.
struct EmailRoutes<Context: StratusRequestContext>: Sendable {
    let store: EmailSignUpStore
    let containers: ContainerStore
    let authenticator: Authenticator
    let signInLimiter: SignInLimiter
    /// Seconds a web auth token from sign-in stays valid.
    let tokenLifetime: Int64
    let lifetimes: EmailTokenLifetimes
    /// Where messages go; nil: this server sends none, and sign-up and reset are refused.
    let courier: (any EmailSending)?
    /// Owns the deliveries, so that a request's answer never waits for (or tells of) one; nil: each
    /// is sent before the answer.
    let tasks: TaskOwner?
    /// `STRATUS_PUBLIC_URL`, the base of the messages' links.
    let publicURL: String?

    static var maxBodyBytes: Int { 8 * 1024 }
    /// The longest password (bytes); the shortest is `PasswordHash.minimumLength`.
    static var maxPasswordBytes: Int { 1024 }

    func register(on router: Router<Context>) {
        router.post("/auth/1/:container/signup") { request, context in try await signUp(request, context) }
        router.post("/auth/1/:container/signup/verify") { request, context in try await verify(request, context) }
        router.post("/auth/1/:container/password/reset") { request, context in try await requestReset(request, context) }
        router.post("/auth/1/:container/password/reset/confirm") { request, context in try await confirmReset(request, context) }
    }

    /// `signup`'s body (`password` required) and `password/reset`'s.
    struct MessageRequest: Decodable {
        var email: String
        var password: String?
    }

    struct TokenRequest: Decodable {
        var token: String
        var password: String?
    }

    /// The answer to every request for a message, whatever became of it.
    struct Requested: Encodable {
        var requested = true
        var message = "If this address may have a message, one is on its way."
    }

    func signUp(_ request: Request, _ context: Context) async throws -> Response {
        try await requestMessage(request, context, purpose: .verify) { container, email, password, now, logger in
            try await store.requestSignUp(container: container, email: email, password: password ?? "", lifetime: lifetimes.verify, now: now, logger: logger)
        }
    }

    /// A request for a message (sign-up's or a reset's): the same answer whatever became of it.
    /// Every request counts against the address and the client: none gives its attempt back.
    func requestMessage(
        _ request: Request, _ context: Context, purpose: EmailTokenPurpose,
        _ body: (String, String, String?, Int64, Logger) async throws -> (token: String?, skipped: String?)
    ) async throws -> Response {
        let container = try await AuthRoutes<Context>.appContainer(request, context, containers: containers, secretKey: authenticator.secretKey)
        let input = try RequestBody.decode(MessageRequest.self, from: try await RequestBody.read(request, limit: Self.maxBodyBytes))
        let email = try EmailAddress.validate(input.email)
        if purpose == .verify {
            guard let password = input.password else { throw StratusError(.badRequest, "password is missing") }
            try Self.checkPassword(password)
        }
        let courier = try configuredCourier()
        _ = try signInLimiter.begin(container: container, login: "email:" + email, address: context.clientAddress)
        let outcome = try await body(container, email, input.password, Int64(Date().timeIntervalSince1970), context.logger)
        if let token = outcome.token {
            await deliver(courier, purpose: purpose, to: email, container: container, token: token, request: request, logger: context.logger)
        } else {
            context.logger.info("no email message was sent", metadata: ["purpose": "\(purpose.rawValue)", "why": "\(outcome.skipped ?? "")"])
        }
        return try json(Requested())
    }

    func verify(_ request: Request, _ context: Context) async throws -> Response {
        try await redeem(request, context, what: "signed up") { container, token, _, now, expiresAt, logger in
            try await store.verify(container: container, token: token, now: now, sessionExpiresAt: expiresAt, logger: logger)
        }
    }

    func requestReset(_ request: Request, _ context: Context) async throws -> Response {
        try await requestMessage(request, context, purpose: .reset) { container, email, _, now, logger in
            try await store.requestReset(container: container, email: email, lifetime: lifetimes.reset, now: now, logger: logger)
        }
    }

    func confirmReset(_ request: Request, _ context: Context) async throws -> Response {
        try await redeem(request, context, what: "reset a password", needsPassword: true) { container, token, password, now, expiresAt, logger in
            try await store.reset(container: container, token: token, password: password ?? "", now: now, sessionExpiresAt: expiresAt, logger: logger)
        }
    }

    /// A request that redeems a message's code (and, for a reset, sets the new password), then
    /// signs the user in. Each refused code counts against the client in the sign-in limiter.
    func redeem(
        _ request: Request, _ context: Context, what: String, needsPassword: Bool = false,
        _ body: (String, String, String?, Int64, Int64, Logger) async throws -> EmailSignUpStore.Redeemed
    ) async throws -> Response {
        let container = try AuthRoutes<Context>.containerParameter(context)
        let input = try RequestBody.decode(TokenRequest.self, from: try await RequestBody.read(request, limit: Self.maxBodyBytes))
        let token = try EmailToken.validate(input.token)
        if needsPassword {
            guard let password = input.password else { throw StratusError(.badRequest, "password is missing: the new password") }
            try Self.checkPassword(password)
        }
        let attempt = try signInLimiter.begin(container: container, login: nil, address: context.clientAddress)
        let now = Int64(Date().timeIntervalSince1970)
        let redeemed = try await body(container, token, input.password, now, now + tokenLifetime, context.logger)
        attempt.succeeded()
        context.logger.info("\(what)", metadata: ["user": "\(redeemed.userRecordName)"])
        return try AuthRoutes<Context>.signedIn(
            container: container, userRecordName: redeemed.userRecordName, credentialEpoch: redeemed.credentialEpoch, sessionID: redeemed.sessionID,
            expiresAt: now + tokenLifetime, created: needsPassword ? nil : true, key: authenticator.secretKey)
    }

    static func checkPassword(_ password: String) throws(StratusError) {
        guard password.count >= PasswordHash.minimumLength, password.utf8.count <= maxPasswordBytes else {
            throw StratusError(.badRequest, "password is \(PasswordHash.minimumLength) characters to \(maxPasswordBytes) bytes")
        }
        try ClientText.check(password, "password")
    }

    func configuredCourier() throws(StratusError) -> any EmailSending {
        guard let courier else {
            throw StratusError(.accessDenied, "this server sends no email (no STRATUS_SMTP_HOST or STRATUS_EMAIL_WEBHOOK_URL): ask its operator")
        }
        return courier
    }

    /// Sends a message off the request's task (the task owner's job), so the answer neither waits
    /// for it nor tells whether one went out. A failure is logged, without the message's secrets.
    func deliver(
        _ courier: any EmailSending, purpose: EmailTokenPurpose, to email: String, container: String, token: String, request: Request, logger: Logger
    ) async {
        let base = publicURL ?? Authenticator.publicURL(of: request) ?? "http://localhost"
        let path = container.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? container
        let link = "\(base)/auth/1/\(path)/signin/page#\(purpose.rawValue)=\(token)"
        let minutes = lifetimes.seconds(purpose) / 60
        let message: EmailMessage
        switch purpose {
        case .verify:
            message = EmailMessage(
                to: email, subject: "Confirm your address", text: """
                    Someone (we hope you) signed up with this address to \(container).

                    To confirm it, open \(link)
                    or enter this code: \(token)

                    It is good for \(max(minutes, 1)) minutes, once. If you did not sign up, ignore this message.
                    """, purpose: purpose.rawValue, container: container, token: token, link: link)
        case .reset:
            message = EmailMessage(
                to: email, subject: "Reset your password", text: """
                    Someone (we hope you) asked to reset the password of your account at \(container).

                    To choose a new one, open \(link)
                    or enter this code: \(token)

                    It is good for \(max(minutes, 1)) minutes, once. If you did not ask, ignore this message: your password stays as it is.
                    """, purpose: purpose.rawValue, container: container, token: token, link: link)
        }
        let job: TaskOwner.Job = {
            do {
                try await courier.send(message)
                logger.info("sent an email message", metadata: ["purpose": "\(purpose.rawValue)"])
            } catch {
                logger.warning("an email message was not delivered", metadata: ["purpose": "\(purpose.rawValue)", "error": "\(error)"])
            }
        }
        guard let tasks else { return await job() }
        if !tasks.submit(job) {
            logger.warning("an email message was not sent: the server is shutting down", metadata: ["purpose": "\(purpose.rawValue)"])
        }
    }
}
