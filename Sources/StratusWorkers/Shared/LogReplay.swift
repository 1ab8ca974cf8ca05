import Foundation
import Logging
import StratusCore
import StratusPostgres

/// Reads the PostgreSQL event log in id order from a position (the beginning, or a snapshot's
/// position after the log was pruned), page by page, reporting progress: the common part of every
/// rebuild.
enum LogReplay {
    /// Reads the log and applies it page by page. The next page is read, and made ready by
    /// `prepare` (the CPU's part: decoding), while the database applies the pages before it, so the
    /// reading and the writing overlap. Up to `concurrency` pages are applied at once, each in its
    /// own transaction (for a destination whose every write keeps the newer version, so pages may
    /// commit in any order); a page `runsAlone` says depends on the order waits for every page
    /// before it and holds back the ones after it. Progress is reported in the log's order: after a
    /// page, once every page before it is applied too.
    static func run<Page: Sendable>(
        store: PostgresStore, after position: Int64 = 0, pageSize: Int, concurrency: Int = 1, logger: Logger,
        progress: @Sendable (Rebuild.Progress) -> Void,
        prepare: @escaping @Sendable ([EventEnvelope]) -> Page, runsAlone: @escaping @Sendable (Page) -> Bool = { _ in false },
        apply: @escaping @Sendable (Page) async throws -> Void
    ) async throws -> Int {
        let eventLog = EventLog(store: store)
        let target = try await eventLog.lastID(logger: logger)
        let started = ContinuousClock.now
        @Sendable func read(after position: Int64) async throws -> Read<Page>? {
            let events = try await eventLog.events(after: position, limit: pageSize, logger: logger)
            guard let last = events.last else { return nil }
            return Read(last: last.id, count: events.count, page: prepare(events))
        }
        return try await withThrowingTaskGroup(of: (index: Int, last: Int64, count: Int).self) { group in
            var begun = 0, running = 0, reported = 0, count = 0
            var applied: [Int: (last: Int64, count: Int)] = [:]
            // Waits for one page to be applied, then reports every page now applied in order.
            func collect() async throws {
                guard let done = try await group.next() else { return }
                running -= 1
                applied[done.index] = (done.last, done.count)
                while let page = applied.removeValue(forKey: reported) {
                    // A replay stopped from outside stops between pages.
                    try Task.checkCancellation()
                    reported += 1
                    count += page.count
                    let seconds = max(0.001, (ContinuousClock.now - started) / .seconds(1))
                    progress(Rebuild.Progress(events: count, target: target, position: page.last, eventsPerSecond: Double(count) / seconds))
                }
            }
            var next = try await read(after: position)
            while let current = next {
                try Task.checkCancellation()
                async let following = read(after: current.last)
                let alone = runsAlone(current.page)
                while running > 0, alone || running >= max(1, concurrency) { try await collect() }
                let index = begun
                begun += 1
                running += 1
                group.addTask {
                    try await apply(current.page)
                    return (index, current.last, current.count)
                }
                if alone {
                    while running > 0 { try await collect() }
                }
                next = try await following
            }
            while running > 0 { try await collect() }
            return count
        }
    }

    /// A page read and made ready.
    struct Read<Page: Sendable>: Sendable {
        var last: Int64
        var count: Int
        var page: Page
    }

    /// Reads the log and applies it page by page, in order, the events as read.
    static func run(
        store: PostgresStore, after position: Int64 = 0, pageSize: Int, logger: Logger, progress: @Sendable (Rebuild.Progress) -> Void,
        apply: @escaping @Sendable ([EventEnvelope]) async throws -> Void
    ) async throws -> Int {
        try await run(store: store, after: position, pageSize: pageSize, logger: logger, progress: progress, prepare: { $0 }, apply: apply)
    }
}
