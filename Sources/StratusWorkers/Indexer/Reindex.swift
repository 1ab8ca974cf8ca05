import Foundation
import Logging
import StratusCore
import StratusPostgres

/// Builds a fresh generation of the query index from the PostgreSQL event log while the live one
/// keeps serving, then swaps it in atomically. The running indexer writes every new event to the
/// building generation too, so nothing that arrives during the rebuild is missed.
public struct Reindex: Sendable {
    let store: PostgresStore

    /// Creates a rebuild.
    public init(store: PostgresStore) { self.store = store }

    /// Runs it; `progress` is called after every page. `concurrency` is how many pages are written
    /// at once; `language` is the new generation's text search configuration (nil keeps the live
    /// one's). Returns the new generation and the events read.
    @discardableResult
    public func run(
        pageSize: Int = 1000, concurrency: Int = 2, language: String? = nil, logger: Logger,
        progress: @Sendable (Rebuild.Progress) -> Void = { _ in }
    ) async throws -> (generation: Int, events: Int) {
        let generations = QueryIndexGenerations(store: store)
        let generation = try await generations.begin(language: language, logger: logger)
        do {
            // Pages go to the database two at a time (PostgreSQL's index upkeep, one core's work per
            // transaction, is most of a rebuild); a zone's deletion is applied alone, in order.
            let count = try await LogReplay.run(
                store: store, pageSize: pageSize, concurrency: concurrency, logger: logger, progress: progress,
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
