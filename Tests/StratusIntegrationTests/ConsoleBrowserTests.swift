import AsyncHTTPClient
import Foundation
import NIOCore
import PostgresNIO
import StratusCore
import StratusPostgres
import StratusTesting
import Synchronization
import XCTest

/// The console in a real browser: a live `stratus-api` (with its relay) and `stratus-indexer`, as
/// an operator runs them, driven by scripts/console_browser_test.py through headless Chromium and
/// chromium-driver. Screenshots of each page go to test-artifacts/console/.
final class ConsoleBrowserTests: XCTestCase {
    static let container = "iCloud.com.example.notes"
    static let user = "_browser"

    func testAnOperatorWorksTheConsoleInAHeadlessBrowser() async throws {
        let brokers = try TestSupport.kafkaBrokers()
        try await TestSupport.withMigratedStore { store, url in
            let apiToken = try await ContainerStore(store: store).create(container: Self.container, label: "test", logger: TestSupport.logger)
            let password = "a browser password"
            try await OperatorStore(store: store, rounds: 1000).create(login: "ops@example.com", password: password, containers: nil, logger: TestSupport.logger)
            let key = SecretKey.generate()
            let port = try Broker.freePort()
            let topic = "console-\(UUID().uuidString.prefix(8))"
            let dataDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("stratus-console-\(UUID().uuidString)").path
            defer { try? FileManager.default.removeItem(atPath: dataDirectory) }
            let settings = [
                "STRATUS_DATABASE_URL": url, "STRATUS_KAFKA_BROKERS": brokers, "STRATUS_TOPIC": topic, "STRATUS_TOPIC_PARTITIONS": "2",
                "STRATUS_CONSUMER_GROUP_SUFFIX": topic, "STRATUS_HTTP_PORT": "\(port)", "STRATUS_SECRET_KEY": key.hex, "STRATUS_DATA_DIR": dataDirectory,
            ]
            let base = "http://127.0.0.1:\(port)"
            try await StratusExecutable.with("stratus-api", settings: settings) { api in
                try await api.answersHealth(at: base)
                try await StratusExecutable.with("stratus-indexer", settings: settings) { indexer in
                    let deadLetter = try await Self.deadLetter(store: store, indexer: indexer)
                    let webAuth = WebAuthToken(userRecordName: Self.user, container: Self.container, expiresAt: Int64(Date().timeIntervalSince1970) + 3600)
                    let artifacts = TestSupport.repositoryRoot.appendingPathComponent("test-artifacts/console")
                    try? FileManager.default.removeItem(at: artifacts)
                    let (status, output) = try await Self.runBrowser([
                        "CONSOLE_BASE_URL": base, "CONSOLE_LOGIN": "ops@example.com", "CONSOLE_PASSWORD": password,
                        "CONSOLE_CONTAINER": Self.container, "CONSOLE_USER": Self.user,
                        "CONSOLE_API_QUERY": "ckAPIToken=\(apiToken)&ckWebAuthToken=\(webAuth.signed(with: key))",
                        "CONSOLE_DEAD_LETTER": "\(deadLetter)", "CONSOLE_ARTIFACTS": artifacts.path,
                    ], timeout: .seconds(300))
                    // The failing check on one line first (a run's log keeps the last lines), the whole output after it.
                    let failure = output.split(separator: "\n").last { $0.contains("FAILED") }.map(String.init) ?? "no FAILED line"
                    guard status == 0, output.contains("all checks held") else {
                        return XCTFail("the browser run ended with status \(status): \(failure)\n\(output)")
                    }
                    for page in ["01-signin-refused", "02-containers", "03-database", "04-records", "05-record", "06-query", "07-operations",
                                 "08-operations-after-retry", "09-narrow", "10-errors", "11-access", "12-subscriptions",
                                 "13-schema-deploy-check", "14-schema", "15-reindex", "17-origins"] {
                        let size = (try? FileManager.default.attributesOfItem(atPath: artifacts.appendingPathComponent("\(page).png").path)[.size] as? Int) ?? 0
                        XCTAssertGreaterThan(size, 1000, "the screenshot \(page).png")
                    }
                    let origins = try await ContainerStore(store: store).allowedOrigins(container: Self.container, logger: TestSupport.logger)
                    XCTAssertEqual(origins, .some(["https://notes.example.com", "http://localhost:3000"]), "the console's form set the origins")
                    try indexer.requireRunning()
                    try api.requireRunning()
                }
            }
        }
    }

    /// A dead letter of the indexer for an event it has applied: a record written to a zone of its
    /// own, applied by the running indexer, then set aside as if it had failed.
    static func deadLetter(store: PostgresStore, indexer: StratusExecutable) async throws -> Int64 {
        let database = DatabaseID(container: container, environment: .development, scope: .private, owner: user)
        let zone = ZoneID(zoneName: "Ops", ownerRecordName: user)
        let causation = Causation(requestID: "console-browser-test", userRecordName: user)
        _ = try await ZoneStore(store: store).modify([.create(zone)], in: database, causation: causation, logger: TestSupport.logger)
        let outcomes = try await RecordStore(store: store).modify(
            [.init(type: .create, input: RecordInput(recordName: "poison", recordType: "Note", fields: ["title": .string("x")]))],
            zone: zone, in: database, atomic: true, causation: causation, deviceID: nil, logger: TestSupport.logger)
        guard case .success = outcomes.first else { throw TestSupport.MissingServer(description: "the seed record was not written: \(outcomes)") }
        let zoneKey = ZoneKey(database: database, zoneName: zone.zoneName).rawValue
        try await TestSupport.eventually(timeout: .seconds(60), "the indexer applies the seed zone") {
            try indexer.requireRunning()
            return try await store.withConnection { connection in
                let rows = try await connection.query(
                    "SELECT last_sequence FROM worker_checkpoints WHERE worker = 'stratus-indexer' AND zone_key = \(zoneKey)", logger: TestSupport.logger)
                for try await sequence in rows.decode(Int64.self) { return sequence == 2 }
                return false
            }
        }
        return try await store.withConnection { connection in
            let rows = try await connection.query(
                """
                INSERT INTO worker_dead_letters (worker, event_id, zone_key, value, reason)
                SELECT 'stratus-indexer', id, zone_key, '\\x00'::bytea, 'set aside by the browser test' FROM events
                WHERE zone_key = \(zoneKey) AND zone_sequence = 2
                RETURNING id
                """, logger: TestSupport.logger)
            for try await id in rows.decode(Int64.self) { return id }
            throw TestSupport.MissingServer(description: "no event to set aside")
        }
    }

    /// Runs a browser script (the console's unless told) with `settings`, without standard input; past `timeout` it is sent
    /// SIGTERM (it closes the browser and its driver), then SIGKILL. Returns its status and output.
    static func runBrowser(_ settings: [String: String], timeout: Duration, script: String = "scripts/console_browser_test.py") async throws -> (Int32, String) {
        let python = ProcessInfo.processInfo.environment["STRATUS_TEST_PYTHON"] ?? "python3"
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("stratus-console-browser-\(UUID().uuidString.prefix(8)).log")
        FileManager.default.createFile(atPath: log.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: log) }
        let output = try FileHandle(forWritingTo: log)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [python, TestSupport.repositoryRoot.appendingPathComponent(script).path]
        // The test run's environment (its STRATUS_TEST_RUN marker too, so scripts/test.sh stops a
        // browser a crashed test left) and the script's settings.
        process.environment = ProcessInfo.processInfo.environment.merging(settings) { _, new in new }
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = output
        process.standardError = output
        let ended = Mutex<CheckedContinuation<Int32, Never>?>(nil)
        let status = Mutex<Int32?>(nil)
        process.terminationHandler = { process in
            let waiter = ended.withLock { continuation in
                status.withLock { $0 = process.terminationStatus }
                defer { continuation = nil }
                return continuation
            }
            waiter?.resume(returning: process.terminationStatus)
        }
        try process.run()
        let watchdog = Task {
            try await Task.sleep(for: timeout)
            if process.isRunning { process.terminate() }
            try await Task.sleep(for: .seconds(10))
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        }
        let code = await withCheckedContinuation { (continuation: CheckedContinuation<Int32, Never>) in
            let done = ended.withLock { waiter -> Int32? in
                if let code = status.withLock({ $0 }) { return code }
                waiter = continuation
                return nil
            }
            if let done { continuation.resume(returning: done) }
        }
        watchdog.cancel()
        try? output.close()
        return (code, (try? String(contentsOf: log, encoding: .utf8)) ?? "")
    }
}
