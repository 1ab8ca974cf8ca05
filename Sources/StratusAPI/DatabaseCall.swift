import Foundation
import Hummingbird
import Logging
import StratusCore

/// What every database operation starts with: the path, the body (read once, capped), the caller,
/// and the database the caller may address.
struct DatabaseCall {
    var path: DatabasePath
    var body: Data
    var caller: Caller
    var database: DatabaseID

    static func open(
        _ request: Request, context: some StratusRequestContext, authenticator: Authenticator, limits: APILimits, access: DatabaseAccess
    ) async throws -> DatabaseCall {
        let path = try DatabasePath.parse(context)
        let body = try await RequestBody.read(request, limit: limits.maxRequestBytes)
        let caller = try await authenticator.authenticate(request, body: body, path: path, logger: context.logger)
        let database = try authenticator.database(for: caller, path: path, access: access)
        return DatabaseCall(path: path, body: body, caller: caller, database: database)
    }
}
