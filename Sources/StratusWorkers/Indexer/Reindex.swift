import Foundation
import Logging
import StratusCore
import StratusPostgres

/// Builds a fresh generation of the query index from the PostgreSQL event log while the live one
/// keeps serving, then swaps it in atomically. The running indexer writes every new event to the
/// building generation too, so nothing that arrives during the rebuild is missed. Once retention
/// has pruned the log (or when asked), it starts from a snapshot of the records table at a log
/// position (`LogSnapshot`) and applies the log's tail after it.
public struct Reindex: Sendable {
    let store: PostgresStore

    /// Creates a rebuild.
    public init(store: PostgresStore) { self.store = store }

    /// Runs it; `progress` is called after every page. `concurrency` is how many pages are written
    /// at once; `language` is the new generation's text search configuration (nil keeps the live
    /// one's). Returns the new generation and the events read.
    @discardableResult
    public func run(
        pageSize: Int = 1000, concurrency: Int = 2, language: String? = nil, start: RebuildStart = .automatic, logger: Logger,
        progress: @Sendable (Rebuild.Progress) -> Void = { _ in }
    ) async throws -> (generation: Int, events: Int) {
        let generations = QueryIndexGenerations(store: store)
        let fromSnapshot = try await start.usesSnapshot(store: store, logger: logger)
        let generation = try await generations.begin(language: language, logger: logger)
        do {
            // The snapshot's records first (after `begin`, so the live indexer already writes the
            // new generation too), then the tail: an event of the tail replaces what it changed.
            var position: Int64 = 0
            if fromSnapshot {
                position = try await LogSnapshot.with(store: store, logger: logger) { snapshot in
                    let records = try await generations.load(snapshot, into: generation, pageSize: pageSize, logger: logger)
                    logger.info("index generation loaded from a snapshot", metadata: ["records": "\(records)", "position": "\(snapshot.position)"])
                    return snapshot.position
                }
            }
            // Pages go to the database two at a time (PostgreSQL's index upkeep, one core's work per
            // transaction, is most of a rebuild); a zone's deletion is applied alone, in order.
            let count = try await LogReplay.run(
                store: store, after: position, pageSize: pageSize, concurrency: concurrency, logger: logger, progress: progress,
                prepare: QueryIndexGenerations.Page.init, runsAlone: \.dependsOnOrder
            ) { page in
                try await generations.apply(page, to: generation, logger: logger)
            }
            try await generations.swap(to: generation, logger: logger)
            return (generation, count)
        } catch {
            // A half-built generation must not linger: the live indexer would keep writing to it. The
            // clean-up runs even when the rebuild was cancelled (it is not this task's to cancel).
            try? await withoutCancellation { try await generations.abandon(generation, logger: logger) }
            throw error
        }
    }
}
