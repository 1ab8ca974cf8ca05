import Foundation
import StratusCore
import StratusPostgres
import StratusTesting
@testable import StratusWorkers
import Synchronization
import XCTest

/// The rebuilds' reading of the log: pages written several at once, a page that depends on the
/// order written alone, in order, and progress in the log's order.
final class LogReplayTests: XCTestCase {
    func testPagesRunAtOnceButAnOrderedPageRunsAloneInItsPlace() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let logger = TestSupport.logger
            let database = DatabaseID(container: "iCloud.test", environment: .development, scope: .private, owner: "_alice")
            let zone = ZoneID(zoneName: "Z", ownerRecordName: "_alice")
            let zones = ZoneStore(store: store), records = RecordStore(store: store)
            _ = try await zones.modify([.create(zone)], in: database, causation: Causation(requestID: "z"), logger: logger)
            for index in 0..<8 {
                _ = try await records.modify([RecordStore.Command(type: .create, input: RecordInput(recordName: "r\(index)", recordType: "Item", fields: [:]))],
                                             zone: zone, in: database, atomic: true, causation: Causation(requestID: "r"), deviceID: nil, logger: logger)
            }
            _ = try await zones.modify([.delete(zone)], in: database, causation: Causation(requestID: "d"), logger: logger)
            _ = try await zones.modify([.create(zone)], in: database, causation: Causation(requestID: "c"), logger: logger)
            for index in 0..<8 {
                _ = try await records.modify([RecordStore.Command(type: .create, input: RecordInput(recordName: "s\(index)", recordType: "Item", fields: [:]))],
                                             zone: zone, in: database, atomic: true, causation: Causation(requestID: "s"), deviceID: nil, logger: logger)
            }
            let events = try await EventLog(store: store).events(after: 0, limit: 1000, logger: logger)
            let ordered = try XCTUnwrap(events.first { $0.type == .zoneDeleted }).id

            let timeline = Timeline()
            let count = try await LogReplay.run(
                store: store, pageSize: 1, concurrency: 3, logger: logger,
                progress: { timeline.note(.reported($0.position)) }, prepare: { $0[0].id },
                runsAlone: { $0 == ordered }
            ) { id in
                timeline.note(.started(id))
                // The page's work lasts until three pages run at once — the pages after it start
                // meanwhile — or, for a page nothing may run beside, a second has passed.
                let deadline = ContinuousClock.now + .seconds(1)
                while timeline.running < 3, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(2)) }
                timeline.note(.finished(id))
            }
            XCTAssertEqual(count, events.count)
            let steps = timeline.steps
            func index(_ step: Timeline.Step) throws -> Int { try XCTUnwrap(steps.firstIndex(of: step), "\(step)") }
            let ids = events.map(\.id)
            for id in ids where id < ordered {
                XCTAssertLessThan(try index(.finished(id)), try index(.started(ordered)), "page \(id) before the zone's deletion is written first")
            }
            for id in ids where id > ordered {
                XCTAssertLessThan(try index(.finished(ordered)), try index(.started(id)), "page \(id) after it waits for it")
            }
            // Pages did run at once, never more than three.
            var running = 0, most = 0
            for step in steps {
                if case .started = step { running += 1 }
                if case .finished = step { running -= 1 }
                most = max(most, running)
            }
            XCTAssertEqual(most, 3)
            // Progress in the log's order, each page once.
            let reported = steps.compactMap { if case .reported(let position) = $0 { position } else { nil } }
            XCTAssertEqual(reported, ids)
        }
    }

    /// What the replay did, in order.
    final class Timeline: Sendable {
        enum Step: Hashable, Sendable {
            case started(Int64), finished(Int64), reported(Int64)
        }

        private let log = Mutex<[Step]>([])
        func note(_ step: Step) { log.withLock { $0.append(step) } }
        var steps: [Step] { log.withLock { $0 } }
        /// Pages started and not yet finished.
        var running: Int {
            log.withLock { steps in
                steps.reduce(0) { count, step in
                    switch step {
                    case .started: count + 1
                    case .finished: count - 1
                    case .reported: count
                    }
                }
            }
        }
    }
}
