import Foundation
import Hummingbird
import Logging
import StratusCore

/// What every database operation starts with: the path, the caller, the target the caller may
/// address (made once here: handlers resolve zones through it, never from the scope), and the body
/// (read once, capped, after authentication).
struct DatabaseCall {
    var path: DatabasePath
    var body: Data
    var caller: Caller
    var target: CallTarget

    /// The database as the caller addresses it.
    var database: DatabaseID { target.addressed }

    static func open(
        _ request: Request, context: some StratusRequestContext, authenticator: Authenticator, limits: APILimits, access: DatabaseAccess,
        defaultScope: DatabaseScope? = nil
    ) async throws -> DatabaseCall {
        let path = try DatabasePath.parse(context, defaultScope: defaultScope)
        // The body is read only once the caller is known (or, for a signed request, its key and
        // date check out), so a client that cannot authenticate never makes the server buffer it.
        let identified = try await authenticator.identify(request, path: path, logger: context.logger)
        var database: DatabaseID?
        if case .caller(let caller) = identified {
            authenticator.requestMetrics?.request(caller.container)
            database = try authenticator.database(for: caller, path: path, access: access)
            // A known caller over its rate is refused before its body is read.
            try await authenticator.limiter.admit(caller, logger: context.logger)
        }
        let body = try await RequestBody.read(request, limit: limits.maxRequestBytes)
        let caller = try authenticator.verify(identified, body: body)
        // A signed request's caller is known only once its signature checks out.
        if case .signed = identified {
            authenticator.requestMetrics?.request(caller.container)
            try await authenticator.limiter.admit(caller, logger: context.logger)
        }
        let addressed = try database ?? authenticator.database(for: caller, path: path, access: access)
        return DatabaseCall(path: path, body: body, caller: caller, target: CallTarget(addressed: addressed))
    }
}
