import Foundation
import Logging
import StratusAPI
import StratusCore
import StratusPostgres

/// The admin CLI's side of export and import (`stratus export`, `stratus import`;
/// docs/operations.md, "Exporting and importing").
extension Admin {
    /// Exports a container, or one user's data in it, into an archive file (asset bytes from the
    /// configured blob store).
    public static func exportArchive(
        container: String, user: String?, file: String, _ configuration: StratusConfiguration, logger: Logger
    ) async throws -> ArchiveExport.Summary {
        let blobs = configuration.blobStore.makeStore()
        return try await withMigratedStore(configuration, logger: logger) { store in
            do {
                let pause = try testPause("STRATUS_TEST_EXPORT_PAUSE_AFTER_RECORDS")
                return try await ArchiveExport(store: store, blobs: blobs, pauseAfterRecords: pause).run(
                    container: container, user: user, file: file, createdAt: Int64(Date().timeIntervalSince1970 * 1000), logger: logger)
            } catch let error as StratusError {
                throw ConfigurationProblem(error.reason)
            }
        }
    }

    /// Checks an archive whole, then loads it into `container` (default: the one it was exported
    /// from) with each archived user renamed by `mappings` (`old=new`); asset bytes go to the
    /// configured blob store. A refused archive loads nothing.
    public static func importArchive(
        file: String, container: String?, mappings: [String], _ configuration: StratusConfiguration, logger: Logger,
        progress: @escaping @Sendable (String) -> Void
    ) async throws -> ArchiveImport.Summary {
        let blobs = configuration.blobStore.makeStore()
        return try await withMigratedStore(configuration, logger: logger) { store in
            do {
                let mapping = try ArchiveUserMapping(pairs: mappings)
                let archive = ArchiveImport(store: store, blobs: blobs, pauseAfterRecords: try testPause("STRATUS_TEST_IMPORT_PAUSE_AFTER_RECORDS"))
                let verified = try await archive.verify(path: file, logger: logger)
                progress("checked: \(verified.manifest.files.count) files, \(verified.records) records, exported from \(verified.manifest.container)")
                return try await archive.load(verified, into: container, mapping: mapping, logger: logger, progress: progress)
            } catch let error as StratusError {
                throw ConfigurationProblem(error.reason)
            }
        }
    }
}
