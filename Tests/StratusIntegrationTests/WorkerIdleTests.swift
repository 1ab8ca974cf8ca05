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

    /// A relay and an indexer worker that idles after 300 ms, whose own wake-up and reconciliation
    /// are an hour away: only its wait for the next commit brings it back in time.
    static func relayAndIdlingWorker(_ store: PostgresStore, fixture: PipelineFixture, topic: String, brokers: String) -> (Relay, Worker) {
        var (relayConfiguration, workerConfiguration) = fixture.configurations(topic: topic)
        workerConfiguration.idleAfter = .milliseconds(300)
        workerConfiguration.idleWakeInterval = .seconds(3600)
        workerConfiguration.reconcileInterval = .seconds(3600)
        let kafka = fixture.kafka(brokers)
        let relay = Relay(store: store, kafka: kafka, configuration: relayConfiguration, logger: TestSupport.logger)
        let worker = Worker(projection: IndexerProjection(), store: store, kafka: kafka, configuration: workerConfiguration, logger: TestSupport.logger)
        return (relay, worker)
    }

    /// Writes a workload, waits for the worker to apply it and then to pause; returns the directory applied.
    static func catchUpAndPause(_ store: PostgresStore, _ worker: Worker, fixture: PipelineFixture, zoneCount: Int, rounds: Int) async throws -> [String: UUID] {
        try await fixture.workload(store, zoneCount: zoneCount, rounds: rounds)
        let expected = try await fixture.expectedDirectory(store)
        try await TestSupport.eventually("the worker to catch up") { try await fixture.directory(store) == expected }
        try await TestSupport.eventually(timeout: .seconds(30), "the worker to pause for want of events") {
            worker.idlePauses.load(ordering: .relaxed) > 0
        }
        return expected
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

    /// For a worker (`unpublishedRecheck`), events the relay has not published keep the wait short
    /// and never count as seen: their publication notifies nobody. (No relay runs here: what the
    /// workload commits stays unpublished.)
    func testAWaitWhileEventsAreUnpublishedIsShortAndNeverTakesTheirIDAsSeen() async throws {
        let fixture = fixture
        try await TestSupport.withMigratedStore { store, _ in
            let commits = CommitNotifications(store: store)
            let logger = TestSupport.logger
            guard case .changed(let empty) = try await commits.wait(unlessLastIDIsNot: nil, timeout: .seconds(30), unpublishedRecheck: .seconds(1), logger: logger) else {
                return XCTFail("nothing unpublished in an empty log: a first look returns its last id")
            }
            try await fixture.workload(store, zoneCount: 1, rounds: 1)
            for lastID in [nil, empty] {
                let (outcome, after) = try await Self.timed {
                    try await commits.wait(unlessLastIDIsNot: lastID, timeout: .seconds(30), unpublishedRecheck: .milliseconds(300), logger: logger)
                }
                XCTAssertEqual(outcome, .unpublished, "not .changed while the events are unpublished, last id \(String(describing: lastID))")
                XCTAssertGreaterThanOrEqual(after, .milliseconds(250))
                XCTAssertLessThan(after, .seconds(10), "the recheck, not the timeout")
            }
            // Once published (the relay's step), the log's last id is returned as before.
            let queued = try await store.withConnection { connection in
                var ids: [Int64] = []
                for try await id in try await connection.query("SELECT id FROM unpublished_events", logger: logger).decode(Int64.self) { ids.append(id) }
                return ids
            }
            XCTAssertFalse(queued.isEmpty)
            try await EventLog(store: store).markPublished(queued, logger: logger)
            guard case .changed(let lastID) = try await commits.wait(unlessLastIDIsNot: empty, timeout: .seconds(30), unpublishedRecheck: .seconds(1), logger: logger) else {
                return XCTFail("published: the last id is returned")
            }
            XCTAssertGreaterThan(lastID, empty)
        }
    }

    func testAnIdleWorkerPausesAndAppliesTheNextCommitPromptly() async throws {
        let brokers = try TestSupport.kafkaBrokers()
        let topic = fixture.uniqueTopic()
        let fixture = fixture
        try await TestSupport.withMigratedStore { store, _ in
            // Only a commit notification can wake it in time: its own wake-up and reconciliation are an hour away.
            let (relay, worker) = Self.relayAndIdlingWorker(store, fixture: fixture, topic: topic, brokers: brokers)
            try await fixture.runServices([relay, worker]) {
                var expected = try await Self.catchUpAndPause(store, worker, fixture: fixture, zoneCount: 4, rounds: 2)
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

    /// A worker idling in its wait for the next commit while its PostgreSQL restarts (a fast
    /// shutdown, on a cluster of the test's own) resumes once the server is back: the first commit
    /// after the restart is applied promptly, without a second one to wake it, and so is each later
    /// one. Its own wake-up and reconciliation are an hour away, so only its wait (the listening
    /// connection, its close noticed, a new one opened) can bring it back.
    func testAnIdleWorkerResumesAfterItsPostgreSQLRestarts() async throws {
        let brokers = try TestSupport.kafkaBrokers()
        let topic = fixture.uniqueTopic()
        let fixture = fixture
        try await ThrowawayPostgres.with { server in
            try await server.start()
            let migrations = try TestSupport.migrations()
            try await TestSupport.withStore(url: server.url) { store in
                try await Migrator(store: store, migrations: migrations).migrate(logger: TestSupport.logger)
            }
            try await TestSupport.withStore(url: server.url) { store in
                let (relay, worker) = Self.relayAndIdlingWorker(store, fixture: fixture, topic: topic, brokers: brokers)
                try await fixture.runServices([relay, worker]) {
                    var expected = try await Self.catchUpAndPause(store, worker, fixture: fixture, zoneCount: 2, rounds: 1)
                    try await server.restart()
                    for round in 0..<3 {
                        let pausesNow = worker.idlePauses.load(ordering: .relaxed)
                        // Right after the restart a write may be told to retry while the pool reconnects.
                        try await TestSupport.eventually(timeout: .seconds(30), "round \(round)'s writes after the restart") {
                            (try? await fixture.workload(store, zoneCount: 2, rounds: 1, prefix: "After\(round)")) != nil
                        }
                        expected = try await fixture.expectedDirectory(store)
                        let clock = ContinuousClock()
                        let committed = clock.now
                        // The relay publishes the round (so what follows is the worker's doing).
                        try await TestSupport.eventually(timeout: .seconds(30), "the relay to publish round \(round) after the restart") {
                            try await TestSupport.count(store, "SELECT count(*) FROM unpublished_events") == 0
                        }
                        try await TestSupport.eventually(timeout: .seconds(30), "the worker to apply round \(round) after the restart") {
                            try await fixture.directory(store) == expected
                        }
                        XCTAssertLessThan(clock.now - committed, .seconds(10), "round \(round) is applied promptly after the restart")
                        try await TestSupport.eventually(timeout: .seconds(30), "the worker to pause again after round \(round)") {
                            worker.idlePauses.load(ordering: .relaxed) > pausesNow
                        }
                    }
                }
            }
        }
    }
}
