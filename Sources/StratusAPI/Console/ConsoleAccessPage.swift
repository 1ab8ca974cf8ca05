import Foundation
import Hummingbird
import Logging
import StratusCore
import StratusPostgres

/// A container's access page: API tokens (create — shown once —, revoke), server-to-server keys
/// (register a public key, revoke) and the user directory (list, add a user, delete one).
struct ConsoleAccessPage<Context: StratusRequestContext>: Sendable {
    let routes: ConsoleRoutes<Context>
    var access: ConsoleAccess { ConsoleAccess(store: routes.data.store) }

    /// Entries each list shows.
    static var pageSize: Int { 50 }

    func register(on router: Router<Context>) {
        router.get("/console/access") { request, context in
            await routes.page(request, context) {
                let session = try await routes.session(request, context)
                let items = ConsoleDataPages<Context>.items(request)
                return try await page(try container(items, session), session: session, context: context, after: items["after"], notice: Self.notice(items["done"]))
            }
        }
        router.post("/console/access/tokens/create") { request, context in await routes.page(request, context) { try await createToken(request, context) } }
        router.post("/console/access/tokens/revoke") { request, context in
            await routes.page(request, context) {
                try await change(request, context, done: "token-revoked", action: .tokenRevoke) { container, form, logger in
                    let digest = form["digest"] ?? ""
                    guard try await access.revokeAPIToken(container: container, digest: digest, logger: logger) else {
                        throw StratusError(.notFound, "No such API token in this container")
                    }
                    return (digest, [])
                }
            }
        }
        router.post("/console/access/keys/create") { request, context in
            await routes.page(request, context) {
                try await change(request, context, done: "key-registered", action: .keyCreate) { container, form, logger in
                    let publicKey = try ServerPublicKey(text: try form.required("publicKey", label: "The public key"))
                    let label = String((form["label"] ?? "").prefix(255))
                    let key = try await ServerKeyStore(store: routes.data.store).register(container: container, publicKey: publicKey, label: label, logger: logger)
                    return (key.keyID, [("label", label)])
                }
            }
        }
        router.post("/console/access/keys/revoke") { request, context in
            await routes.page(request, context) {
                try await change(request, context, done: "key-revoked", action: .keyRevoke) { container, form, logger in
                    let keyID = form["keyID"] ?? ""
                    guard try await access.revokeServerKey(container: container, keyID: keyID, logger: logger) else {
                        throw StratusError(.notFound, "No such active key in this container")
                    }
                    return (keyID, [])
                }
            }
        }
        router.post("/console/access/users/create") { request, context in
            await routes.page(request, context) {
                try await change(request, context, done: "user-created", action: .userCreate) { container, form, logger in
                    let login = try form.required("login", label: "The login")
                    guard let password = form["password"], password.utf8.count <= 1024 else { throw StratusError(.badRequest, "The password is 8 to 1024 characters") }
                    let userRecordName = try await UserStore(store: routes.data.store).create(container: container, login: login, password: password, logger: logger)
                    return (login, [("userRecordName", userRecordName), ("identity", "none")])
                }
            }
        }
        router.post("/console/access/users/delete") { request, context in
            await routes.page(request, context) {
                try await change(request, context, done: "user-deletion-started", action: .userDelete) { container, form, logger in
                    // The job is recorded and the user signed out at once; stratus-gc's runner deletes the rest.
                    let user = try UserDeletion.validate(userRecordName: try form.required("userRecordName", label: "The user record name"))
                    let deletions = UserDeletionStore(store: routes.data.store)
                    _ = try await deletions.start(container: container, user: user, requestedBy: "console", logger: logger)
                    let progress = try await deletions.signOut(container: container, user: user, logger: logger)
                    return (user, [("step", progress.step.rawValue)])
                }
            }
        }
    }

    static func notice(_ done: String?) -> String? {
        switch done {
        case "token-revoked": "The API token was revoked."
        case "key-registered": "The key was registered."
        case "key-revoked": "The key was revoked."
        case "user-created": "The user was added."
        case "user-deletion-started": "The user is signed out; stratus-gc deletes the rest of their data (stratus user deletion shows how far it is)."
        case "sign-up-changed": "Sign-up was changed."
        case "invited": "The address was invited."
        case "uninvited": "The invitation was withdrawn."
        case "issuer-trusted": "The issuer is trusted."
        case "issuer-distrusted": "The issuer is no longer trusted."
        case "session-revoked": "The session was revoked."
        case "sessions-revoked": "Every session of the user was revoked."
        default: nil
        }
    }

    /// The container a page or form names, checked and reachable by the operator.
    func container(_ items: [String: String], _ session: ConsoleSession) throws(StratusError) -> String {
        try ConsoleDatabase.container(items["container"], session: session)
    }

    func link(_ container: String, _ more: String = "") -> String { "/console/access?container=\(ConsolePage.escape(container))\(more)" }

    func page(_ container: String, session: ConsoleSession, context: Context, after: String?, notice: String?, newToken: String? = nil) async throws -> Response {
        guard try await ContainerStore(store: routes.data.store).exists(container: container, logger: context.logger) else {
            throw StratusError(.notFound, "No container '\(container)'")
        }
        let time = ISO8601DateFormatter()
        let tokens = try await access.apiTokens(container: container, limit: Self.pageSize, logger: context.logger)
        let keys = try await access.serverKeys(container: container, limit: Self.pageSize, logger: context.logger)
        let users = try await access.users(container: container, after: after.map { String($0.prefix(255)) }, limit: Self.pageSize, logger: context.logger)
        var values: [String: Any] = [
            "container": container,
            "tokens": tokens.map { ["digest": $0.digest, "short": String($0.digest.prefix(12)), "label": $0.label, "created": time.string(from: $0.createdAt)] },
            "keys": keys.map { key -> [String: Any] in
                var entry: [String: Any] = ["keyID": key.keyID, "short": String(key.keyID.prefix(12)), "label": key.label, "created": time.string(from: key.createdAt)]
                if let revoked = key.revokedAt { entry["revoked"] = time.string(from: revoked) }
                return entry
            },
            "users": users.map {
                ["login": $0.login, "userRecordName": $0.userRecordName, "created": time.string(from: $0.createdAt),
                 "sessions": ConsoleIdentityPage<Context>.sessionsLink(container, user: $0.userRecordName)]
            },
            "identityLink": ConsoleIdentityPage<Context>.link(container),
            "pageSize": Self.pageSize,
        ]
        if let notice { values["notice"] = notice }
        if let newToken { values["newToken"] = newToken }
        if users.count == Self.pageSize, let last = users.last { values["moreUsers"] = link(container, "&after=\(ConsolePage.escape(last.login))") }
        return ConsolePage.render("access", title: "Access to \(container)", session: session, crumbs: [
            ("Containers", "/console"), (container, "/console/containers/\(ConsolePage.escape(container))"),
        ], values)
    }

    /// A new API token, shown on the page that answers the form and never again.
    func createToken(_ request: Request, _ context: Context) async throws -> Response {
        let (session, form) = try await routes.form(request, context)
        let container = try container(form.fields, session)
        guard try await ContainerStore(store: routes.data.store).exists(container: container, logger: context.logger) else {
            throw StratusError(.notFound, "No container '\(container)'")
        }
        let label = String((form["label"] ?? "").prefix(255))
        let token = try await ContainerStore(store: routes.data.store).create(container: container, label: label, logger: context.logger)
        context.logger.notice("console API token created", metadata: ["operator": "\(session.operator.login)", "container": "\(container)"])
        try await routes.audit(
            .tokenCreate, session: session, context, container: container,
            details: [("label", label), ("token", AuditEntry.hex(APIToken.digest(token)))])
        var response = try await page(container, session: session, context: context, after: nil, notice: "The API token was created.", newToken: token)
        response.status = .created
        return response
    }

    /// A form that changes something of a container, then back to the access page (or the page
    /// `back` names for the container and the form); `body` returns the audit entry's subject and details.
    func change(
        _ request: Request, _ context: Context, done: String, action: AuditAction, back: ((String, ConsoleForm) -> String)? = nil,
        _ body: (String, ConsoleForm, Logger) async throws -> (String, [(String, String)])
    ) async throws -> Response {
        let (session, form) = try await routes.form(request, context)
        let container = try container(form.fields, session)
        let (subject, details) = try await body(container, form, context.logger)
        // This process needs no notification to hear its own change: its cached answers go now
        // (the others' go when they hear it, within a second).
        routes.data.accessCache?.removeAll()
        try await routes.audit(action, session: session, context, container: container, subject: subject, details: details)
        context.logger.notice("console access change", metadata: ["operator": "\(session.operator.login)", "container": "\(container)", "change": "\(done)"])
        return ConsolePage.redirect((back?(container, form) ?? link(container)) + "&done=\(done)")
    }
}
