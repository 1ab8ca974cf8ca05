import Foundation
import Hummingbird
import Logging
import StratusCore
import StratusPostgres

/// A container's sign-in page of the console: who may sign up by email, the invitations, the issuers
/// it trusts for ID-token sign-in (list, add, remove); and a user's sessions (list, revoke one,
/// revoke all). Every form appends its audit entry, as the matching CLI command does.
struct ConsoleIdentityPage<Context: StratusRequestContext>: Sendable {
    let routes: ConsoleRoutes<Context>
    var access: ConsoleAccessPage<Context> { ConsoleAccessPage(routes: routes) }
    var signUps: EmailSignUpStore { EmailSignUpStore(store: routes.data.store) }
    var identities: IdentityStore { IdentityStore(store: routes.data.store) }
    var sessions: SessionStore { SessionStore(store: routes.data.store) }

    static func link(_ container: String) -> String { "/console/access/identity?container=\(ConsolePage.escape(container))" }

    static func sessionsLink(_ container: String, user: String) -> String {
        "/console/access/sessions?container=\(ConsolePage.escape(container))&user=\(ConsolePage.escape(user))"
    }

    func register(on router: Router<Context>) {
        router.get("/console/access/identity") { request, context in
            await routes.page(request, context) {
                let session = try await routes.session(request, context)
                let items = ConsoleDataPages<Context>.items(request)
                return try await page(try access.container(items, session), session: session, context: context, notice: ConsoleAccessPage<Context>.notice(items["done"]))
            }
        }
        router.get("/console/access/sessions") { request, context in
            await routes.page(request, context) {
                let session = try await routes.session(request, context)
                let items = ConsoleDataPages<Context>.items(request)
                let container = try access.container(items, session)
                return try await sessionsPage(container, user: try Self.user(items["user"]), session: session, context: context,
                                              notice: ConsoleAccessPage<Context>.notice(items["done"]))
            }
        }
        let back: @Sendable (String, ConsoleForm) -> String = { container, _ in Self.link(container) }
        router.post("/console/access/sign-up") { request, context in
            await routes.page(request, context) {
                try await access.change(request, context, done: "sign-up-changed", action: .containerSettings, back: back) { container, form, logger in
                    let mode = try SignUpMode.parse(form["mode"] ?? "")
                    try await signUps.setMode(container: container, mode, logger: logger)
                    return ("", [("signUp", mode.rawValue)])
                }
            }
        }
        router.post("/console/access/invitations/create") { request, context in
            await routes.page(request, context) {
                try await access.change(request, context, done: "invited", action: .signUpInvite, back: back) { container, form, logger in
                    let email = try EmailAddress.validate(form["email"] ?? "")
                    _ = try await signUps.invite(container: container, email: email, logger: logger)
                    return (email.lowercased(), [])
                }
            }
        }
        router.post("/console/access/invitations/remove") { request, context in
            await routes.page(request, context) {
                try await access.change(request, context, done: "uninvited", action: .signUpUninvite, back: back) { container, form, logger in
                    let email = try EmailAddress.validate(form["email"] ?? "")
                    guard try await signUps.uninvite(container: container, email: email, logger: logger) else {
                        throw StratusError(.notFound, "'\(ClientText.excerpt(email))' is not invited")
                    }
                    return (email.lowercased(), [])
                }
            }
        }
        router.post("/console/access/issuers/add") { request, context in
            await routes.page(request, context) {
                try await access.change(request, context, done: "issuer-trusted", action: .issuerTrust, back: back) { container, form, logger in
                    let audiences = (form["audiences"] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
                    let optional = { (name: String) in form[name].map { $0.trimmingCharacters(in: .whitespaces) }.flatMap { $0.isEmpty ? nil : $0 } }
                    let issuer = TrustedIssuer(
                        issuer: try form.required("issuer", label: "The issuer"), keySetURL: try form.required("jwksURL", label: "The key set URL"),
                        audiences: audiences, webClientID: optional("webClientID"), authorizationURL: optional("authorizationURL"),
                        redirectURL: optional("redirectURL"), tokenURL: optional("tokenURL"), clientSecret: optional("clientSecret"))
                    try await identities.trust(container: container, issuer, sealingWith: routes.data.secretKey, logger: logger)
                    var details = [("jwksURL", issuer.keySetURL), ("audiences", audiences.joined(separator: ","))]
                    for name in ["webClientID", "authorizationURL", "redirectURL", "tokenURL"] { if let value = optional(name) { details.append((name, value)) } }
                    // The secret itself is never audited: only that one is set.
                    if optional("clientSecret") != nil { details.append(("clientSecret", "set")) }
                    return (issuer.issuer, details)
                }
            }
        }
        router.post("/console/access/issuers/remove") { request, context in
            await routes.page(request, context) {
                try await access.change(request, context, done: "issuer-distrusted", action: .issuerDistrust, back: back) { container, form, logger in
                    let issuer = form["issuer"] ?? ""
                    guard try await identities.distrust(container: container, issuer: issuer, logger: logger) else {
                        throw StratusError(.notFound, "This container does not trust '\(ClientText.excerpt(issuer))'")
                    }
                    return (issuer, [])
                }
            }
        }
        let backToSessions: @Sendable (String, ConsoleForm) -> String = { container, form in Self.sessionsLink(container, user: form["user"] ?? "") }
        router.post("/console/access/sessions/revoke") { request, context in
            await routes.page(request, context) {
                try await access.change(request, context, done: "session-revoked", action: .sessionRevoke, back: backToSessions) { container, form, logger in
                    let user = try Self.user(form["user"])
                    let sessionID = try Session.validateID(form["sessionID"] ?? "")
                    guard try await sessions.revoke(container: container, userRecordName: user, sessionID: sessionID, logger: logger) else {
                        throw StratusError(.notFound, "The user has no session '\(sessionID)'")
                    }
                    return (sessionID, [("user", user)])
                }
            }
        }
        router.post("/console/access/sessions/revoke-all") { request, context in
            await routes.page(request, context) {
                try await access.change(request, context, done: "sessions-revoked", action: .sessionRevokeAll, back: backToSessions) { container, form, logger in
                    let user = try Self.user(form["user"])
                    let revoked = try await sessions.revokeAll(container: container, userRecordName: user, logger: logger)
                    return (user, [("sessions", "\(revoked)")])
                }
            }
        }
    }

    /// A user record name a page or form names: `_` and at most 255 bytes.
    static func user(_ text: String?) throws(StratusError) -> String {
        guard let text, text.hasPrefix("_"), text.utf8.count <= 255 else {
            throw StratusError(.badRequest, "The user is a user record name (_…)")
        }
        try ClientText.check(text, "The user")
        return text
    }

    func page(_ container: String, session: ConsoleSession, context: Context, notice: String?) async throws -> Response {
        let mode = try await signUps.mode(container: container, logger: context.logger)
        let invitations = try await signUps.invitations(container: container, limit: ConsoleAccessPage<Context>.pageSize * 4, logger: context.logger)
        let issuers = try await identities.trustedIssuers(container: container, logger: context.logger)
        var values: [String: Any] = [
            "container": container,
            "signUp": mode.rawValue,
            "sendsEmail": routes.sendsEmail,
            "modes": SignUpMode.allCases.map { ["name": $0.rawValue, "selected": $0 == mode] as [String: Any] },
            "invitations": invitations.map { ["email": $0] },
            "issuers": issuers.map { issuer in
                let flow = issuer.tokenURL.map { url in ", the code flow with PKCE through \(url)" + (issuer.hasClientSecret ? " (with a client secret)" : "") } ?? ""
                let web = issuer.webClientID.map { client in "client id \(client)" + (issuer.authorizationURL.map { url in ", \(url)" } ?? "") + flow }
                return ["issuer": issuer.issuer, "keySetURL": issuer.keySetURL, "audiences": issuer.audiences.joined(separator: ", "), "web": web ?? "from the app only"]
            },
        ]
        if let notice { values["notice"] = notice }
        return ConsolePage.render("identity", title: "Sign-in to \(container)", session: session, crumbs: [
            ("Containers", "/console"), (container, "/console/containers/\(ConsolePage.escape(container))"), ("Access", access.link(container)),
        ], values)
    }

    func sessionsPage(_ container: String, user: String, session: ConsoleSession, context: Context, notice: String?) async throws -> Response {
        let time = ISO8601DateFormatter()
        let now = Int64(Date().timeIntervalSince1970)
        let found = try await sessions.list(container: container, userRecordName: user, logger: context.logger)
        func date(_ seconds: Int64) -> String { time.string(from: Date(timeIntervalSince1970: TimeInterval(seconds))) }
        var values: [String: Any] = [
            "container": container,
            "user": user,
            "sessions": found.map { entry -> [String: Any] in
                var row: [String: Any] = [
                    "sessionID": entry.sessionID, "method": entry.method.rawValue, "created": date(entry.createdAt), "expires": date(entry.expiresAt),
                    "active": entry.isActive(now: now),
                ]
                if let issuer = entry.issuer { row["issuer"] = issuer }
                if let revoked = entry.revokedAt { row["revoked"] = date(revoked) }
                return row
            },
        ]
        if let notice { values["notice"] = notice }
        return ConsolePage.render("sessions", title: "Sessions of \(user)", session: session, crumbs: [
            ("Containers", "/console"), (container, "/console/containers/\(ConsolePage.escape(container))"), ("Access", access.link(container)),
        ], values)
    }
}
