import Foundation
import StratusCore
import StratusKafka
import StratusPostgres
@testable import StratusRelay
@testable import StratusWorkers
import XCTest

/// An idle worker stops fetching from the broker and wakes on the next commit that appends events.
final class WorkerIdleTests: XCTestCase {
    let fixture = PipelineFixture()

    /// How long `body` took.
    static func duration(_ body: () async throws -> Void) async rethrows -> Duration {
        let clock = ContinuousClock()
        let started = clock.now
        try await body()
        return clock.now - started
    }

    func testCommitWakeEndsAWaitOnANotificationItsTimeoutOrCancellation() async throws {
        let wake = CommitWake()
        // A notification that came while nobody waited ends the next wait at once, and only that one.
        wake.notify()
        let pending = await Self.duration { await wake.wait(timeout: .seconds(30)) }
        let unnotified = await Self.duration { await wake.wait(timeout: .milliseconds(300)) }
        XCTAssertLessThan(pending, .seconds(5))
        XCTAssertGreaterThanOrEqual(unnotified, .milliseconds(250), "a wait nobody notifies lasts until its timeout")
        // A notification wakes the waiter; a cancelled waiter returns.
        let notified = try await Self.duration {
            async let waited: Void = wake.wait(timeout: .seconds(30))
            try await Task.sleep(for: .milliseconds(50))
            wake.notify()
            await waited
        }
        XCTAssertLessThan(notified, .seconds(5), "a notification ends the wait")
        let cancelled = try await Self.duration {
            let waiter = Task { await wake.wait(timeout: .seconds(30)) }
            try await Task.sleep(for: .milliseconds(50))
            waiter.cancel()
            await waiter.value
        }
        XCTAssertLessThan(cancelled, .seconds(5), "cancellation ends a wait")
        // Ended waits leave nothing behind.
        let after = await Self.duration { await wake.wait(timeout: .milliseconds(300)) }
        XCTAssertGreaterThanOrEqual(after, .milliseconds(250))
    }

    func testAnIdleWorkerPausesAndAppliesTheNextCommitPromptly() async throws {
        let brokers = try TestSupport.kafkaBrokers()
        let topic = fixture.uniqueTopic()
        let fixture = fixture
        try await TestSupport.withMigratedStore { store, _ in
            var relayConfiguration = RelayConfiguration()
            relayConfiguration.topic = topic
            relayConfiguration.partitions = 4
            var workerConfiguration = WorkerConfiguration()
            workerConfiguration.topic = topic
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
                try await Task.sleep(for: .seconds(1))
                let pausesBefore = worker.idlePauses.load(ordering: .relaxed)
                for round in 0..<3 {
                    try await fixture.workload(store, zoneCount: 2, rounds: 1, prefix: "Late\(round)")
                    expected = try await fixture.expectedDirectory(store)
                    let clock = ContinuousClock()
                    let committed = clock.now
                    try await TestSupport.eventually(timeout: .seconds(20), "the paused worker to apply round \(round)") {
                        try await fixture.directory(store) == expected
                    }
                    XCTAssertLessThan(clock.now - committed, .seconds(10), "a commit wakes the paused worker")
                    // Let it fall idle again.
                    try await Task.sleep(for: .seconds(1))
                }
                XCTAssertGreaterThan(worker.idlePauses.load(ordering: .relaxed), pausesBefore, "it paused again between the rounds")
            }
        }
    }
}
