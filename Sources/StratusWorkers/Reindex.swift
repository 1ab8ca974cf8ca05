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

    /// Runs it; `progress` is called after every page. Returns the new generation and the events read.
    @discardableResult
    public func run(pageSize: Int = 1000, logger: Logger, progress: @Sendable (Rebuild.Progress) -> Void = { _ in }) async throws -> (generation: Int, events: Int) {
        let generations = QueryIndexGenerations(store: store)
        let generation = try await generations.begin(logger: logger)
        let eventLog = EventLog(store: store)
        let target = try await eventLog.lastID(logger: logger)
        let started = ContinuousClock.now
        var position: Int64 = 0
        var count = 0
        while true {
            let page = try await eventLog.events(after: position, limit: pageSize, logger: logger)
            if page.isEmpty { break }
            for event in page { try await generations.apply(event, to: generation, logger: logger) }
            count += page.count
            position = page.last!.id
            let seconds = max(0.001, (ContinuousClock.now - started) / .seconds(1))
            progress(Rebuild.Progress(events: count, target: target, position: position, eventsPerSecond: Double(count) / seconds))
        }
        try await generations.swap(to: generation, logger: logger)
        return (generation, count)
    }
}
