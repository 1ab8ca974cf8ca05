import Foundation
import Logging
import ServiceLifecycle
import StratusBlobStore
import StratusCore
import StratusPostgres

/// Takes up users' deletions that were started and not finished — a user's own request (the API
/// records the job and signs them out), or an operator's `stratus user delete` that stopped — and
/// runs each to its end; so too containers' deletions (`ContainerDeletion`: the console starts them,
/// or a `stratus container delete` stopped). Runs inside stratus-gc, which holds the blob store. A
/// job another process is running (its advisory lock) is left to it.
public struct UserDeletionRunner: Service {
    let deletions: UserDeletionStore
    let containerDeletions: ContainerDeletionStore
    let blobs: any BlobStore
    let interval: Duration
    let logger: Logger

    /// Creates the runner.
    public init(store: PostgresStore, blobs: any BlobStore, interval: Duration = .seconds(10), logger: Logger) {
        self.deletions = UserDeletionStore(store: store)
        self.containerDeletions = ContainerDeletionStore(store: store)
        self.blobs = blobs
        self.interval = interval
        self.logger = logger
    }

    public func run() async throws {
        try await repeatPass(every: interval, what: "user deletion", logger: logger) { try await runOnce() }
    }

    /// Runs every unfinished deletion it can lock (containers' first); returns how many it finished.
    @discardableResult
    public func runOnce() async throws -> Int {
        var finished = 0
        for container in try await containerDeletions.unfinished(limit: 100, logger: logger) {
            do {
                let progress = try await containerDeletions.run(container: container, deleteBlob: Self.blobDeleter(blobs, logger: logger), logger: logger)
                if progress.finished {
                    finished += 1
                    logger.info("container deleted", metadata: ["container": "\(container)"])
                }
            } catch let error as StratusError where error.code == .tryAgainLater {
                continue
            }
        }
        for job in try await deletions.unfinished(limit: 100, logger: logger) {
            do {
                let progress = try await deletions.run(
                    container: job.container, user: job.user, deleteBlob: Self.blobDeleter(blobs, logger: logger), logger: logger)
                if progress.finished {
                    finished += 1
                    logger.info("user deleted", metadata: ["container": "\(job.container)", "user": "\(job.user)"])
                }
            } catch let error as StratusError where error.code == .tryAgainLater {
                continue
            }
        }
        return finished
    }

    /// Deletes an asset's bytes (stored under its blob id) from `blobs`.
    public static func blobDeleter(_ blobs: any BlobStore, logger: Logger) -> UserDeletionStore.BlobDeleter {
        { blob in
            guard let key = BlobKey(AssetValue.receipt(blob)) else { return }
            try await blobs.delete(key: key, logger: logger)
        }
    }
}
