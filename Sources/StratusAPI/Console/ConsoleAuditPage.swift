import Foundation
import Hummingbird
import StratusCore
import StratusPostgres

/// The audit log (`/console/audit`): administrative actions of the CLI and the console, newest
/// first, filtered by container, actor and action. Only for an operator who reaches every
/// container: entries span every tenant, and the deployment's own actions name none.
struct ConsoleAuditPage<Context: StratusRequestContext>: Sendable {
    let routes: ConsoleRoutes<Context>

    /// Entries a page lists.
    static var pageSize: Int { 50 }

    func register(on router: Router<Context>) {
        router.get("/console/audit") { request, context in await routes.page(request, context) { try await page(request, context) } }
    }

    func page(_ request: Request, _ context: Context) async throws -> Response {
        let session = try await routes.session(request, context)
        try ConsoleOperationsPage<Context>.requireEveryContainer(session)
        let items = ConsoleDataPages<Context>.items(request)
        func filter(_ name: String) -> String? {
            items[name].map { AuditEntry.bounded($0.trimmingCharacters(in: .whitespaces), AuditEntry.maxNameLength) }.flatMap { $0.isEmpty ? nil : $0 }
        }
        let action = filter("action")
        if let action, AuditAction(rawValue: action) == nil {
            throw StratusError(.badRequest, "No action '\(ClientText.excerpt(action))'")
        }
        var before: Int64?
        if let text = filter("before") {
            guard let value = Int64(text), value > 0 else { throw StratusError(.badRequest, "'before' is a positive sequence number") }
            before = value
        }
        let search = AuditLog.Filter(container: filter("container"), actor: filter("actor"), action: action, before: before)
        let entries = try await routes.auditLog.entries(search, limit: Self.pageSize, logger: context.logger)
        let time = ISO8601DateFormatter()
        var values: [String: Any] = [
            "entries": entries.map { entry -> [String: Any] in
                ["sequence": entry.sequence, "at": time.string(from: entry.recordedAt), "channel": entry.channel, "actor": entry.actor,
                 "origin": entry.origin, "requestID": entry.requestID, "action": entry.action, "container": entry.container,
                 "subject": entry.subject, "details": entry.details]
            },
            "none": entries.isEmpty, "pageSize": Self.pageSize,
            "container": search.container as Any, "actor": search.actor as Any,
            "actions": AuditAction.allCases.map { ["name": $0.rawValue, "selected": $0.rawValue == action] },
        ]
        if entries.count == Self.pageSize, let last = entries.last {
            let kept = [("container", search.container), ("actor", search.actor), ("action", action)].compactMap { name, value in
                value.map { "&\(name)=\(ConsolePage.escape($0))" }
            }
            values["older"] = "/console/audit?before=\(last.sequence)" + kept.joined()
        }
        return ConsolePage.render("audit", title: "Audit log", session: session, crumbs: [("Containers", "/console")], values)
    }
}
