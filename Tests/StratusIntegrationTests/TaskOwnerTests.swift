import Foundation
import Logging
import ServiceLifecycle
import StratusCore
@testable import StratusPostgres
@testable import StratusRuntime
import StratusTesting
import Synchronization
import XCTest

/// Work started off a caller's task is owned by a `TaskOwner` service: graceful shutdown refuses
/// new jobs, waits for those running, and cancels what is left at its deadline; the sync pages
/// read ahead and the console's maintenance runs are such jobs.
final class TaskOwnerTests: XCTestCase {
    /// A signal one side gives once and the other waits for.
    final class Signal: Sendable {
        private let stream: AsyncStream<Void>
        private let continuation: AsyncStream<Void>.Continuation

        init() { (stream, continuation) = AsyncStream.makeStream(of: Void.self) }

        func give() { continuation.finish() }

        func wait() async {
            for await _ in stream {}
        }
    }

    /// Runs `owner` as the only service of a group until `body` returns, then shuts the group
    /// down gracefully and returns once the owner has ended.
    static func whileRunning<T: Sendable>(_ owner: TaskOwner, _ body: (ServiceGroup) async throws -> T) async throws -> T {
        let group = ServiceGroup(configuration: .init(services: [owner], logger: TestSupport.logger))
        return try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            do {
                let result = try await body(group)
                await group.triggerGracefulShutdown()
                try await tasks.waitForAll()
                return result
            } catch {
                await group.triggerGracefulShutdown()
                try? await tasks.waitForAll()
                throw error
            }
        }
    }

    func testGracefulShutdownRefusesNewJobsAndWaitsForTheRunningOnes() async throws {
        let owner = TaskOwner(name: "test", deadline: .seconds(60), logger: TestSupport.logger)
        let started = Signal(), release = Signal()
        let outcome = Mutex<(ended: Bool, cancelled: Bool, late: Bool)>((false, false, false))
        try await Self.whileRunning(owner) { group in
            XCTAssertTrue(owner.submit {
                started.give()
                await release.wait()
                outcome.withLock { $0.ended = true; $0.cancelled = Task.isCancelled }
            })
            await started.wait()
            await group.triggerGracefulShutdown()
            try await TestSupport.eventually("the owner stops taking jobs") { !owner.isAccepting }
            XCTAssertFalse(owner.submit { outcome.withLock { $0.late = true } }, "a job submitted after shutdown began is refused")
            XCTAssertFalse(outcome.withLock { $0.ended }, "the job still runs")
            release.give()
        }
        let result = outcome.withLock { $0 }
        XCTAssertTrue(result.ended, "the owner ended only after its running job had")
        XCTAssertFalse(result.cancelled, "a job that ends before the deadline is not cancelled")
        XCTAssertFalse(result.late, "the refused job never ran")
        XCTAssertEqual(owner.running, 0)
    }

    func testJobsStillRunningAtTheDeadlineAreCancelledAndAwaited() async throws {
        let owner = TaskOwner(name: "test", deadline: .milliseconds(100), logger: TestSupport.logger)
        let started = Signal()
        let outcome = Mutex<(ended: Bool, cancelled: Bool)>((false, false))
        try await Self.whileRunning(owner) { _ in
            owner.submit {
                started.give()
                // Ends only when cancelled (or after a minute, which fails the test).
                try? await Task.sleep(for: .seconds(60))
                outcome.withLock { $0 = (true, Task.isCancelled) }
            }
            await started.wait()
        }
        let result = outcome.withLock { $0 }
        XCTAssertTrue(result.ended, "the owner waited for its cancelled job to end")
        XCTAssertTrue(result.cancelled, "the job was cancelled at the deadline")
    }

    func testAJobSubmittedBeforeTheOwnerRunsRunsOnceItDoes() async throws {
        let owner = TaskOwner(name: "test", logger: TestSupport.logger)
        let ran = Signal()
        XCTAssertTrue(owner.submit { ran.give() })
        try await Self.whileRunning(owner) { _ in await ran.wait() }
    }

    func testAPageBeingReadAheadAtShutdownIsCancelledAndNothingMoreIsReadAhead() async throws {
        let owner = TaskOwner(name: "test", deadline: .milliseconds(100), logger: TestSupport.logger)
        let readAhead = SyncReadAhead(capacity: 4, window: .seconds(60), owner: owner)
        let state = SyncReadAhead.ZoneState((UUID(), 1, 0))
        let question = SyncReadAhead.Question(
            database: DatabaseID(container: "iCloud.test", environment: .development, scope: .private, owner: "_alice"), zoneName: "Sync",
            incarnation: UUID(), since: 0, known: 0, limit: 2, recordTypes: nil, maxBytes: 1 << 20, firstAlwaysFits: false, wire: nil)
        let page = SyncStore.ZoneChanges(changes: [], incarnation: question.incarnation, version: 2, moreComing: true, observed: state)
        let reading = Signal()
        let outcome = Mutex<(ended: Bool, cancelled: Bool)>((false, false))
        try await Self.whileRunning(owner) { _ in
            readAhead.readNext(after: page, of: question) { _ in
                reading.give()
                // A read that ends only when cancelled (or after a minute, which fails the test).
                try? await Task.sleep(for: .seconds(60))
                outcome.withLock { $0 = (true, Task.isCancelled) }
                return Task.isCancelled ? nil : (page, state)
            }
            XCTAssertEqual(readAhead.count, 1)
            await reading.wait()
        }
        let result = outcome.withLock { $0 }
        XCTAssertTrue(result.ended, "shutdown waited for the page being read")
        XCTAssertTrue(result.cancelled, "and cancelled it at the deadline")
        XCTAssertEqual(readAhead.count, 0, "a reading that read nothing is not kept")
        // After shutdown nothing is read ahead, and nobody waits for a page that is not read.
        readAhead.readNext(after: page, of: question) { _ in (page, state) }
        XCTAssertEqual(readAhead.count, 0)
        var next = question
        next.since = page.version
        let taken = await readAhead.take(next)
        XCTAssertNil(taken)
    }

    func testAConsoleMaintenanceRunIsOwnedRecordedAtShutdownAndRefusedAfter() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let owner = TaskOwner(name: "test", logger: TestSupport.logger)
            let launcher = Maintenance.launcher(store: store, broker: .init(kafka: nil, topic: "stratus.events"), owner: owner)
            let id = try await Self.whileRunning(owner) { _ in
                try await launcher.start(.replay(worker: "stratus-shares"), "console:test", TestSupport.logger)
            }
            // The owner ended only after the run had recorded its end.
            let recorded = try await MaintenanceRunStore(store: store).run(id, logger: TestSupport.logger)
            let run = try XCTUnwrap(recorded)
            XCTAssertEqual(run.state, "finished", "\(run)")
            XCTAssertNotNil(run.finishedAt)
            do {
                _ = try await launcher.start(.reindex, "console:test", TestSupport.logger)
                XCTFail("a run is refused once its process shuts down")
            } catch let error as StratusError {
                XCTAssertEqual(error.code, .tryAgainLater, "\(error)")
            }
            let runs = try await MaintenanceRunStore(store: store).recent(logger: TestSupport.logger)
            XCTAssertEqual(runs.map(\.id), [id], "the refused run was never claimed")
        }
    }
}
