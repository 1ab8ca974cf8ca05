import Foundation
import Logging
import StratusCore
import StratusPostgres
import StratusTesting
@testable import StratusWorkers
import Synchronization
import XCTest

/// Workers that only observe events must not write a log line per event at info level: under write
/// load that cost each of them a share of a core.
final class ObserverProjectionTests: XCTestCase {
    /// Every log line, with its level.
    final class CapturedLogs: Sendable {
        let lines = Mutex<[(level: Logger.Level, message: String, metadata: Logger.Metadata)]>([])

        func count(_ level: Logger.Level, _ message: String) -> Int {
            lines.withLock { $0.filter { $0.level == level && $0.message == message }.count }
        }
    }

    struct CapturingLogHandler: LogHandler {
        let logs: CapturedLogs
        var logLevel: Logger.Level = .trace
        var metadata: Logger.Metadata = [:]

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(level: Logger.Level, message: Logger.Message, metadata: Logger.Metadata?, source: String, file: String, function: String, line: UInt) {
            logs.lines.withLock { $0.append((level, message.description, self.metadata.merging(metadata ?? [:]) { $1 })) }
        }
    }

    static func events(_ count: Int) -> [EventEnvelope] {
        let database = DatabaseID(container: "iCloud.a", environment: .development, scope: .private, owner: "_u")
        return (1...count).map { index in
            EventEnvelope(
                id: Int64(index), zoneKey: ZoneKey(database: database, zoneName: "Z\(index % 7)"), zoneSequence: Int64(index), type: .zoneCreated,
                schemaVersion: 1, payload: Data("{}".utf8), causation: Causation(requestID: "r\(index)"), createdAt: 0)
        }
    }

    func testEventsAreLoggedAtDebugLevelOnly() async throws {
        let logs = CapturedLogs()
        let logger = Logger(label: "observer-test") { _ in CapturingLogHandler(logs: logs) }
        let projection = ObserverProjection(name: "stratus-subscriptions")
        let events = Self.events(200)
        try await TestSupport.withMigratedStore { store, _ in
            try await store.serializable(logger: TestSupport.logger) { transaction in
                for event in events { try await projection.apply(event, in: transaction, logger: logger) }
            }
        }
        XCTAssertEqual(logs.count(.debug, "event received"), 200, "each event is still there at debug level")
        let informational = logs.lines.withLock { $0.filter { $0.level >= .info } }
        XCTAssertTrue(informational.isEmpty, "no event is logged at info level or above: \(informational.map(\.message))")
    }

    func testTheInfoSummaryComesAtMostOncePerInterval() {
        let start = ContinuousClock.now
        let tally = EventTally(interval: .seconds(60), now: start)
        for second in 0..<59 { XCTAssertNil(tally.count(now: start + .seconds(second)), "second \(second)") }
        let first = tally.count(now: start + .seconds(61))
        XCTAssertEqual(first?.events, 60, "the summary counts every event of its interval")
        XCTAssertEqual(first?.seconds ?? 0, 61, accuracy: 0.001)
        // The next interval starts at the summary.
        XCTAssertNil(tally.count(now: start + .seconds(100)))
        XCTAssertNil(tally.count(now: start + .seconds(120)))
        XCTAssertEqual(tally.count(now: start + .seconds(121))?.events, 3)
    }

    func testAnObserverWritesOneInfoLinePerIntervalUnderLoad() async throws {
        let logs = CapturedLogs()
        let logger: Logger = {
            var logger = Logger(label: "observer-test") { _ in CapturingLogHandler(logs: logs) }
            logger.logLevel = .info
            return logger
        }()
        let projection = ObserverProjection(name: "stratus-gc", summaryInterval: .milliseconds(200))
        let events = Self.events(30)
        try await TestSupport.withMigratedStore { store, _ in
            try await store.serializable(logger: TestSupport.logger) { transaction in
                for event in events { try await projection.apply(event, in: transaction, logger: logger) }
            }
            try await Task.sleep(for: .milliseconds(250))
            try await store.serializable(logger: TestSupport.logger) { transaction in
                try await projection.apply(events[0], in: transaction, logger: logger)
            }
        }
        XCTAssertEqual(logs.count(.debug, "event received"), 0, "debug lines are dropped at info level")
        let summaries = logs.lines.withLock { $0.filter { $0.level == .info } }
        XCTAssertGreaterThanOrEqual(summaries.count, 1, "the interval passed while events arrived")
        XCTAssertLessThanOrEqual(summaries.count, 2, "at most one summary per 200 ms over about 250 ms: \(summaries.map(\.message))")
        XCTAssertTrue(summaries.allSatisfy { $0.message == "events received" && $0.metadata["events"] != nil })
        let counted = summaries.compactMap { $0.metadata["events"].flatMap { Int("\($0)") } }.reduce(0, +)
        XCTAssertLessThanOrEqual(counted, 31)
    }
}
