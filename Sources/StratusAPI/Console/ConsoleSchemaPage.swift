import Foundation
import Hummingbird
import Logging
import StratusCore
import StratusPostgres

/// A container's schema page: development and production side by side (record types, fields with
/// their types and index flags, roles and grants, the `.ckdb` text), and the two-step deploy to
/// production and reset of development — a first post shows what would change (or every problem,
/// refusing), a second post with the confirmation changes it through the same store calls the CLI uses.
struct ConsoleSchemaPage<Context: StratusRequestContext>: Sendable {
    let routes: ConsoleRoutes<Context>
    var schemas: SchemaStore { SchemaStore(store: routes.data.store) }

    /// The most record types a page lists per environment, and the most bytes of `.ckdb` text it shows.
    static var maxRecordTypes: Int { 300 }
    static var maxTextBytes: Int { 1_000_000 }
    /// The most role holders a page lists per environment.
    static var maxMembers: Int { 500 }

    /// A schema change the page offers: its form's path, the confirmation it posts, its words.
    enum Change: String, Sendable {
        case deploy, reset

        var title: String { self == .deploy ? "Deploy development to production" : "Reset development to production" }
    }

    func register(on router: Router<Context>) {
        router.get("/console/schema") { request, context in
            await routes.page(request, context) {
                let session = try await routes.session(request, context)
                let items = ConsoleDataPages<Context>.items(request)
                let container = try await existing(items["container"], session: session, context: context)
                return try await page(container, session: session, notice: Self.notice(items["done"]), context: context)
            }
        }
        router.post("/console/schema/deploy") { request, context in await routes.page(request, context) { try await change(.deploy, request, context) } }
        router.post("/console/schema/reset") { request, context in await routes.page(request, context) { try await change(.reset, request, context) } }
        router.post("/console/schema/roles") { request, context in await routes.page(request, context) { try await assignRole(request, context) } }
    }

    static func notice(_ done: String?) -> String? {
        switch done {
        case "deploy": "Development's schema was deployed to production."
        case "reset": "Development's schema is production's again and its records and zones are deleted."
        case "role-assigned": "The role was assigned."
        case "role-removed": "The role was taken away."
        default: nil
        }
    }

    static func link(_ container: String, _ more: String = "") -> String { "/console/schema?container=\(ConsolePage.escape(container))\(more)" }

    /// The container a page or form names: reachable by the operator, and existing.
    func existing(_ name: String?, session: ConsoleSession, context: Context) async throws -> String {
        let container = try ConsoleDatabase.container(name, session: session)
        guard try await ContainerStore(store: routes.data.store).exists(container: container, logger: context.logger) else {
            throw StratusError(.notFound, "No container '\(container)'")
        }
        return container
    }

    func crumbs(_ container: String) -> [(label: String, href: String)] {
        [("Containers", "/console"), (container, "/console/containers/\(ConsolePage.escape(container))")]
    }

    func page(_ container: String, session: ConsoleSession, notice: String?, context: Context) async throws -> Response {
        var environments: [[String: Any]] = []
        for environment in StratusCore.Environment.allCases {
            let schema = try await schemas.schema(container: container, environment: environment, logger: context.logger)
            let enforced = try await schemas.isEnforced(container: container, environment: environment, logger: context.logger)
            let members = try await schemas.roleMembers(container: container, environment: environment, limit: Self.maxMembers, logger: context.logger)
            environments.append(Self.values(schema, environment: environment, enforced: enforced, members: members))
        }
        return ConsolePage.render("schema", title: "Schema of \(container)", session: session, crumbs: crumbs(container), [
            "container": container, "environments": environments, "notice": notice as Any, "maxRecordTypes": Self.maxRecordTypes,
        ])
    }

    /// One environment's schema as the template shows it.
    static func values(_ schema: Schema, environment: StratusCore.Environment, enforced: Bool, members: [String: [String]]) -> [String: Any] {
        let state = switch (environment, enforced) {
        case (.development, _): "Grows with every save that brings a new record type or field."
        case (.production, true): "Enforced: saves and queries must fit this schema."
        case (.production, false): "Not deployed yet: nothing is enforced."
        }
        var text = SchemaLanguage.print(schema)
        let cut = text.utf8.count > maxTextBytes
        if cut { text = String(decoding: text.utf8.prefix(maxTextBytes), as: UTF8.self) }
        return [
            "name": environment.rawValue, "state": state, "ckdb": text, "cut": cut,
            "roles": schema.roles.map { role -> [String: Any] in ["role": role, "members": (members[role] ?? []).map { ["user": $0] }] }, "noRoles": schema.roles.isEmpty, "noTypes": schema.recordTypes.isEmpty,
            "more": schema.recordTypes.count > maxRecordTypes,
            "recordTypes": schema.recordTypes.prefix(maxRecordTypes).map { type -> [String: Any] in
                [
                    "type": type.name,
                    "fields": type.fields.map { field -> [String: Any] in
                        [
                            "field": field.name, "fieldType": field.type.description, "system": RecordTypeSchema.isSystemField(field.name),
                            // QUERYABLE, SEARCHABLE, SORTABLE as the schema language writes them.
                            "indexes": field.indexes.schemaWords.joined(separator: " "),
                        ]
                    },
                    "grants": type.grants.map { ["permissions": $0.permissions.schemaWords.joined(separator: ", "), "role": $0.role] },
                ]
            },
        ]
    }

    /// A deploy or reset: without `confirm` set to the change's name, only what it would do (or why
    /// it is refused); with it, the change itself.
    func change(_ change: Change, _ request: Request, _ context: Context) async throws -> Response {
        let (session, form) = try await routes.form(request, context)
        let container = try await existing(form["container"], session: session, context: context)
        guard form["confirm"] == change.rawValue else {
            return try await preview(change, container: container, session: session, context: context)
        }
        let causation = Causation(requestID: context.requestID)
        let outcome: SchemaStore.Outcome
        var details: [(String, String)] = []
        if change == .deploy {
            outcome = try await schemas.deploy(container: container, causation: causation, logger: context.logger)
        } else {
            // As `stratus schema reset`: development's data goes too.
            let report = try await DevelopmentReset(store: routes.data.store).run(container: container, causation: causation, logger: context.logger)
            context.logger.notice("console development reset", metadata: [
                "operator": "\(session.operator.login)", "container": "\(container)", "deleted": "\(report.summary.joined(separator: "; "))",
            ])
            outcome = report.schema
            details.append(("deleted", report.summary.joined(separator: " / ")))
        }
        switch outcome {
        case .applied(let schema):
            // The environment just changed gets the field indexes its schema asks for, as the CLI does.
            let changes = try await QueryFieldIndexes(store: routes.data.store).ensure(
                container: container, environment: change == .deploy ? .production : .development, logger: context.logger)
            context.logger.notice("console schema change", metadata: [
                "operator": "\(session.operator.login)", "container": "\(container)", "change": "\(change.rawValue)",
                "recordTypes": "\(schema.recordTypes.count)", "fieldIndexesBuilt": "\(changes.built.count)", "fieldIndexesDropped": "\(changes.dropped.count)",
            ])
            try await routes.audit(
                change == .deploy ? .schemaDeploy : .schemaReset, session: session, context, container: container,
                details: [("recordTypes", "\(schema.recordTypes.count)")] + details)
            return ConsolePage.redirect(Self.link(container, "&done=\(change.rawValue)"))
        case .refused(let problems):
            return refused(change, problems, container: container, session: session)
        }
    }

    /// The first step: the deploy check's result, and the confirmation form when nothing would be lost.
    func preview(_ change: Change, container: String, session: ConsoleSession, context: Context) async throws -> Response {
        let development = try await schemas.schema(container: container, environment: .development, logger: context.logger)
        let production = try await schemas.schema(container: container, environment: .production, logger: context.logger)
        let changes: [String]
        switch change {
        case .deploy:
            let problems = development.problems(replacing: production)
            guard problems.isEmpty else { return refused(change, problems, container: container, session: session) }
            changes = development.additions(to: production).map(\.description)
        case .reset:
            // What development's schema loses (and regains) in becoming production's again; its data goes.
            changes = production.problems(replacing: development).map(\.description) + production.additions(to: development).map(\.description)
        }
        return ConsolePage.render("schemaChange", title: change.title, session: session, crumbs: crumbs(container), [
            "container": container, "action": "/console/schema/\(change.rawValue)", "confirm": change.rawValue,
            "intro": change == .deploy
                ? "The additive check passed: production would keep every record type and field it has."
                : "Development's schema would be replaced by production's, and all of development's records and zones (in every database) deleted; production is not touched.",
            "changes": changes.prefix(Self.maxRecordTypes).map { ["text": $0] }, "noChanges": changes.isEmpty,
            "back": Self.link(container), "label": change.title,
        ])
    }

    /// A change refused with every problem (409): nothing changed.
    func refused(_ change: Change, _ problems: [SchemaChangeProblem], container: String, session: ConsoleSession) -> Response {
        ConsolePage.render("schemaChange", title: change.title, session: session, crumbs: crumbs(container), status: .conflict, [
            "container": container, "refused": true, "problems": problems.prefix(Self.maxRecordTypes).map { ["text": $0.description] },
            "back": Self.link(container),
        ])
    }

    /// Gives a user a custom role of an environment's schema, or with `remove` takes it away, as
    /// `stratus schema assign-role` does.
    func assignRole(_ request: Request, _ context: Context) async throws -> Response {
        let (session, form) = try await routes.form(request, context)
        let container = try await existing(form["container"], session: session, context: context)
        guard let environment = StratusCore.Environment(rawValue: form["environment"] ?? "") else {
            throw StratusError(.badRequest, "The environment is development or production")
        }
        let role = try form.required("role", label: "The role")
        guard role.utf8.count <= 255 else { throw StratusError(.badRequest, "The role is at most 255 bytes") }
        let user = try form.required("user", label: "The user record name")
        try Record.validate(recordName: user, "The user record name")
        let remove = form["remove"] == "true"
        guard !Schema.builtInRoles.contains(role),
              try await schemas.assignRole(role, to: user, remove: remove, container: container, environment: environment, logger: context.logger)
        else {
            throw StratusError(.notFound, "The \(environment.rawValue) schema creates no role '\(role)'")
        }
        context.logger.notice("console role change", metadata: [
            "operator": "\(session.operator.login)", "container": "\(container)", "environment": "\(environment.rawValue)", "remove": "\(remove)",
        ])
        try await routes.audit(
            remove ? .roleRemove : .roleAssign, session: session, context, container: container, subject: user,
            details: [("role", role), ("environment", environment.rawValue)])
        return ConsolePage.redirect(Self.link(container, remove ? "&done=role-removed" : "&done=role-assigned"))
    }
}
