import Crypto
import Foundation
import Hummingbird
import Logging
import StratusCore
import StratusPostgres

/// A signed-in console session.
typealias ConsoleSession = OperatorStore.Session

/// The web console under `/console`: operator sign-in and sign-out, and the pages behind them.
///
/// Every page is server-rendered HTML. A session is a random cookie (HttpOnly, SameSite=Strict,
/// Secure when served over TLS) whose digest names a row of `operator_sessions`; every form posts
/// the session's CSRF token back, and a post without the right one is refused before anything is
/// read or changed. The sign-in form, posted before there is a session, carries a token that must
/// match a cookie set with the form (a cross-site page can read neither).
struct ConsoleRoutes<Context: StratusRequestContext>: Sendable {
    let operators: OperatorStore
    let settings: ConsoleSettings
    /// Shared with the API's sign-in endpoint: failures from either count against one client address.
    let signInLimiter: SignInLimiter
    /// What the data and operations pages read and write.
    let data: ConsoleData
    /// The operations page's samples of worker lag, kept in this process.
    let history = OperationsHistory()
    /// The API's latest error answers in this process, for the request-id search.
    let recentErrors: RecentErrors
    /// Starts reindex and replay runs; nil: the operations page cannot start them.
    let maintenance: MaintenanceLauncher?
    /// Whether the server sends email (the sign-in page says so when it does not).
    var sendsEmail = false
    /// Where every form that changes something appends its entry.
    var auditLog: AuditLog { AuditLog(store: data.store) }

    static var sessionCookie: String { "stratus_console" }
    static var signInCookie: String { "stratus_console_signin" }
    /// The most containers the home page lists.
    static var maxContainers: Int { 200 }
    /// The sign-in limiter's key space for operators: no container is named with a NUL, so operator
    /// logins never share a count with an app's users.
    static var limiterNamespace: String { "\u{0}console" }

    func register(on router: Router<Context>) {
        router.get("/console") { request, context in await page(request, context) { try await home(request, context) } }
        router.get("/console/signin") { request, context in await page(request, context) { signInForm(request, error: nil, login: "") } }
        router.post("/console/signin") { request, context in await page(request, context) { try await signIn(request, context) } }
        router.post("/console/signout") { request, context in await page(request, context) { try await signOut(request, context) } }
        ConsoleDataPages<Context>(routes: self).register(on: router)
        ConsoleOperationsPage<Context>(routes: self).register(on: router)
        ConsoleAccessPage<Context>(routes: self).register(on: router)
        ConsoleIdentityPage<Context>(routes: self).register(on: router)
        ConsoleSubscriptionsPage<Context>(routes: self).register(on: router)
        ConsoleErrorsPage<Context>(routes: self).register(on: router)
        ConsoleSchemaPage<Context>(routes: self).register(on: router)
        ConsoleAuditPage<Context>(routes: self).register(on: router)
        ConsoleTenancy<Context>(routes: self).register(on: router)
    }

    /// Appends a form's action to the audit log, as done by the session's operator from the
    /// request's client address, once the change has been made.
    func audit(
        _ action: AuditAction, session: ConsoleSession, _ context: Context, container: String = "", subject: String = "",
        details: [(String, String)] = []
    ) async throws {
        let actor = AuditActor(channel: .console, name: session.operator.login, origin: context.clientAddress ?? "", requestID: context.requestID)
        try await auditLog.append(
            AuditDraft(actor: actor, action: action, container: container, subject: subject, details: details), logger: context.logger)
    }

    /// Runs a page's handler, rendering what it throws as an HTML page (never the API's JSON).
    func page(_ request: Request, _ context: Context, _ body: () async throws -> Response) async -> Response {
        do {
            return try await body()
        } catch let error as StratusError {
            let session = try? await optionalSession(request, context)
            return ConsolePage.error(error, session: session?.session)
        } catch let redirect as Redirect {
            return ConsolePage.redirect(redirect.location)
        } catch {
            context.logger.error("console page failed", metadata: ["error": "\(String(reflecting: error))"])
            return ConsolePage.error(StratusError(.internalError, "Internal error (request \(context.requestID))"), session: nil)
        }
    }

    /// Thrown by a page that needs a session and has none: the browser is sent to sign in.
    struct Redirect: Error {
        let location: String
    }

    /// The session of the request's cookie, or nil.
    func optionalSession(_ request: Request, _ context: Context) async throws -> (token: String, session: ConsoleSession)? {
        guard let token = request.cookies[Self.sessionCookie]?.value, !token.isEmpty else { return nil }
        guard let session = try await operators.session(token: token, logger: context.logger) else { return nil }
        return (token, session)
    }

    /// The request's session; without one, the browser is sent to the sign-in page.
    func session(_ request: Request, _ context: Context) async throws -> ConsoleSession {
        guard let (_, session) = try await optionalSession(request, context) else { throw Redirect(location: "/console/signin") }
        return session
    }

    /// The request's session and its form, refused (403) unless the form carries the session's CSRF token.
    func form(_ request: Request, _ context: Context) async throws -> (ConsoleSession, ConsoleForm) {
        let session = try await session(request, context)
        let form = try await Self.readForm(request)
        guard Self.same(form["csrf"], session.csrfToken) else { throw Self.csrfRefused }
        return (session, form)
    }

    static var csrfRefused: StratusError { StratusError(.accessDenied, "The form's CSRF token is missing or wrong; reload the page and send it again") }

    static func readForm(_ request: Request) async throws -> ConsoleForm {
        try ConsoleForm(try await RequestBody.read(request, limit: ConsoleForm.maxBytes))
    }

    /// Compares two tokens in time independent of where they differ.
    static func same(_ given: String?, _ expected: String) -> Bool {
        guard let given, !expected.isEmpty else { return false }
        let a = SHA256.hash(data: Data(given.utf8))
        let b = SHA256.hash(data: Data(expected.utf8))
        return a == b
    }

    /// Whether the request reached the console over TLS (here, or at a proxy that says so).
    func secure(_ request: Request) -> Bool {
        settings.secureCookies || request.headers[.init("X-Forwarded-Proto")!] == "https"
    }

    func cookie(_ name: String, _ value: String, maxAge: Int, _ request: Request) -> Cookie {
        Cookie(name: name, value: value, maxAge: maxAge, path: "/console", secure: secure(request), httpOnly: true, sameSite: .strict)
    }

    // MARK: Sign-in

    func signInForm(_ request: Request, error: StratusError?, login: String) -> Response {
        let token = APIToken.generate()
        var response = ConsolePage.render(
            "signin", title: "Sign in", status: error.map { .init(code: $0.code.httpStatus) } ?? .ok,
            ["csrf": token, "error": error?.reason as Any, "login": login])
        response.setCookie(cookie(Self.signInCookie, token, maxAge: 3600, request))
        if let retryAfter = error?.retryAfter { response.headers[.retryAfter] = "\(retryAfter)" }
        return response
    }

    func home(_ request: Request, _ context: Context) async throws -> Response {
        let session = try await session(request, context)
        let names = try await operators.containers(for: session.operator, limit: Self.maxContainers + 1, logger: context.logger)
        let shown = names.prefix(Self.maxContainers)
        return ConsolePage.render("home", title: "Containers", session: session, [
            "containers": shown.map { ["name": $0, "href": "/console/containers/\(ConsolePage.escape($0))"] },
            "more": names.count > Self.maxContainers, "shown": Self.maxContainers,
        ])
    }

    func signIn(_ request: Request, _ context: Context) async throws -> Response {
        let form = try await Self.readForm(request)
        guard let expected = request.cookies[Self.signInCookie]?.value, Self.same(form["csrf"], expected) else { throw Self.csrfRefused }
        let login = form["login"] ?? ""
        let password = form["password"] ?? ""
        guard login.utf8.count <= 255, password.utf8.count <= 1024 else {
            return signInForm(request, error: StratusError(.badRequest, "The login or the password is too long"), login: "")
        }
        let attempt: SignInLimiter.Attempt
        do {
            attempt = try signInLimiter.begin(container: Self.limiterNamespace, login: login, address: context.clientAddress)
        } catch {
            return signInForm(request, error: error, login: login)
        }
        guard let signedIn = try await operators.authenticate(login: login, password: password, logger: context.logger) else {
            context.logger.notice("console sign-in refused")
            return signInForm(request, error: StratusError(.authenticationFailed, "The login or the password is wrong"), login: login)
        }
        attempt.succeeded()
        let (token, session) = try await operators.openSession(for: signedIn, lifetime: settings.sessionLifetime, logger: context.logger)
        context.logger.info("console sign-in", metadata: ["operator": "\(signedIn.login)"])
        try await audit(.consoleSignIn, session: session, context)
        var response = ConsolePage.redirect("/console")
        let seconds = max(1, Int(session.expiresAt.timeIntervalSinceNow.rounded(.down)))
        response.setCookie(cookie(Self.sessionCookie, token, maxAge: seconds, request))
        response.setCookie(cookie(Self.signInCookie, "", maxAge: 0, request))
        return response
    }

    func signOut(_ request: Request, _ context: Context) async throws -> Response {
        guard let (token, session) = try await optionalSession(request, context) else { return ConsolePage.redirect("/console/signin") }
        let form = try await Self.readForm(request)
        guard Self.same(form["csrf"], session.csrfToken) else { throw Self.csrfRefused }
        try await operators.closeSession(token: token, logger: context.logger)
        try await audit(.consoleSignOut, session: session, context)
        var response = ConsolePage.redirect("/console/signin")
        response.setCookie(cookie(Self.sessionCookie, "", maxAge: 0, request))
        return response
    }
}
