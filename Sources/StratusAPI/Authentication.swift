import Foundation
import Hummingbird
import Logging
import StratusCore
import StratusPostgres

/// Who is calling: the container (from the API token) and, when signed in, the user.
struct Caller: Sendable {
    var container: String
    var userRecordName: String?
}

/// Checks `ckAPIToken` and `ckWebAuthToken`.
struct Authenticator: Sendable {
    let containers: ContainerStore
    let secretKey: SecretKey
    let signInURL: String

    func authenticate(_ request: Request, path: DatabasePath, logger: Logger) async throws -> Caller {
        let query = request.uri.queryParameters
        guard let apiToken = query["ckAPIToken"].map(String.init), !apiToken.isEmpty else {
            throw StratusError(.authenticationFailed, "Missing ckAPIToken")
        }
        guard let container = try await containers.container(forAPIToken: apiToken, logger: logger), container == path.container else {
            throw StratusError(.authenticationFailed, "ckAPIToken is not valid for container '\(path.container.prefix(255))'")
        }
        var caller = Caller(container: container)
        if let webToken = query["ckWebAuthToken"].map(String.init), !webToken.isEmpty {
            let now = Int64(Date().timeIntervalSince1970)
            caller.userRecordName = try WebAuthToken.verify(webToken, key: secretKey, container: container, now: now).userRecordName
        }
        return caller
    }

    /// The database the caller addresses; private and shared databases need a signed-in user.
    func database(for caller: Caller, path: DatabasePath) throws(StratusError) -> DatabaseID {
        switch path.scope {
        case .public:
            return DatabaseID(container: path.container, environment: path.environment, scope: .public, owner: DatabaseID.publicOwner)
        case .private, .shared:
            guard let user = caller.userRecordName else {
                throw StratusError(.authenticationRequired, "Sign in to use the \(path.scope.rawValue) database", redirectURL: signInURL)
            }
            return DatabaseID(container: path.container, environment: path.environment, scope: path.scope, owner: user)
        }
    }
}
