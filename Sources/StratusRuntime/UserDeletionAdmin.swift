import Foundation
import Logging
import StratusCore
import StratusPostgres
import StratusWorkers

/// The admin CLI's side of deleting a user (`stratus user delete`, `stratus user deletion`).
extension Admin {
    /// The test-only setting that makes a deletion wait once that many zones are deleted, so a test
    /// can kill the process there: `STRATUS_TEST_DELETION_PAUSE_AFTER_ZONES`.
    public static func deletionPause(_ environment: [String: String] = ProcessInfo.processInfo.environment) throws -> Int? {
        try testPause("STRATUS_TEST_DELETION_PAUSE_AFTER_ZONES", environment)
    }

    /// A test-only pause setting (a count of zones or records after which a command waits, so that
    /// a test can kill it there): nil when unset.
    static func testPause(_ name: String, _ environment: [String: String] = ProcessInfo.processInfo.environment) throws -> Int? {
        guard let text = environment[name] else { return nil }
        guard let value = Int(text), (0...1_000_000).contains(value) else {
            throw ConfigurationProblem("\(name) must be a whole number from 0 to 1000000, got '\(ClientText.excerpt(text))'")
        }
        return value
    }

    /// Starts (or takes up again) a user's deletion and runs it to its end, reporting progress;
    /// the asset bytes go from the configured blob store.
    public static func deleteUser(
        container: String, user: String, requestedBy: String, pauseAfterZones: Int? = nil, _ configuration: StratusConfiguration, logger: Logger,
        progress: @escaping @Sendable (UserDeletion.Progress) -> Void
    ) async throws -> UserDeletion.Progress {
        let checked: String
        do { checked = try UserDeletion.validate(userRecordName: user) } catch { throw ConfigurationProblem(error.reason) }
        let blobs = configuration.blobStore.makeStore()
        return try await withMigratedStore(configuration, logger: logger) { store in
            let deletions = UserDeletionStore(store: store)
            do {
                _ = try await deletions.start(container: container, user: checked, requestedBy: requestedBy, logger: logger)
            } catch let error as StratusError {
                throw ConfigurationProblem(error.reason)
            }
            return try await deletions.run(
                container: container, user: checked, pauseAfterZones: pauseAfterZones, deleteBlob: UserDeletionRunner.blobDeleter(blobs, logger: logger),
                logger: logger, progress: progress)
        }
    }

    /// How far a user's deletion is; nil when none was started.
    public static func userDeletion(container: String, user: String, _ configuration: StratusConfiguration, logger: Logger) async throws -> UserDeletion.Progress? {
        try await withMigratedStore(configuration, logger: logger) { store in
            try await UserDeletionStore(store: store).progress(container: container, user: user, logger: logger)
        }
    }
}
