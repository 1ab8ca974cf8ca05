import Foundation
import StratusCore
import StratusKafka
import StratusPostgres
import StratusRelay
import StratusTesting
@testable import StratusWorkers
import XCTest

/// An idle worker stops fetching from the broker and wakes on the next commit that appends events.
final class WorkerIdleTests: XCTestCase {
    let fixture = PipelineFixture()

    /// How long `body` took, and what it returned.
    static func timed<T>(_ body: () async throws -> T) async rethrows -> (T, Duration) {
        let clock = ContinuousClock()
        let started = clock.now
        let value = try await body()
        return (value, clock.now - started)
    }

    func testAWaitForTheNextCommitEndsOnACommitItsTimeoutOrCancellationAndNeverMissesAnEarlierOne() async throws {
        let fixture = fixture
        try await TestSupport.withMigratedStore { store, _ in
            let commits = CommitNotifications(store: store)
            let logger = TestSupport.logger
            // The caller has not looked yet, or events came since it last did: no wait.
            guard case .changed(let empty) = try await commits.wait(unlessLastIDIsNot: nil, timeout: .seconds(30), logger: logger) else {
                return XCTFail("a first look does not wait")
            }
            XCTAssertEqual(empty, 0)
            try await fixture.workload(store, zoneCount: 1, rounds: 1)
            let (changed, changedAfter) = try await Self.timed { try await commits.wait(unlessLastIDIsNot: empty, timeout: .seconds(30), logger: logger) }
            guard case .changed(let lastID) = changed else { return XCTFail("a commit before the wait is not missed: \(changed)") }
            XCTAssertGreaterThan(lastID, empty)
            XCTAssertLessThan(changedAfter, .seconds(5))
            // Nothing new: it waits until its timeout.
            let (quiet, quietAfter) = try await Self.timed { try await commits.wait(unlessLastIDIsNot: lastID, timeout: .milliseconds(300), logger: logger) }
            XCTAssertEqual(quiet, .timedOut)
            XCTAssertGreaterThanOrEqual(quietAfter, .milliseconds(250))
            // A commit during the wait ends it.
            let (notified, notifiedAfter) = try await Self.timed {
                async let outcome = commits.wait(unlessLastIDIsNot: lastID, timeout: .seconds(30), logger: logger)
                try await Task.sleep(for: .milliseconds(300))
                try await fixture.workload(store, zoneCount: 1, rounds: 1, prefix: "During")
                return try await outcome
            }
            XCTAssertEqual(notified, .notified)
            XCTAssertLessThan(notifiedAfter, .seconds(10))
            // Cancellation ends it too.
            guard case .changed(let latest) = try await commits.wait(unlessLastIDIsNot: lastID, timeout: .seconds(30), logger: logger) else {
                return XCTFail("the commit during the wait moved the last id")
            }
            let (_, cancelledAfter) = try await Self.timed {
                let waiter = Task { try await commits.wait(unlessLastIDIsNot: latest, timeout: .seconds(30), logger: logger) }
                try await Task.sleep(for: .milliseconds(100))
                waiter.cancel()
                _ = try? await waiter.value
            }
            XCTAssertLessThan(cancelledAfter, .seconds(10))
        }
    }

    func testAnIdleWorkerPausesAndAppliesTheNextCommitPromptly() async throws {
        let brokers = try TestSupport.kafkaBrokers()
        let topic = fixture.uniqueTopic()
        let fixture = fixture
        try await TestSupport.withMigratedStore { store, _ in
            var (relayConfiguration, workerConfiguration) = fixture.configurations(topic: topic)
            workerConfiguration.idleAfter = .milliseconds(300)
            // Only a commit notification can wake it in time: its own wake-up and reconciliation are an hour away.
            workerConfiguration.idleWakeInterval = .seconds(3600)
            workerConfiguration.reconcileInterval = .seconds(3600)
            let kafka = fixture.kafka(brokers)
            let relay = Relay(store: store, kafka: kafka, configuration: relayConfiguration, logger: TestSupport.logger)
            let worker = Worker(projection: IndexerProjection(), store: store, kafka: kafka, configuration: workerConfiguration, logger: TestSupport.logger)
            try await fixture.runServices([relay, worker]) {
                try await fixture.workload(store, zoneCount: 4, rounds: 2)
                var expected = try await fixture.expectedDirectory(store)
                try await TestSupport.eventually("the worker to catch up") { try await fixture.directory(store) == expected }
                try await TestSupport.eventually(timeout: .seconds(30), "the worker to pause for want of events") {
                    worker.idlePauses.load(ordering: .relaxed) > 0
                }
                let pausesBefore = worker.idlePauses.load(ordering: .relaxed)
                for round in 0..<3 {
                    let pausesNow = worker.idlePauses.load(ordering: .relaxed)
                    try await fixture.workload(store, zoneCount: 2, rounds: 1, prefix: "Late\(round)")
                    expected = try await fixture.expectedDirectory(store)
                    let clock = ContinuousClock()
                    let committed = clock.now
                    try await TestSupport.eventually(timeout: .seconds(20), "the paused worker to apply round \(round)") {
                        try await fixture.directory(store) == expected
                    }
                    XCTAssertLessThan(clock.now - committed, .seconds(10), "a commit wakes the paused worker")
                    // It falls idle again before the next round.
                    try await TestSupport.eventually(timeout: .seconds(30), "the worker to pause again after round \(round)") {
                        worker.idlePauses.load(ordering: .relaxed) > pausesNow
                    }
                }
                XCTAssertGreaterThan(worker.idlePauses.load(ordering: .relaxed), pausesBefore, "it paused again between the rounds")
            }
        }
    }
}
