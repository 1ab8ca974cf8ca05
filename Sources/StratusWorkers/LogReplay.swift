import Foundation
import Logging
import StratusCore
import StratusPostgres

/// Reads the whole PostgreSQL event log in id order, page by page, reporting progress: the common
/// part of every rebuild.
enum LogReplay {
    static func run(
        store: PostgresStore, pageSize: Int, logger: Logger, progress: @Sendable (Rebuild.Progress) -> Void,
        apply: ([EventEnvelope]) async throws -> Void
    ) async throws -> Int {
        let eventLog = EventLog(store: store)
        let target = try await eventLog.lastID(logger: logger)
        let started = ContinuousClock.now
        var position: Int64 = 0
        var count = 0
        while true {
            // A replay stopped from outside stops between pages.
            try Task.checkCancellation()
            let page = try await eventLog.events(after: position, limit: pageSize, logger: logger)
            guard let last = page.last else { break }
            try await apply(page)
            count += page.count
            position = last.id
            let seconds = max(0.001, (ContinuousClock.now - started) / .seconds(1))
            progress(Rebuild.Progress(events: count, target: target, position: position, eventsPerSecond: Double(count) / seconds))
        }
        return count
    }
}
