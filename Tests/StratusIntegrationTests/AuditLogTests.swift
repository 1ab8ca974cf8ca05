import Foundation
import PostgresNIO
import StratusCore
import StratusPostgres
import StratusTesting
import XCTest

/// The audit log against the real PostgreSQL: one chain however many processes append at once,
/// entries that the application cannot change or remove, tampering done around that found and
/// named by `stratus audit verify`, and `stratus audit list`'s filters.
final class AuditLogTests: XCTestCase {
    static func draft(_ index: Int, container: String = "iCloud.a", actor: String = "ops", action: AuditAction = .keyRevoke) -> AuditDraft {
        AuditDraft(
            actor: AuditActor(channel: .console, name: actor, origin: "192.0.2.1", requestID: "r-\(index)"), action: action, container: container,
            subject: "s-\(index)", details: [("n", "\(index)")])
    }

    /// Runs statements separated by `; ` (one a query: the extended protocol takes one at a time).
    static func execute(_ store: PostgresStore, _ sql: String) async throws {
        try await store.withConnection { connection in
            for statement in sql.components(separatedBy: "; ") {
                try await connection.query(PostgresQuery(unsafeSQL: statement), logger: TestSupport.logger)
            }
        }
    }

    func testAppendersInSeveralProcessesAtOnceKeepOneChain() async throws {
        try await TestSupport.withMigratedStore { store, url in
            try await TestSupport.withStore(url: url) { other in
                // Two pools (as two stratus-api processes) and CLI invocations, all at once.
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for index in 0..<40 {
                        group.addTask { try await AuditLog(store: index % 2 == 0 ? store : other).append(Self.draft(index), logger: TestSupport.logger) }
                    }
                    for index in 0..<3 {
                        group.addTask {
                            let result = try await StratusExecutable.run(
                                "stratus", ["container", "create", "iCloud.concurrent\(index)", "--actor", "cli-\(index)"], settings: ["STRATUS_DATABASE_URL": url])
                            XCTAssertEqual(result.status, 0, result.output)
                        }
                    }
                    try await group.waitForAll()
                }
            }
            let verification = try await AuditLog(store: store).verify(pageSize: 7, logger: TestSupport.logger)
            XCTAssertNil(verification.problem)
            XCTAssertEqual(verification.verified, 43)
            XCTAssertEqual(verification.headSequence, 43)
            let entries = try await AuditLog(store: store).entries(.init(), limit: 100, logger: TestSupport.logger)
            XCTAssertEqual(entries.map(\.sequence), Array((1...43).reversed()))
            XCTAssertEqual(entries.filter { $0.channel == "cli" }.count, 3)
        }
    }

    func testTheApplicationCannotChangeOrRemoveAnEntry() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            try await AuditLog(store: store).append(Self.draft(1), logger: TestSupport.logger)
            for statement in ["UPDATE audit_log SET actor = 'x'", "DELETE FROM audit_log", "TRUNCATE audit_log"] {
                do {
                    try await Self.execute(store, statement)
                    XCTFail("\(statement) was allowed")
                } catch let error as PSQLError {
                    XCTAssertEqual(error.serverInfo?[.message]?.hasPrefix("the audit log is append-only"), true, "\(statement): \(String(reflecting: error))")
                }
            }
            let verification = try await AuditLog(store: store).verify(logger: TestSupport.logger)
            XCTAssertNil(verification.problem)
            XCTAssertEqual(verification.verified, 1)
        }
    }

    func testTamperingAroundTheTriggerIsFoundAndTheFirstBadEntryNamed() async throws {
        try await TestSupport.withMigratedStore { store, url in
            for index in 1...6 { try await AuditLog(store: store).append(Self.draft(index), logger: TestSupport.logger) }
            let original = try await AuditLog(store: store).entries(.init(), limit: 10, logger: TestSupport.logger).reversed().map { $0 }
            // Someone who owns the table turns its trigger off.
            try await Self.execute(store, "ALTER TABLE audit_log DISABLE TRIGGER USER; CREATE TABLE audit_copy AS SELECT * FROM audit_log")
            func verify() async throws -> (status: Int32, output: String) {
                try await StratusExecutable.run("stratus", ["audit", "verify"], settings: ["STRATUS_DATABASE_URL": url])
            }
            let intact = try await verify()
            XCTAssertEqual(intact.status, 0, intact.output)
            XCTAssertTrue(intact.output.contains("audit log verified: 6 entries, head \(AuditEntry.hex(original[5].hash))"), intact.output)

            let rewritten = {
                var entry = original[2]
                entry.details = "n=33"
                return AuditEntry.hex(entry.computedHash)
            }()
            // An entry added around the application, hashed and linked as the log would have.
            let added = AuditEntry(Self.draft(7), sequence: 7, recordedAtMicroseconds: original[5].recordedAtMicroseconds + 1, previousHash: original[5].hash)
            let insert = """
                INSERT INTO audit_log SELECT 7, recorded_at + interval '1 microsecond', channel, actor, origin, 'r-7', action, container, 's-7', 'n=7',
                    '\\x\(AuditEntry.hex(added.previousHash))', '\\x\(AuditEntry.hex(added.hash))' FROM audit_log WHERE sequence = 6
                """
            let tampering: [(String, String)] = [
                ("UPDATE audit_log SET actor = 'someone else' WHERE sequence = 3", "audit log broken at entry 3: its contents do not match its hash"),
                ("UPDATE audit_log SET recorded_at = recorded_at - interval '1 day' WHERE sequence = 2", "audit log broken at entry 2: its contents do not match"),
                // Rewritten with a fresh hash of its own: the next entry's link no longer holds.
                ("UPDATE audit_log SET details = 'n=33', hash = '\\x\(rewritten)' WHERE sequence = 3", "audit log broken at entry 4: its previous hash is not the hash of entry 3"),
                ("DELETE FROM audit_log WHERE sequence = 2", "audit log broken at entry 2: it is missing (the next entry is 3)"),
                ("UPDATE audit_log SET sequence = 100 WHERE sequence = 4; UPDATE audit_log SET sequence = 4 WHERE sequence = 5; UPDATE audit_log SET sequence = 5 WHERE sequence = 100",
                 "audit log broken at entry 4: its contents do not match its hash"),
                ("DELETE FROM audit_log WHERE sequence = 6", "audit log broken at entry 6: it is missing (the head names entry 6)"),
                (insert, "audit log broken at entry 7: the head names entry 6 as the latest"),
            ]
            for (statement, message) in tampering {
                try await Self.execute(store, statement)
                let found = try await verify()
                XCTAssertEqual(found.status, 1, "\(statement): \(found.output)")
                XCTAssertTrue(found.output.contains(message), "\(statement): \(found.output)")
                // Put the log back as it was appended: it verifies again.
                try await Self.execute(store, "DELETE FROM audit_log; INSERT INTO audit_log SELECT * FROM audit_copy")
                let restored = try await AuditLog(store: store).verify(logger: TestSupport.logger)
                XCTAssertNil(restored.problem, statement)
            }
        }
    }

    func testEntriesAreListedNewestFirstAndFiltered() async throws {
        try await TestSupport.withMigratedStore { store, url in
            let log = AuditLog(store: store)
            try await log.append(Self.draft(1, container: "iCloud.a", actor: "ann", action: .keyCreate), logger: TestSupport.logger)
            try await log.append(Self.draft(2, container: "iCloud.b", actor: "ann", action: .keyRevoke), logger: TestSupport.logger)
            try await log.append(Self.draft(3, container: "iCloud.a", actor: "bob", action: .keyRevoke), logger: TestSupport.logger)
            try await log.append(Self.draft(4, container: "iCloud.a", actor: "ann", action: .keyRevoke), logger: TestSupport.logger)
            func sequences(_ filter: AuditLog.Filter, limit: Int = 10) async throws -> [Int64] {
                try await log.entries(filter, limit: limit, logger: TestSupport.logger).map(\.sequence)
            }
            let all = try await sequences(.init())
            XCTAssertEqual(all, [4, 3, 2, 1])
            let ofA = try await sequences(.init(container: "iCloud.a"))
            XCTAssertEqual(ofA, [4, 3, 1])
            let byAnn = try await sequences(.init(actor: "ann"))
            XCTAssertEqual(byAnn, [4, 2, 1])
            let revokes = try await sequences(.init(container: "iCloud.a", actor: "ann", action: "key.revoke"))
            XCTAssertEqual(revokes, [4])
            let page = try await sequences(.init(before: 3), limit: 1)
            XCTAssertEqual(page, [2])

            let listed = try await StratusExecutable.run(
                "stratus", ["audit", "list", "--container", "iCloud.a", "--by", "ann", "--action", "key.revoke"], settings: ["STRATUS_DATABASE_URL": url])
            XCTAssertEqual(listed.status, 0, listed.output)
            let lines = listed.output.split(separator: "\n").filter { $0.hasPrefix("4\t") || $0.hasPrefix("1\t") || $0.hasPrefix("3\t") }
            XCTAssertEqual(lines.count, 1, listed.output)
            let fields = lines.first.map { $0.split(separator: "\t", omittingEmptySubsequences: false).map(String.init) } ?? []
            XCTAssertEqual(Array(fields.dropFirst(2)), ["console", "ann", "192.0.2.1", "r-4", "key.revoke", "iCloud.a", "s-4", "n=4"])
            for (arguments, message) in [(["--action", "nope"], "no action 'nope'"), (["--limit", "0"], "--limit is 1 to 1000")] {
                let refused = try await StratusExecutable.run("stratus", ["audit", "list"] + arguments, settings: ["STRATUS_DATABASE_URL": url])
                XCTAssertNotEqual(refused.status, 0, refused.output)
                XCTAssertTrue(refused.output.contains(message), refused.output)
            }
        }
    }
}
