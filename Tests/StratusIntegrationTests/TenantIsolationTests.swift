import Foundation
import Logging
import PostgresNIO
import StratusCore
import StratusPostgres
import StratusTesting
import Synchronization
import XCTest

/// Writers of different zones share no data, so SERIALIZABLE must never make them abort each other;
/// and one zone's queue must never hold a pooled connection per waiting writer.
final class TenantIsolationTests: XCTestCase {
    /// 48 writers, each in a zone of its own, with the machine's cores kept busy: not one
    /// serialization failure. The store gets a single attempt, so any failure would surface as
    /// TRY_AGAIN_LATER instead of being retried away.
    func testWritersOfDifferentZonesNeverAbortEachOther() async throws {
        try await TestSupport.withMigratedStore(maxAttempts: 1) { store, _ in
            let writers = 48
            let rounds = 12
            let zones = ZoneStore(store: store)
            for user in 0..<writers {
                _ = try await zones.modify([.create(ZoneID(zoneName: "Notes", ownerRecordName: "_user\(user)"))], in: Self.database(user),
                                           causation: Causation(requestID: "setup"), logger: TestSupport.logger)
            }
            let records = RecordStore(store: store)
            let failures = FailureLog()
            let busy = CPUBurner.start(threads: ProcessInfo.processInfo.activeProcessorCount)
            defer { busy.stop() }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for user in 0..<writers {
                    group.addTask {
                        let zone = ZoneID(zoneName: "Notes", ownerRecordName: "_user\(user)")
                        var previousSaved = false
                        for round in 0..<rounds {
                            // Creates, a change and a delete of what was created: every statement the write path has.
                            var commands = (0..<3).map { index in
                                RecordStore.Command(type: .create, input: RecordInput(
                                    recordName: "r\(round)-\(index)", recordType: "Note", fields: ["title": .string("round \(round)")]))
                            }
                            commands.append(RecordStore.Command(type: .forceReplace, input: RecordInput(
                                recordName: "first", recordType: "Note", fields: ["title": .string("round \(round)")])))
                            if previousSaved {
                                commands.append(RecordStore.Command(type: .forceDelete, input: RecordInput(recordName: "r\(round - 1)-1")))
                            }
                            do {
                                let outcomes = try await records.modify(
                                    commands, zone: zone, in: Self.database(user), atomic: true, causation: Causation(requestID: "w\(user)"),
                                    deviceID: nil, logger: TestSupport.logger)
                                previousSaved = true
                                for case .failure(let failure) in outcomes {
                                    previousSaved = false
                                    failures.append(failure.error.description)
                                }
                            } catch {
                                previousSaved = false
                                failures.append(String(reflecting: error))
                            }
                        }
                    }
                }
                try await group.waitForAll()
            }
            let seen = failures.all
            XCTAssertEqual(seen.count, 0, "independent writers failed \(seen.count) times: \(Array(Set(seen)).prefix(5))")
        }
    }
}

extension TenantIsolationTests {
    /// The public database's default zone has no zone-wide lock: 48 users saving their own records
    /// there at once, cores busy, never abort each other either (one attempt each).
    func testUsersOfThePublicDefaultZoneNeverAbortEachOther() async throws {
        try await TestSupport.withMigratedStore(maxAttempts: 1) { store, _ in
            let database = DatabaseID(container: "iCloud.isolation", environment: .development, scope: .public, owner: "")
            let zone = ZoneID(zoneName: ZoneID.defaultZoneName, ownerRecordName: DatabaseID.publicOwner)
            let records = RecordStore(store: store)
            let failures = FailureLog()
            let busy = CPUBurner.start(threads: ProcessInfo.processInfo.activeProcessorCount)
            defer { busy.stop() }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for user in 0..<48 {
                    group.addTask {
                        for round in 0..<10 {
                            let commands = [
                                RecordStore.Command(type: .create, input: RecordInput(recordName: "u\(user)-\(round)", recordType: "Post", fields: ["n": .int64(Int64(round))])),
                                RecordStore.Command(type: .forceUpdate, input: RecordInput(recordName: "u\(user)-profile", recordType: "Profile", fields: ["n": .int64(Int64(round))])),
                            ]
                            do {
                                let outcomes = try await records.modify(
                                    commands, zone: zone, in: database, atomic: false, causation: Causation(requestID: "p", userRecordName: "_u\(user)"),
                                    deviceID: nil, logger: TestSupport.logger)
                                for case .failure(let failure) in outcomes { failures.append(failure.error.description) }
                            } catch {
                                failures.append(String(reflecting: error))
                            }
                        }
                    }
                }
                try await group.waitForAll()
            }
            let seen = failures.all
            XCTAssertEqual(seen.count, 0, "independent public writers failed \(seen.count) times: \(Array(Set(seen)).prefix(5))")
        }
    }

    /// A default zone has no zone-wide lock, so a delete and a new VALIDATE reference to the deleted
    /// record race; whatever the interleaving, a VALIDATE reference never outlives its target.
    func testADeleteAndANewValidateReferenceNeverBothSucceedInADefaultZone() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let database = DatabaseID(container: "iCloud.isolation", environment: .development, scope: .private, owner: "_owner")
            let zone = ZoneID(zoneName: ZoneID.defaultZoneName, ownerRecordName: "_owner")
            let records = RecordStore(store: store)
            let causation = Causation(requestID: "race", userRecordName: "_owner")
            for round in 0..<30 {
                _ = try await records.modify([RecordStore.Command(type: .create, input: RecordInput(recordName: "target\(round)", recordType: "T"))],
                                             zone: zone, in: database, atomic: false, causation: causation, deviceID: nil, logger: TestSupport.logger)
                async let deleted = records.modify([RecordStore.Command(type: .forceDelete, input: RecordInput(recordName: "target\(round)"))],
                                                   zone: zone, in: database, atomic: false, causation: causation, deviceID: nil, logger: TestSupport.logger)
                async let referred = records.modify([RecordStore.Command(type: .create, input: RecordInput(
                    recordName: "ref\(round)", recordType: "R", fields: ["to": .reference(Reference(recordName: "target\(round)", action: .validate))]))],
                    zone: zone, in: database, atomic: false, causation: causation, deviceID: nil, logger: TestSupport.logger)
                let (deleteOutcome, referOutcome) = try await (deleted, referred)
                let both = (try? deleteOutcome[0].get()) != nil && (try? referOutcome[0].get()) != nil
                XCTAssertFalse(both, "round \(round): the target was deleted while a VALIDATE reference to it was saved")
            }
        }
    }

    /// Twenty writers queued on one busy zone wait without holding pooled connections: a pool of four
    /// still serves another tenant at once.
    func testWritersQueuedOnOneZoneLeaveThePoolToOthers() async throws {
        try await TestSupport.withMigratedStore { _, url in
            let store = try PostgresStore(url: url, maxConnections: 4, logger: TestSupport.logger)
            try await withThrowingTaskGroup(of: Void.self) { services in
                services.addTask { try await store.run() }
                defer { services.cancelAll() }
                let busy = DatabaseID(container: "iCloud.isolation", environment: .development, scope: .private, owner: "_busy")
                let other = DatabaseID(container: "iCloud.isolation", environment: .development, scope: .private, owner: "_other")
                for database in [busy, other] {
                    _ = try await ZoneStore(store: store).modify([.create(ZoneID(zoneName: "Notes", ownerRecordName: database.owner))], in: database,
                                                                 causation: Causation(requestID: "setup"), logger: TestSupport.logger)
                }
                let records = RecordStore(store: store)
                let holding = AttemptCounter()
                try await withThrowingTaskGroup(of: Void.self) { group in
                    // The busy zone's lock is held for two seconds while twenty writers queue for it.
                    group.addTask {
                        try await store.serializable(logger: TestSupport.logger, lock: ZoneKey(database: busy, zoneName: "Notes").rawValue) { _ in
                            holding.increment()
                            try await Task.sleep(for: .seconds(2))
                        }
                    }
                    try await TestSupport.eventually(timeout: .seconds(10), "the lock to be held") { holding.value == 1 }
                    for index in 0..<20 {
                        group.addTask {
                            _ = try await records.modify(
                                [RecordStore.Command(type: .create, input: RecordInput(recordName: "q\(index)", recordType: "Note"))],
                                zone: ZoneID(zoneName: "Notes", ownerRecordName: busy.owner), in: busy, atomic: true,
                                causation: Causation(requestID: "queued"), deviceID: nil, logger: TestSupport.logger)
                        }
                    }
                    try await Task.sleep(for: .milliseconds(200))
                    let started = ContinuousClock.now
                    let outcome = try await records.modify(
                        [RecordStore.Command(type: .create, input: RecordInput(recordName: "free", recordType: "Note"))],
                        zone: ZoneID(zoneName: "Notes", ownerRecordName: other.owner), in: other, atomic: true,
                        causation: Causation(requestID: "other"), deviceID: nil, logger: TestSupport.logger)
                    let waited = ContinuousClock.now - started
                    XCTAssertEqual(holding.value, 1)
                    guard case .success = outcome[0] else { return XCTFail("\(outcome)") }
                    XCTAssertLessThan(waited, .seconds(1), "another tenant waited \(waited) for a connection")
                    try await group.waitForAll()
                }
                let written = try await records.lookup((0..<20).map { "q\($0)" }, zone: ZoneID(zoneName: "Notes", ownerRecordName: busy.owner),
                                                       in: busy, logger: TestSupport.logger)
                XCTAssertEqual(written.count, 20, "every queued writer got its turn")
            }
        }
    }

    /// Statements and lock waits are bounded: past the limit the client is told to try again later.
    func testStatementAndLockTimeoutsAnswerTryAgainLater() async throws {
        try await TestSupport.withMigratedStore { _, url in
            var timeouts = PostgresStore.Timeouts()
            timeouts.statement = .milliseconds(300)
            timeouts.lock = .milliseconds(300)
            let store = try PostgresStore(url: url, maxConnections: 4, timeouts: timeouts, logger: TestSupport.logger)
            let holder = try PostgresStore(url: url, maxConnections: 2, logger: TestSupport.logger)
            try await withThrowingTaskGroup(of: Void.self) { services in
                services.addTask { try await store.run() }
                services.addTask { try await holder.run() }
                defer { services.cancelAll() }
                do {
                    _ = try await store.withConnection { connection in
                        try await connection.query("SELECT pg_sleep(3)", logger: TestSupport.logger).collect()
                    }
                    XCTFail("a statement ran past statement_timeout")
                } catch let error as StratusError {
                    XCTAssertEqual(error.code, .tryAgainLater)
                    XCTAssertNotNil(error.retryAfter)
                }
                // Another process holds a zone's lock: the wait ends at lock_timeout.
                let key = "iCloud.isolation/development/private/_p/Notes"
                try await Self.whileAnotherProcessHolds(key, on: holder) {
                    let started = ContinuousClock.now
                    do {
                        try await store.serializable(logger: TestSupport.logger, lock: key) { _ in }
                        XCTFail("a lock wait ran past lock_timeout")
                    } catch let error as StratusError {
                        XCTAssertEqual(error.code, .tryAgainLater)
                    }
                    XCTAssertLessThan(ContinuousClock.now - started, .seconds(2))
                }
                // A non-atomic request whose second record waits past the limit: the first is stored
                // and reported stored, the second reports its own error; the request does not fail.
                let database = DatabaseID(container: "iCloud.isolation", environment: .development, scope: .private, owner: "_p")
                let zone = ZoneID(zoneName: ZoneID.defaultZoneName, ownerRecordName: "_p")
                let recordKey = ZoneKey(database: database, zoneName: zone.zoneName).rawValue + "/second"
                try await Self.whileAnotherProcessHolds(recordKey, on: holder) {
                    let outcomes = try await RecordStore(store: store).modify(
                        ["first", "second"].map { RecordStore.Command(type: .create, input: RecordInput(recordName: $0, recordType: "Note")) },
                        zone: zone, in: database, atomic: false, causation: Causation(requestID: "partial", userRecordName: "_p"),
                        deviceID: nil, logger: TestSupport.logger)
                    guard case .success = outcomes[0], case .failure(let failure) = outcomes[1] else { return XCTFail("\(outcomes)") }
                    XCTAssertEqual(failure.error.code, .tryAgainLater)
                    let stored = try await RecordStore(store: store).lookup(["first", "second"], zone: zone, in: database, logger: TestSupport.logger)
                    XCTAssertEqual(Set(stored.values.map(\.recordName)), ["first"], "what is reported stored is stored, and only that")
                }
            }
        }
    }
}

extension TenantIsolationTests {
    /// Runs `body` while a connection of `holder` (standing for another process) holds the advisory
    /// lock on `key` for two seconds.
    static func whileAnotherProcessHolds(_ key: String, on holder: PostgresStore, _ body: @Sendable () async throws -> Void) async throws {
        let held = AttemptCounter()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                try await holder.withConnection { connection in
                    try await connection.query("SELECT pg_advisory_lock(hashtextextended(\(key), 0))", logger: TestSupport.logger).collect()
                    held.increment()
                    try await Task.sleep(for: .seconds(2))
                    try await connection.query("SELECT pg_advisory_unlock(hashtextextended(\(key), 0))", logger: TestSupport.logger).collect()
                }
            }
            try await TestSupport.eventually(timeout: .seconds(10), "the other process to hold the lock") { held.value == 1 }
            try await body()
            try await group.waitForAll()
        }
    }

    static func database(_ user: Int) -> DatabaseID {
        DatabaseID(container: "iCloud.isolation", environment: .development, scope: .private, owner: "_user\(user)")
    }
}

/// Errors collected from concurrent tasks.
final class FailureLog: Sendable {
    private let entries = Mutex<[String]>([])
    func append(_ entry: String) { entries.withLock { $0.append(entry) } }
    var all: [String] { entries.withLock { $0 } }
}

/// Keeps cores busy on threads of its own (never the cooperative pool), as production load would:
/// each thread burns in slices of 50 ms while fewer tasks than cores are runnable besides the
/// burners, and rests a slice while others keep the cores busy already (a test run in parallel
/// with others needs no help to be contended, and burning then would only slow the others down).
final class CPUBurner: Sendable {
    private let running = Atomic<Bool>(true)
    /// The burner's threads burning at this moment.
    private let burning = Atomic<Int>(0)
    private let threads: Int

    private init(threads: Int) { self.threads = threads }

    static func start(threads: Int) -> CPUBurner {
        let burner = CPUBurner(threads: threads)
        let cores = ProcessInfo.processInfo.activeProcessorCount
        for _ in 0..<threads {
            let thread = Thread { [burner] in
                var x: UInt64 = 1
                while burner.running.load(ordering: .relaxed) {
                    // Runnable tasks now (the reader counts itself), the burners that burn left out.
                    let others = (runnableTasks() ?? 0) - 1 - burner.burning.load(ordering: .relaxed)
                    guard others < cores else {
                        Thread.sleep(forTimeInterval: 0.05)
                        continue
                    }
                    burner.burning.add(1, ordering: .relaxed)
                    let until = Date().addingTimeInterval(0.05)
                    while Date() < until, burner.running.load(ordering: .relaxed) {
                        for _ in 0..<100_000 { x = x &* 6364136223846793005 &+ 1442695040888963407 }
                    }
                    burner.burning.subtract(1, ordering: .relaxed)
                }
                if x == 0 { print("") }
            }
            thread.start()
        }
        return burner
    }

    /// The machine's runnable tasks at this moment (`/proc/loadavg`'s fourth field, before the slash).
    private static func runnableTasks() -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8) else { return nil }
        let fields = text.split(separator: " ")
        guard fields.count > 3, let running = fields[3].split(separator: "/").first else { return nil }
        return Int(running)
    }

    func stop() { running.store(false, ordering: .relaxed) }
}
