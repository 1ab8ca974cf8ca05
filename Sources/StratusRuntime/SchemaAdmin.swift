import Foundation
import Logging
import StratusCore
import StratusPostgres

extension Admin {
    /// What `stratus schema` reports when a change is refused: every problem, one per line.
    static func refusal(_ action: String, _ problems: [SchemaChangeProblem]) -> ConfigurationProblem {
        ConfigurationProblem("\(action) refused: it would lose data production holds:\n" + problems.map { "  \($0)" }.joined(separator: "\n"))
    }

    /// An environment's schema in CloudKit's schema language.
    public static func exportSchema(
        container: String, environment: Environment, _ configuration: StratusConfiguration, logger: Logger
    ) async throws -> String {
        try await withSchemas(container: container, configuration, logger: logger) { schemas in
            SchemaLanguage.print(try await schemas.schema(container: container, environment: environment, logger: logger))
        }
    }

    /// Makes a schema file development's schema, if it only adds to production's; returns the schema.
    /// A file that cannot be read is refused with its line and column.
    public static func importSchema(
        container: String, text: String, source: String, _ configuration: StratusConfiguration, logger: Logger
    ) async throws -> Schema {
        let schema: Schema
        do {
            schema = try SchemaLanguage.parse(text)
        } catch {
            throw ConfigurationProblem("\(source): \(error)")
        }
        return try await withSchemas(container: container, configuration, logger: logger) { schemas in
            switch try await schemas.importSchema(schema, container: container, causation: causation(), logger: logger) {
            case .applied(let imported): return imported
            case .refused(let problems): throw refusal("import", problems)
            }
        }
    }

    /// Copies development's schema to production if that only adds; returns the deployed schema.
    public static func deploySchema(container: String, _ configuration: StratusConfiguration, logger: Logger) async throws -> Schema {
        try await withSchemas(container: container, configuration, logger: logger) { schemas in
            switch try await schemas.deploy(container: container, causation: causation(), logger: logger) {
            case .applied(let deployed): return deployed
            case .refused(let problems): throw refusal("deploy", problems)
            }
        }
    }

    /// Resets development as CloudKit does: its schema becomes production's and its data (every
    /// custom zone and every default zone's record, in every database) is deleted, in batches,
    /// through the write path. Returns what it did; production is never touched.
    public static func resetDevelopment(container: String, _ configuration: StratusConfiguration, logger: Logger) async throws -> DevelopmentReset.Report {
        try await withContainer(container, configuration, logger: logger) { store in
            let report = try await DevelopmentReset(store: store).run(container: container, causation: causation(), logger: logger)
            if case .refused(let problems) = report.schema { throw refusal("reset", problems) }
            return report
        }
    }

    /// Builds the field indexes the environment's schema asks for and drops those it no longer does
    /// (`QueryFieldIndexes`); the schema commands run it after each change.
    public static func buildFieldIndexes(
        container: String, environment: Environment, _ configuration: StratusConfiguration, logger: Logger
    ) async throws -> QueryFieldIndexes.Changes {
        try await withMigratedStore(configuration, logger: logger) { store in
            guard try await ContainerStore(store: store).exists(container: container, logger: logger) else {
                throw ConfigurationProblem("no container '\(container)'")
            }
            return try await QueryFieldIndexes(store: store).ensure(container: container, environment: environment, logger: logger)
        }
    }

    /// Assigns a custom role of an environment's schema to a user (a user record name; a server key
    /// acts as its own), or takes it away.
    public static func assignRole(
        _ role: String, to user: String, remove: Bool, container: String, environment: Environment, _ configuration: StratusConfiguration, logger: Logger
    ) async throws {
        guard !Schema.builtInRoles.contains(role) else { throw ConfigurationProblem("\(role) is built in: it is never assigned") }
        guard !user.isEmpty, user.utf8.count <= 255 else { throw ConfigurationProblem("a user record name is 1 to 255 bytes") }
        try await withSchemas(container: container, configuration, logger: logger) { schemas in
            guard try await schemas.assignRole(role, to: user, remove: remove, container: container, environment: environment, logger: logger) else {
                throw ConfigurationProblem("the \(environment.rawValue) schema of '\(container)' creates no role '\(role)'")
            }
        }
    }

    private static func causation() -> Causation { Causation(requestID: "stratus-schema-" + UUID().uuidString.lowercased()) }

    private static func withSchemas<T: Sendable>(
        container: String, _ configuration: StratusConfiguration, logger: Logger, _ body: @Sendable (SchemaStore) async throws -> T
    ) async throws -> T {
        try await withContainer(container, configuration, logger: logger) { store in try await body(SchemaStore(store: store)) }
    }

    private static func withContainer<T: Sendable>(
        _ container: String, _ configuration: StratusConfiguration, logger: Logger, _ body: @Sendable (PostgresStore) async throws -> T
    ) async throws -> T {
        try await withMigratedStore(configuration, logger: logger) { store in
            guard try await ContainerStore(store: store).exists(container: container, logger: logger) else {
                throw ConfigurationProblem("no container '\(container)'")
            }
            return try await body(store)
        }
    }
}
