import Foundation
import Logging
import StratusCore
import StratusKafka
import StratusPostgres
import StratusWorkers

/// What the admin CLI does, as functions tests can call too.
public enum Admin {
    /// Applies pending migrations; returns their names.
    public static func migrate(_ configuration: StratusConfiguration, logger: Logger) async throws -> [String] {
        let migrations = try Migration.load(from: Migration.defaultDirectory())
        return try await StratusProcess.withStore(configuration, logger: logger) { store in
            try await Migrator(store: store, migrations: migrations).migrate(logger: logger)
        }
    }

    /// Marks events from an id unpublished; returns how many.
    public static func republish(from id: Int64, _ configuration: StratusConfiguration, logger: Logger) async throws -> Int {
        try await StratusProcess.withStore(configuration, logger: logger) { store in
            try await StratusProcess.verifyMigrated(store, logger: logger)
            return try await EventLog(store: store).republish(from: id, logger: logger)
        }
    }

    /// Rebuilds a worker from the event log; returns the number of events read.
    public static func replay(
        worker: String, _ configuration: StratusConfiguration, logger: Logger, progress: @escaping @Sendable (Rebuild.Progress) -> Void
    ) async throws -> Int {
        guard let projection = StratusProcess.projection(named: worker) else {
            throw ConfigurationProblem("unknown worker '\(worker)'; one of \(StratusProcess.workerNames.joined(separator: ", "))")
        }
        try StratusProcess.verifyKafkaLibrary()
        return try await StratusProcess.withStore(configuration, logger: logger) { store in
            try await StratusProcess.verifyMigrated(store, logger: logger)
            return try await Rebuild(projection: projection, store: store, kafka: configuration.kafka, topic: configuration.relay.topic)
                .run(logger: logger, progress: progress)
        }
    }

    /// Rebuilds the query index into a new generation and swaps it in.
    public static func reindex(
        _ configuration: StratusConfiguration, logger: Logger, progress: @escaping @Sendable (Rebuild.Progress) -> Void
    ) async throws -> (generation: Int, events: Int) {
        try await StratusProcess.withStore(configuration, logger: logger) { store in
            try await StratusProcess.verifyMigrated(store, logger: logger)
            return try await Reindex(store: store).run(logger: logger, progress: progress)
        }
    }

    /// Creates a container and an API token.
    public static func createContainer(_ container: String, label: String, _ configuration: StratusConfiguration, logger: Logger) async throws -> String {
        guard !container.isEmpty, container.utf8.count <= 255, !container.contains("/") else {
            throw ConfigurationProblem("a container identifier is 1 to 255 characters without '/'")
        }
        return try await StratusProcess.withStore(configuration, logger: logger) { store in
            try await StratusProcess.verifyMigrated(store, logger: logger)
            return try await ContainerStore(store: store).create(container: container, label: label, logger: logger)
        }
    }

    /// Issues a web auth token signed with the configured secret key.
    public static func webAuthToken(container: String, user: String?, days: Int, _ configuration: StratusConfiguration) -> String {
        let userRecordName = user ?? "_" + APIToken.generate().prefix(32)
        let expiresAt = Int64(Date().timeIntervalSince1970) + Int64(days) * 86_400
        return WebAuthToken(userRecordName: userRecordName, container: container, expiresAt: expiresAt).signed(with: configuration.api.secretKey)
    }
}
