import Hummingbird
import StratusCore

/// The `{container}/{environment}/{database}` part of a CloudKit Web Services path.
struct DatabasePath: Sendable {
    var container: String
    var environment: StratusCore.Environment
    var scope: DatabaseScope

    /// Parses the path; `defaultScope` stands for a `database` segment the route does not have
    /// (the token and courier routes, which concern the user rather than one database).
    static func parse(_ context: some RequestContext, defaultScope: DatabaseScope? = nil) throws(StratusError) -> DatabasePath {
        guard let container = context.parameters.get("container"), !container.isEmpty, container.utf8.count <= 255 else {
            throw StratusError(.badRequest, "The path must name a container")
        }
        try ClientText.check(container, "The container in the path")
        guard let environment = context.parameters.get("environment").flatMap(StratusCore.Environment.init(rawValue:)) else {
            throw StratusError(.badRequest, "environment must be 'development' or 'production'")
        }
        guard let scope = context.parameters.get("database").flatMap(DatabaseScope.init(rawValue:)) ?? defaultScope else {
            throw StratusError(.badRequest, "database must be 'public', 'private' or 'shared'")
        }
        return DatabasePath(container: container, environment: environment, scope: scope)
    }
}
