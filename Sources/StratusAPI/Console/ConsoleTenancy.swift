import Foundation
import Hummingbird
import Logging
import StratusCore
import StratusPostgres

/// A container as a tenant, on its page of the console: its state, what it holds, its own limits,
/// the heir of its public records, the web origins allowed to call it; forms suspend and resume it
/// and change its limits, heir and origins, each appending the audit entry its CLI command appends
/// (`container.suspend`, `container.resume`, `container.settings`).
struct ConsoleTenancy<Context: StratusRequestContext>: Sendable {
    let routes: ConsoleRoutes<Context>
    var access: ConsoleAccessPage<Context> { ConsoleAccessPage(routes: routes) }
    var containers: ContainerStore { ContainerStore(store: routes.data.store) }

    /// The container's page, where each form returns to.
    static func link(_ container: String) -> String { "/console/containers/\(ConsolePage.escape(container))?tenancy" }

    func register(on router: Router<Context>) {
        let back: @Sendable (String, ConsoleForm) -> String = { container, _ in Self.link(container) }
        router.post("/console/tenancy/suspend") { request, context in await suspension(request, context, true, back: back) }
        router.post("/console/tenancy/resume") { request, context in await suspension(request, context, false, back: back) }
        router.post("/console/tenancy/limits") { request, context in
            await routes.page(request, context) {
                try await access.change(request, context, done: "limits-changed", action: .containerSettings, back: back) { container, form, logger in
                    guard var limits = try await containers.limits(of: container, logger: logger) else {
                        throw StratusError(.notFound, "No container '\(ClientText.excerpt(container))'")
                    }
                    var details: [(String, String)] = []
                    for setting in ContainerLimits.Setting.allCases {
                        guard let text = form[setting.rawValue], text != limits.text(of: setting) else { continue }
                        try limits.set(setting, text)
                        details.append((setting.rawValue, limits.text(of: setting)))
                    }
                    try await containers.setLimits(of: container, limits, logger: logger)
                    let heir = try await containers.publicRecordsHeir(container: container, logger: logger) ?? "none"
                    if let text = form["public-records-heir"], text != heir {
                        _ = try await containers.setPublicRecordsHeir(container: container, heir: try UserDeletion.validate(heir: text), logger: logger)
                        details.append(("publicRecordsHeir", text))
                    }
                    return ("", details)
                }
            }
        }
        // As `stratus container delete`: the form's confirmation names the container. The job starts
        // here (every API process refuses the container's requests from its commit); stratus-gc's
        // runner, or the CLI run again, carries it out.
        router.post("/console/tenancy/delete") { request, context in
            await routes.page(request, context) {
                try await access.change(request, context, done: "deleting", action: .containerDelete, back: back) { container, form, logger in
                    guard form["confirm"]?.trimmingCharacters(in: .whitespaces) == container else {
                        throw StratusError(.badRequest, "Type the container's identifier to confirm its deletion; nothing was deleted")
                    }
                    let progress = try await ContainerDeletionStore(store: routes.data.store).start(
                        container: container, requestedBy: "console", logger: logger)
                    return ("", [("step", progress.step.rawValue)])
                }
            }
        }
        // As `stratus container set --allowed-origin`: one origin a line, or `*` alone for any.
        router.post("/console/tenancy/origins") { request, context in
            await routes.page(request, context) {
                try await access.change(request, context, done: "origins-changed", action: .containerSettings, back: back) { container, form, logger in
                    let origins = try AllowedOrigins.validated(try Self.origins(form["allowed-origins"] ?? ""))
                    guard try await containers.setAllowedOrigins(container: container, origins: origins, logger: logger) else {
                        throw StratusError(.notFound, "No container '\(ClientText.excerpt(container))'")
                    }
                    return ("", [("allowedOrigins", Self.text(origins))])
                }
            }
        }
    }

    /// The longest origins field read.
    static var maxOriginsText: Int { 8 * 1024 }

    /// The origins a form's field lists: one a line (commas and spaces separate them too); a
    /// blank field is refused, since `*` is how any origin is allowed again.
    static func origins(_ text: String) throws(StratusError) -> [String] {
        guard text.utf8.count <= maxOriginsText else { throw StratusError(.badRequest, "the origins are longer than \(maxOriginsText) bytes") }
        let origins = text.split(whereSeparator: { $0 == "," || $0.isWhitespace }).map(String.init)
        guard !origins.isEmpty else { throw StratusError(.badRequest, "list at least one origin (scheme://host[:port]), or * alone for any origin") }
        return origins
    }

    /// A container's origins as the form and the audit log show them: one a line, or `*`.
    static func text(_ origins: [String]?) -> String { origins?.joined(separator: "\n") ?? "*" }

    /// Suspends or resumes the form's container.
    func suspension(_ request: Request, _ context: Context, _ suspended: Bool, back: @escaping @Sendable (String, ConsoleForm) -> String) async -> Response {
        await routes.page(request, context) {
            try await access.change(
                request, context, done: suspended ? "suspended" : "resumed", action: suspended ? .containerSuspend : .containerResume, back: back
            ) { container, form, logger in
                guard try await containers.setSuspended(container: container, suspended, logger: logger) else {
                    throw StratusError(.notFound, "No container '\(ClientText.excerpt(container))'")
                }
                return ("", suspended ? [("reason", String((form["reason"] ?? "").prefix(255)))] : [])
            }
        }
    }

    static func notice(_ done: String?) -> String? {
        switch done {
        case "suspended": "The container is suspended: every API process refuses its requests."
        case "resumed": "The container serves again."
        case "limits-changed": "The limits were changed: every API process applies them from its next request."
        case "origins-changed": "The allowed origins were changed: every API process applies them within 5 seconds."
        case "deleting": "The container is being deleted: every API process refuses its requests; stratus-gc deletes its data, then the container."
        default: nil
        }
    }

    /// The values the container's page shows of the container as a tenant.
    func values(_ container: String, logger: Logger) async throws -> [String: Any] {
        guard let usage = try await containers.usage(of: container, limit: 1, logger: logger).first,
              let limits = try await containers.limits(of: container, logger: logger)
        else { throw StratusError(.notFound, "No container '\(ClientText.excerpt(container))'") }
        let time = ISO8601DateFormatter()
        var values: [String: Any] = [
            "usage": [
                ["name": "users", "value": usage.users], ["name": "zones", "value": usage.zones], ["name": "records", "value": usage.records],
                ["name": "record bytes", "value": usage.recordBytes], ["name": "assets", "value": usage.assets],
                ["name": "asset bytes", "value": usage.assetBytes], ["name": "subscriptions", "value": usage.subscriptions],
            ],
            "limits": ContainerLimits.Setting.allCases.map { ["name": $0.rawValue, "value": limits.text(of: $0)] },
            "publicRecordsHeir": try await containers.publicRecordsHeir(container: container, logger: logger) ?? "none",
        ]
        if let origins = try await containers.allowedOrigins(container: container, logger: logger) {
            values["allowedOrigins"] = Self.text(origins)
        }
        if let suspended = usage.suspendedAt { values["suspendedAt"] = time.string(from: suspended) }
        if let deleting = usage.deletingAt {
            values["deletingAt"] = time.string(from: deleting)
            values["deletion"] = try await ContainerDeletionStore(store: routes.data.store).progress(container: container, logger: logger)?.line ?? "starting"
        }
        return values
    }
}
