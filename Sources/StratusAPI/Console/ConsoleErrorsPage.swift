import Foundation
import Hummingbird
import StratusCore

/// The latest error answers of this `stratus-api` process, searchable by request id (the
/// `X-Request-ID` a client quotes, or the `uuid` of its error dictionary). Only for an operator who
/// reaches every container: the paths name containers.
struct ConsoleErrorsPage<Context: StratusRequestContext>: Sendable {
    let routes: ConsoleRoutes<Context>

    /// Errors a page lists.
    static var pageSize: Int { 100 }

    func register(on router: Router<Context>) {
        router.get("/console/errors") { request, context in
            await routes.page(request, context) {
                let session = try await routes.session(request, context)
                try ConsoleOperationsPage<Context>.requireEveryContainer(session)
                let search = ConsoleDataPages<Context>.items(request)["requestID"]?.trimmingCharacters(in: .whitespaces).prefix(128)
                let requestID = search.flatMap { $0.isEmpty ? nil : String($0) }
                let time = ISO8601DateFormatter()
                let entries = routes.recentErrors.search(requestID: requestID, limit: Self.pageSize)
                var values: [String: Any] = [
                    "errors": entries.map { entry -> [String: Any] in
                        ["at": time.string(from: entry.at), "requestID": entry.requestID, "method": entry.method, "path": entry.path,
                         "status": entry.status, "code": entry.code, "reason": entry.reason]
                    },
                    "none": entries.isEmpty, "pageSize": Self.pageSize, "capacity": RecentErrors.capacity,
                ]
                if let requestID { values["requestID"] = requestID }
                return ConsolePage.render("errors", title: "Recent errors", session: session, crumbs: [("Containers", "/console")], values)
            }
        }
    }
}
