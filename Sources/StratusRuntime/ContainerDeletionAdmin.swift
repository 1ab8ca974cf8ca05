import Foundation
import Logging
import StratusCore
import StratusPostgres
import StratusWorkers

/// The admin CLI's side of deleting a container (`stratus container delete`, `stratus container deletion`).
extension Admin {
    /// The test-only setting that makes a container's deletion wait once that many users are
    /// deleted, so a test can kill the process there: `STRATUS_TEST_CONTAINER_DELETION_PAUSE_AFTER_USERS`.
    public static func containerDeletionPause(_ environment: [String: String] = ProcessInfo.processInfo.environment) throws -> Int? {
        try testPause("STRATUS_TEST_CONTAINER_DELETION_PAUSE_AFTER_USERS", environment)
    }

    /// Starts (or takes up again) a container's deletion and runs it to its end, reporting progress;
    /// the asset bytes go from the configured blob store.
    public static func deleteContainer(
        _ container: String, requestedBy: String, pauseAfterUsers: Int? = nil, _ configuration: StratusConfiguration, logger: Logger,
        progress: @escaping @Sendable (ContainerDeletion.Progress) -> Void
    ) async throws -> ContainerDeletion.Progress {
        let blobs = configuration.blobStore.makeStore()
        return try await withMigratedStore(configuration, logger: logger) { store in
            let deletions = ContainerDeletionStore(store: store)
            do {
                _ = try await deletions.start(container: container, requestedBy: requestedBy, logger: logger)
            } catch let error as StratusError {
                throw ConfigurationProblem(error.reason)
            }
            return try await deletions.run(
                container: container, pauseAfterUsers: pauseAfterUsers, deleteBlob: UserDeletionRunner.blobDeleter(blobs, logger: logger),
                logger: logger, progress: progress)
        }
    }

    /// How far a container's deletion is; nil when none was started.
    public static func containerDeletion(_ container: String, _ configuration: StratusConfiguration, logger: Logger) async throws -> ContainerDeletion.Progress? {
        try await withMigratedStore(configuration, logger: logger) { store in
            try await ContainerDeletionStore(store: store).progress(container: container, logger: logger)
        }
    }
}
