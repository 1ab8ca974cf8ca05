import Foundation
import StratusCore
@testable import StratusPostgres
import StratusRuntime
import StratusTesting
import XCTest

/// The token-signing key rule: configured, or generated for a single-machine development stack only.
final class ConfigurationTests: XCTestCase {
    /// A fresh data folder, removed afterwards.
    func withDataDirectory(_ body: (String) throws -> Void) throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("stratus-configuration-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try body(directory)
    }

    func testWithoutASecretAMultiProcessDeploymentRefusesToStart() throws {
        try withDataDirectory { directory in
            let refused: [(String, [String: String])] = [
                ("production", ["STRATUS_DEPLOYMENT": "production"]),
                ("production on loopback", ["STRATUS_DEPLOYMENT": "production", "STRATUS_HTTP_HOST": "127.0.0.1"]),
                ("listening on every address", ["STRATUS_HTTP_HOST": "0.0.0.0"]),
                ("listening on an outside address", ["STRATUS_DEPLOYMENT": "development", "STRATUS_HTTP_HOST": "10.0.0.5"]),
                ("listening on every IPv6 address", ["STRATUS_HTTP_HOST": "::"]),
                ("a host name that only starts like a loopback address", ["STRATUS_HTTP_HOST": "127.example.com"]),
            ]
            for (name, settings) in refused {
                XCTAssertThrowsError(try StratusConfiguration.fromEnvironment(settings.merging(["STRATUS_DATA_DIR": directory]) { $1 }), name) { error in
                    let message = String(describing: error)
                    XCTAssertTrue(message.contains("STRATUS_SECRET_KEY"), "\(name): \(message)")
                    XCTAssertTrue(message.contains("no token-signing key"), "\(name): \(message)")
                }
            }
            XCTAssertFalse(FileManager.default.fileExists(atPath: directory + "/dev-secret-key"), "nothing was generated")
            XCTAssertThrowsError(try StratusConfiguration.fromEnvironment(["STRATUS_DEPLOYMENT": "staging", "STRATUS_DATA_DIR": directory])) { error in
                XCTAssertTrue(String(describing: error).contains("STRATUS_DEPLOYMENT"), "\(error)")
            }
        }
    }

    func testAConfiguredSecretServesEveryDeployment() throws {
        try withDataDirectory { directory in
            let key = SecretKey.generate()
            let production = ["STRATUS_DEPLOYMENT": "production", "STRATUS_HTTP_HOST": "0.0.0.0", "STRATUS_DATA_DIR": directory]
            let fromEnvironment = try StratusConfiguration.fromEnvironment(production.merging(["STRATUS_SECRET_KEY": key.hex]) { $1 })
            XCTAssertEqual(fromEnvironment.secretKeySource, .environment)
            XCTAssertEqual(fromEnvironment.deployment, .production)
            XCTAssertEqual(fromEnvironment.api.secretKey.hex, key.hex)

            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let file = directory + "/mounted-secret"
            try Data((key.hex + "\n").utf8).write(to: URL(fileURLWithPath: file))
            let fromFile = try StratusConfiguration.fromEnvironment(production.merging(["STRATUS_SECRET_KEY_FILE": file]) { $1 })
            XCTAssertEqual(fromFile.secretKeySource, .file(file))
            XCTAssertEqual(fromFile.api.secretKey.hex, key.hex)

            XCTAssertThrowsError(try StratusConfiguration.fromEnvironment(production.merging(["STRATUS_SECRET_KEY_FILE": directory + "/missing"]) { $1 })) { error in
                XCTAssertTrue(String(describing: error).contains("STRATUS_SECRET_KEY_FILE"), "\(error)")
            }
            XCTAssertThrowsError(try StratusConfiguration.fromEnvironment(production.merging(["STRATUS_SECRET_KEY": "too short"]) { $1 }))
        }
    }

    func testASingleMachineDevelopmentStackGetsAGeneratedKeyOnce() throws {
        try withDataDirectory { directory in
            for host in [nil, "127.0.0.1", "127.0.0.2", "localhost", "::1"] as [String?] {
                var settings = ["STRATUS_DATA_DIR": directory]
                settings["STRATUS_HTTP_HOST"] = host
                let first = try StratusConfiguration.fromEnvironment(settings)
                let second = try StratusConfiguration.fromEnvironment(settings.merging(["STRATUS_DEPLOYMENT": "development"]) { $1 })
                XCTAssertEqual(first.deployment, .development)
                XCTAssertEqual(first.api.secretKey.hex, second.api.secretKey.hex, "every process of the folder shares the key")
                XCTAssertEqual(second.secretKeySource, .developmentDefault(path: directory + "/dev-secret-key", created: false))
            }
            let attributes = try FileManager.default.attributesOfItem(atPath: directory + "/dev-secret-key")
            XCTAssertEqual((attributes[.posixPermissions] as? NSNumber)?.intValue, 0o600)
            // The key is never in the configuration's description of where it came from.
            let configuration = try StratusConfiguration.fromEnvironment(["STRATUS_DATA_DIR": directory])
            XCTAssertFalse(String(describing: configuration.secretKeySource).contains(configuration.api.secretKey.hex))
        }
        try withDataDirectory { directory in
            let configuration = try StratusConfiguration.fromEnvironment(["STRATUS_DATA_DIR": directory])
            XCTAssertEqual(configuration.secretKeySource, .developmentDefault(path: directory + "/dev-secret-key", created: true))
        }
    }

    func testWorkersFetchBrieflyOnlyWhenSomebodyWaitsAndStopWhenIdle() throws {
        try withDataDirectory { directory in
            let defaults = try StratusConfiguration.fromEnvironment(["STRATUS_DATA_DIR": directory])
            XCTAssertEqual(defaults.kafka.fetchWaitMilliseconds, 25)
            XCTAssertEqual(defaults.backgroundFetchWait, .seconds(1))
            XCTAssertEqual(defaults.worker.idleAfter, .seconds(1))
            let set = try StratusConfiguration.fromEnvironment([
                "STRATUS_DATA_DIR": directory, "STRATUS_KAFKA_FETCH_WAIT_MS": "40", "STRATUS_KAFKA_BACKGROUND_FETCH_WAIT_MS": "2000",
                "STRATUS_WORKER_IDLE_AFTER_MS": "0",
            ])
            XCTAssertEqual(set.kafka.fetchWaitMilliseconds, 40)
            XCTAssertEqual(set.backgroundFetchWait, .seconds(2))
            XCTAssertNil(set.worker.idleAfter, "0: an idle worker keeps fetching")
        }
    }

    func testEmailDeliveryAndThePublicURLAreReadAndBadValuesRefused() throws {
        try withDataDirectory { directory in
            let base = ["STRATUS_DATA_DIR": directory]
            let defaults = try StratusConfiguration.fromEnvironment(base)
            XCTAssertNil(defaults.emailDelivery, "no email unless configured")
            XCTAssertNil(defaults.api.publicURL)
            XCTAssertEqual(defaults.api.email.lifetimes, EmailTokenLifetimes())
            let smtp = try StratusConfiguration.fromEnvironment(base.merging([
                "STRATUS_SMTP_HOST": "smtp.example.com", "STRATUS_SMTP_FROM": "no-reply@example.com", "STRATUS_SMTP_USERNAME": "stratus",
                "STRATUS_SMTP_PASSWORD": "an smtp secret", "STRATUS_PUBLIC_URL": "https://cloud.example.com/", "STRATUS_EMAIL_VERIFY_TTL_SECONDS": "60",
                "STRATUS_EMAIL_RESET_TTL_SECONDS": "30",
            ]) { $1 })
            guard case .smtp(let settings) = smtp.emailDelivery else { return XCTFail("SMTP: \(String(describing: smtp.emailDelivery))") }
            XCTAssertEqual(settings.host, "smtp.example.com")
            XCTAssertEqual(settings.port, 587)
            XCTAssertTrue(settings.startTLS)
            XCTAssertFalse("\(smtp.emailDelivery!)".contains("an smtp secret"), "the password is never described")
            XCTAssertEqual(smtp.api.publicURL, "https://cloud.example.com")
            XCTAssertEqual(smtp.api.email.lifetimes, try EmailTokenLifetimes(verify: 60, reset: 30))
            let webhook = try StratusConfiguration.fromEnvironment(base.merging([
                "STRATUS_EMAIL_WEBHOOK_URL": "https://mailer.example.com/in", "STRATUS_EMAIL_WEBHOOK_SECRET": "a webhook secret, long enough",
            ]) { $1 })
            guard case .webhook(let url, _) = webhook.emailDelivery else { return XCTFail("webhook") }
            XCTAssertEqual(url, "https://mailer.example.com/in")
            XCTAssertFalse("\(webhook.emailDelivery!)".contains("a webhook secret"))
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let notPEM = directory + "/not-a-certificate.pem"
            _ = FileManager.default.createFile(atPath: notPEM, contents: Data("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n".utf8))
            let refused: [([String: String], String)] = [
                (["STRATUS_SMTP_HOST": "smtp.example.com"], "STRATUS_SMTP_FROM"),
                (["STRATUS_SMTP_HOST": "smtp.example.com", "STRATUS_SMTP_FROM": "not an address"], "STRATUS_SMTP_FROM"),
                (["STRATUS_SMTP_HOST": "smtp.example.com", "STRATUS_SMTP_FROM": "a@example.com", "STRATUS_SMTP_PORT": "70000"], "STRATUS_SMTP_PORT"),
                (["STRATUS_SMTP_HOST": "smtp.example.com", "STRATUS_SMTP_FROM": "a@example.com", "STRATUS_SMTP_USERNAME": "u"], "both"),
                (["STRATUS_SMTP_HOST": "smtp.example.com", "STRATUS_SMTP_FROM": "a@example.com", "STRATUS_SMTP_USERNAME": "u", "STRATUS_SMTP_PASSWORD": "p",
                  "STRATUS_SMTP_STARTTLS": "false"], "never sent in the clear"),
                (["STRATUS_SMTP_HOST": "smtp.example.com", "STRATUS_SMTP_FROM": "a@example.com", "STRATUS_SMTP_STARTTLS": "maybe"], "STRATUS_SMTP_STARTTLS"),
                (["STRATUS_SMTP_HOST": "smtp.example.com", "STRATUS_SMTP_FROM": "a@example.com", "STRATUS_SMTP_CA_FILE": directory + "/no-such-ca.pem"],
                 "cannot read the CA file"),
                (["STRATUS_SMTP_HOST": "smtp.example.com", "STRATUS_SMTP_FROM": "a@example.com", "STRATUS_SMTP_CA_FILE": notPEM], "holds no PEM certificate"),
                (["STRATUS_SMTP_HOST": "smtp.example.com", "STRATUS_SMTP_FROM": "a@example.com", "STRATUS_SMTP_CA_FILE": notPEM, "STRATUS_SMTP_STARTTLS": "false"],
                 "needs STRATUS_SMTP_STARTTLS=true"),
                (["STRATUS_SMTP_HOST": "smtp.example.com", "STRATUS_SMTP_FROM": "a@example.com", "STRATUS_EMAIL_WEBHOOK_URL": "https://m.example.com",
                  "STRATUS_EMAIL_WEBHOOK_SECRET": "a webhook secret, long enough"], "not both"),
                (["STRATUS_EMAIL_WEBHOOK_URL": "https://m.example.com", "STRATUS_EMAIL_WEBHOOK_SECRET": "short"], "at least 16 bytes"),
                (["STRATUS_EMAIL_WEBHOOK_URL": "http://m.example.com", "STRATUS_EMAIL_WEBHOOK_SECRET": "a webhook secret, long enough"], "STRATUS_EMAIL_WEBHOOK_URL"),
                (["STRATUS_PUBLIC_URL": "https://cloud.example.com/app"], "STRATUS_PUBLIC_URL"),
                (["STRATUS_PUBLIC_URL": "ftp://cloud.example.com"], "STRATUS_PUBLIC_URL"),
                (["STRATUS_EMAIL_VERIFY_TTL_SECONDS": "0"], "STRATUS_EMAIL_VERIFY_TTL_SECONDS"),
                (["STRATUS_EMAIL_RESET_TTL_SECONDS": "99999999"], "STRATUS_EMAIL_RESET_TTL_SECONDS"),
            ]
            for (settings, says) in refused {
                XCTAssertThrowsError(try StratusConfiguration.fromEnvironment(base.merging(settings) { $1 }), "\(settings)") { error in
                    XCTAssertTrue(String(describing: error).contains(says), "\(settings): \(error)")
                }
            }
        }
    }

    /// A setting that is off unless `name` is true or 1, and refused when it is neither a true nor
    /// a false word.
    func assertOffUnlessSet(_ name: String, _ read: (StratusConfiguration) -> Bool) throws {
        try withDataDirectory { directory in
            XCTAssertFalse(read(try StratusConfiguration.fromEnvironment(["STRATUS_DATA_DIR": directory])), name)
            for (text, allowed) in [("true", true), ("1", true), ("false", false), ("0", false)] {
                let configuration = try StratusConfiguration.fromEnvironment(["STRATUS_DATA_DIR": directory, name: text])
                XCTAssertEqual(read(configuration), allowed, "\(name)=\(text)")
            }
            XCTAssertThrowsError(try StratusConfiguration.fromEnvironment(["STRATUS_DATA_DIR": directory, name: "yes"])) { error in
                XCTAssertTrue(String(describing: error).contains("\(name) must be true or false"), "\(error)")
            }
        }
    }

    func testLoopbackWebhooksOverHTTPAreAllowedOnlyWhenConfigured() throws {
        try assertOffUnlessSet("STRATUS_WEBHOOK_ALLOW_LOOPBACK") { $0.webhookAllowInsecureLoopback }
    }

    func testKeySetsFromPrivateAddressesAreAllowedOnlyWhenConfigured() throws {
        try assertOffUnlessSet("STRATUS_JWKS_ALLOW_PRIVATE_ADDRESSES") { $0.api.keySets.allowPrivateAddresses }
    }

    func testDeliveryAttemptsAndConcurrencyAreReadAndBounded() throws {
        try withDataDirectory { directory in
            let defaults = try StratusConfiguration.fromEnvironment(["STRATUS_DATA_DIR": directory]).delivery
            XCTAssertEqual(defaults.maxAttempts, 8)
            XCTAssertEqual(defaults.concurrency, 32)
            let set = try StratusConfiguration.fromEnvironment([
                "STRATUS_DATA_DIR": directory, "STRATUS_DELIVERY_MAX_ATTEMPTS": "3", "STRATUS_DELIVERY_CONCURRENCY": "4",
            ]).delivery
            XCTAssertEqual(set.maxAttempts, 3)
            XCTAssertEqual(set.concurrency, 4)
            for (name, value) in [("STRATUS_DELIVERY_MAX_ATTEMPTS", "0"), ("STRATUS_DELIVERY_MAX_ATTEMPTS", "many"), ("STRATUS_DELIVERY_CONCURRENCY", "100000")] {
                XCTAssertThrowsError(try StratusConfiguration.fromEnvironment(["STRATUS_DATA_DIR": directory, name: value])) { error in
                    XCTAssertTrue(String(describing: error).contains(name), "\(error)")
                }
            }
        }
    }

    func testExpiredRecordCollectionBatchRateAndConcurrencyAreReadAndBounded() throws {
        try withDataDirectory { directory in
            let defaults = try StratusConfiguration.fromEnvironment(["STRATUS_DATA_DIR": directory]).expiry
            XCTAssertEqual(defaults.batchSize, 2_000)
            XCTAssertEqual(defaults.ratePerSecond, 10_000)
            XCTAssertEqual(defaults.concurrency, 2)
            let set = try StratusConfiguration.fromEnvironment([
                "STRATUS_DATA_DIR": directory, "STRATUS_GC_EXPIRE_BATCH": "50", "STRATUS_GC_EXPIRE_RATE": "0", "STRATUS_GC_EXPIRE_CONCURRENCY": "4",
            ]).expiry
            XCTAssertEqual(set.batchSize, 50)
            XCTAssertEqual(set.ratePerSecond, 0, "0: no limit")
            XCTAssertEqual(set.concurrency, 4)
            for (name, value) in [("STRATUS_GC_EXPIRE_BATCH", "0"), ("STRATUS_GC_EXPIRE_BATCH", "20000"), ("STRATUS_GC_EXPIRE_RATE", "-1"),
                                  ("STRATUS_GC_EXPIRE_CONCURRENCY", "0"), ("STRATUS_GC_EXPIRE_CONCURRENCY", "17"), ("STRATUS_GC_EXPIRE_CONCURRENCY", "two"),
                                  ("STRATUS_GC_EXPIRE_RATE", "fast"), ("STRATUS_GC_EXPIRE_RATE", "nan")] {
                XCTAssertThrowsError(try StratusConfiguration.fromEnvironment(["STRATUS_DATA_DIR": directory, name: value])) { error in
                    XCTAssertTrue(String(describing: error).contains(name), "\(error)")
                }
            }
        }
    }

    func testTheDatabaseConnectionsAreReadAndBounded() throws {
        try withDataDirectory { directory in
            let defaults = try StratusConfiguration.fromEnvironment(["STRATUS_DATA_DIR": directory])
            XCTAssertEqual(defaults.databaseMaxConnections, 20)
            XCTAssertNil(defaults.databaseMinConnections, "unset: stratus-api keeps every connection open, other processes none")
            let kept = try StratusConfiguration.fromEnvironment([
                "STRATUS_DATA_DIR": directory, "STRATUS_DATABASE_MAX_CONNECTIONS": "8", "STRATUS_DATABASE_MIN_CONNECTIONS": "8",
            ])
            XCTAssertEqual(kept.databaseMaxConnections, 8)
            XCTAssertEqual(kept.databaseMinConnections, 8)
            for (name, value) in [
                ("STRATUS_DATABASE_MAX_CONNECTIONS", "0"), ("STRATUS_DATABASE_MAX_CONNECTIONS", "10001"),
                ("STRATUS_DATABASE_MAX_CONNECTIONS", "-3"), ("STRATUS_DATABASE_MAX_CONNECTIONS", "99999999999999999999"),
                ("STRATUS_DATABASE_MIN_CONNECTIONS", "-1"), ("STRATUS_DATABASE_MIN_CONNECTIONS", "21"), ("STRATUS_DATABASE_MIN_CONNECTIONS", "all"),
            ] {
                XCTAssertThrowsError(try StratusConfiguration.fromEnvironment(["STRATUS_DATA_DIR": directory, name: value]), "\(name)=\(value)") { error in
                    XCTAssertTrue(String(describing: error).contains(name), "\(error)")
                }
            }
        }
    }

    func testPreparedStatementsAreReadAndBounded() throws {
        try withDataDirectory { directory in
            XCTAssertEqual(try StratusConfiguration.fromEnvironment(["STRATUS_DATA_DIR": directory]).preparedStatements, 256)
            XCTAssertEqual(
                try StratusConfiguration.fromEnvironment(["STRATUS_DATA_DIR": directory, "STRATUS_PREPARED_STATEMENTS": "0"]).preparedStatements, 0,
                "0: none")
            for value in ["-1", "10001", "many"] {
                XCTAssertThrowsError(try StratusConfiguration.fromEnvironment(["STRATUS_DATA_DIR": directory, "STRATUS_PREPARED_STATEMENTS": value])) { error in
                    XCTAssertTrue(String(describing: error).contains("STRATUS_PREPARED_STATEMENTS"), "\(error)")
                }
            }
        }
    }

    /// How long `stratus-api`'s graceful shutdown waits for the work it started off requests: read,
    /// bounded, and what the API's task owner is given.
    func testTheShutdownDeadlineIsReadBoundedAndGivenToTheAPIsTaskOwner() throws {
        try withDataDirectory { directory in
            func read(_ value: String?) throws -> StratusConfiguration {
                var environment = ["STRATUS_DATA_DIR": directory]
                environment["STRATUS_SHUTDOWN_DEADLINE_SECONDS"] = value
                return try StratusConfiguration.fromEnvironment(environment)
            }
            let cases: [(value: String?, deadline: Duration?)] = [
                (nil, .seconds(10)), ("0", .zero), ("45", .seconds(45)), ("3600", .seconds(3600)),
                ("-1", nil), ("3601", nil), ("ten", nil), ("", nil), ("1.5", nil),
            ]
            for test in cases {
                if let deadline = test.deadline {
                    let configuration = try read(test.value)
                    XCTAssertEqual(configuration.shutdownDeadline, deadline, "\(test)")
                    XCTAssertEqual(StratusProcess.taskOwner(configuration, logger: TestSupport.logger).deadline, deadline, "\(test)")
                } else {
                    XCTAssertThrowsError(try read(test.value), "\(test)") { error in
                        XCTAssertTrue(String(describing: error).contains("STRATUS_SHUTDOWN_DEADLINE_SECONDS"), "\(error)")
                    }
                }
            }
            XCTAssertEqual(TaskOwner.defaultDeadline, .seconds(10))
        }
    }

    func testTasksOnTheEventLoopsAreTheDefaultAndTheSwitchIsRead() throws {
        XCTAssertTrue(try StratusProcess.tasksOnEventLoops([:]))
        for value in ["true", "1", "on"] {
            XCTAssertTrue(try StratusProcess.tasksOnEventLoops(["STRATUS_TASKS_ON_EVENT_LOOPS": value]), value)
        }
        for value in ["false", "0", "off"] {
            XCTAssertFalse(try StratusProcess.tasksOnEventLoops(["STRATUS_TASKS_ON_EVENT_LOOPS": value]), value)
        }
        for value in ["", "yes", String(repeating: "x", count: 10_000)] {
            XCTAssertThrowsError(try StratusProcess.tasksOnEventLoops(["STRATUS_TASKS_ON_EVENT_LOOPS": value])) { error in
                let text = String(describing: error)
                XCTAssertTrue(text.contains("STRATUS_TASKS_ON_EVENT_LOOPS"), text)
                XCTAssertLessThan(text.count, 200, "a hostile value is not echoed whole")
            }
        }
    }

    /// stratus-api reads the switch before anything else runs: a bad value stops it at once with
    /// exit status 2 and the reason, as every configuration problem does.
    func testStratusAPIRefusesABadTasksOnEventLoopsSwitch() async throws {
        let result = try await StratusExecutable.run("stratus-api", [], settings: ["STRATUS_TASKS_ON_EVENT_LOOPS": "maybe"])
        XCTAssertEqual(result.status, 2, result.output)
        XCTAssertTrue(result.output.contains("STRATUS_TASKS_ON_EVENT_LOOPS must be true or false, got 'maybe'"), result.output)
    }

    func testTheNumberOfEventLoopsIsReadAndBounded() throws {
        XCTAssertNil(try StratusProcess.eventLoops([:]))
        for (value, count) in [("1", 1), ("2", 2), ("256", 256)] {
            XCTAssertEqual(try StratusProcess.eventLoops(["STRATUS_EVENT_LOOPS": value]), count, value)
        }
        for value in ["", "0", "-1", "257", "1.5", "two", String(repeating: "9", count: 10_000)] {
            XCTAssertThrowsError(try StratusProcess.eventLoops(["STRATUS_EVENT_LOOPS": value])) { error in
                let text = String(describing: error)
                XCTAssertTrue(text.contains("STRATUS_EVENT_LOOPS must be a whole number from 1 to 256"), text)
                XCTAssertLessThan(text.count, 200, "a hostile value is not echoed whole")
            }
        }
    }

    func testStratusAPIRefusesABadNumberOfEventLoops() async throws {
        let result = try await StratusExecutable.run("stratus-api", [], settings: ["STRATUS_EVENT_LOOPS": "0"])
        XCTAssertEqual(result.status, 2, result.output)
        XCTAssertTrue(result.output.contains("STRATUS_EVENT_LOOPS must be a whole number from 1 to 256, got '0'"), result.output)
    }

    /// A live stratus-api runs as many event loops as STRATUS_EVENT_LOOPS asks for (SwiftNIO names
    /// each shared loop's thread NIO-SGLTN-…), and serves on them.
    func testStratusAPIRunsTheEventLoopsItIsToldTo() async throws {
        let brokers = try TestSupport.kafkaBrokers()
        try await TestSupport.withMigratedStore { _, url in
            for loops in [1, 3] {
                try await Self.withAPI(url: url, brokers: brokers, settings: ["STRATUS_EVENT_LOOPS": "\(loops)"]) { api in
                    let tasks = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(api.processIdentifier)/task")
                    let names = tasks.compactMap { try? String(contentsOfFile: "/proc/\(api.processIdentifier)/task/\($0)/comm", encoding: .utf8) }
                    // Each loop's thread has a name of its own (…-#1, …-#2); a thread another one started
                    // carries its starter's name until it names itself, so names are counted, not threads.
                    XCTAssertEqual(Set(names.filter { $0.hasPrefix("NIO-SGLTN-") }).count, loops, "\(names.sorted())")
                }
            }
        }
    }

    /// A worker runs its tasks on one event loop unless STRATUS_EVENT_LOOPS asks for more (it
    /// applies one batch at a time; docs/benchmarks.md, "The workers' tasks on one event loop").
    func testAWorkerRunsOneEventLoopUnlessToldOtherwise() async throws {
        let brokers = try TestSupport.kafkaBrokers()
        try await TestSupport.withMigratedStore { _, url in
            for (asked, loops) in [(nil, 1), ("2", 2)] as [(String?, Int)] {
                let topic = "configuration-\(UUID().uuidString.prefix(8))"
                var settings = ["STRATUS_DATABASE_URL": url, "STRATUS_KAFKA_BROKERS": brokers, "STRATUS_TOPIC": topic, "STRATUS_CONSUMER_GROUP_SUFFIX": topic]
                settings["STRATUS_EVENT_LOOPS"] = asked
                try await StratusExecutable.with("stratus-indexer", settings: settings) { indexer in
                    func loopThreads() throws -> Set<String> {
                        let tasks = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(indexer.processIdentifier)/task")
                        let names = tasks.compactMap { try? String(contentsOfFile: "/proc/\(indexer.processIdentifier)/task/\($0)/comm", encoding: .utf8) }
                        return Set(names.filter { $0.hasPrefix("NIO-SGLTN-") })
                    }
                    // The loops start with the process's first task; every loop names its thread as it starts.
                    try await TestSupport.eventually(timeout: .seconds(20), "stratus-indexer's event loops to start") {
                        try indexer.requireRunning()
                        return try loopThreads().count >= loops
                    }
                    let threads = try loopThreads()
                    XCTAssertEqual(threads.count, loops, "STRATUS_EVENT_LOOPS=\(asked ?? "unset"): \(threads.sorted())")
                }
            }
        }
    }

    /// `stratus-api` keeps every connection of its pools open unless told otherwise (its listeners
    /// and the relay's lock hold connections of their own besides, named apart).
    func testStratusAPIKeepsItsConnectionsOpenUnlessToldOtherwise() async throws {
        let brokers = try TestSupport.kafkaBrokers()
        try await TestSupport.withMigratedStore { _, url in
            func open(_ name: String) async throws -> Int64 { try await LoopPoolsTests.otherConnections(url: url, named: name) }
            for (kept, expected) in [(nil, 12), ("0", nil)] as [(String?, Int64?)] {
                var settings = ["STRATUS_DATABASE_MAX_CONNECTIONS": "12"]
                settings["STRATUS_DATABASE_MIN_CONNECTIONS"] = kept
                try await Self.withAPI(url: url, brokers: brokers, settings: settings) { _ in
                    if let expected {
                        try await TestSupport.eventually(timeout: .seconds(10), "\(expected) pooled connections of stratus-api to be open") {
                            try await open("stratus-api") == expected
                        }
                        let dedicated = try await open("stratus-api-dedicated")
                        XCTAssertGreaterThan(dedicated, 0, "the listeners' connections are not the pool's")
                        XCTAssertLessThanOrEqual(dedicated, 4)
                    } else {
                        // Only what it has used: a few statements at its start.
                        let pooled = try await open("stratus-api")
                        XCTAssertLessThan(pooled, 12, "STRATUS_DATABASE_MIN_CONNECTIONS=0 kept every connection open")
                    }
                }
                try await TestSupport.eventually(timeout: .seconds(10), "stratus-api's connections to close") {
                    let pooled = try await open("stratus-api")
                    let dedicated = try await open("stratus-api-dedicated")
                    return pooled == 0 && dedicated == 0
                }
            }
        }
    }

    /// Runs `body` with a live `stratus-api` on `url`, a topic, a free port and a data directory of
    /// its own and `settings` besides, once it answers its health check.
    static func withAPI(url: String, brokers: String, settings: [String: String], _ body: (StratusExecutable) async throws -> Void) async throws {
        let port = try Broker.freePort()
        let topic = "configuration-\(UUID().uuidString.prefix(8))"
        let dataDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("stratus-configuration-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: dataDirectory) }
        let base = [
            "STRATUS_DATABASE_URL": url, "STRATUS_KAFKA_BROKERS": brokers, "STRATUS_TOPIC": topic, "STRATUS_CONSUMER_GROUP_SUFFIX": topic,
            "STRATUS_HTTP_PORT": "\(port)", "STRATUS_SECRET_KEY": SecretKey.generate().hex, "STRATUS_DATA_DIR": dataDirectory,
        ]
        try await StratusExecutable.with("stratus-api", settings: base.merging(settings) { $1 }) { api in
            try await api.answersHealth(at: "http://127.0.0.1:\(port)")
            try await body(api)
        }
    }

    func testTheAuthenticationCacheLifetimeIsReadAndBounded() throws {
        try withDataDirectory { directory in
            let defaults = try StratusConfiguration.fromEnvironment(["STRATUS_DATA_DIR": directory]).api
            XCTAssertEqual(defaults.authCacheTTL, .seconds(1))
            for (value, ttl) in [("0", Duration.zero), ("250", .milliseconds(250)), ("60000", .seconds(60))] {
                let set = try StratusConfiguration.fromEnvironment(["STRATUS_DATA_DIR": directory, "STRATUS_AUTH_CACHE_MS": value]).api
                XCTAssertEqual(set.authCacheTTL, ttl, value)
            }
            for value in ["-1", "60001", "soon"] {
                XCTAssertThrowsError(try StratusConfiguration.fromEnvironment(["STRATUS_DATA_DIR": directory, "STRATUS_AUTH_CACHE_MS": value])) { error in
                    XCTAssertTrue(String(describing: error).contains("STRATUS_AUTH_CACHE_MS"), "\(error)")
                }
            }
        }
    }
    func testTheSyncReadAheadIsReadAndBounded() throws {
        try withDataDirectory { directory in
            XCTAssertEqual(try StratusConfiguration.fromEnvironment(["STRATUS_DATA_DIR": directory]).api.syncReadAheadPages, 64)
            for value in [0, 1, 10_000] {
                let set = try StratusConfiguration.fromEnvironment(["STRATUS_DATA_DIR": directory, "STRATUS_SYNC_READ_AHEAD_PAGES": "\(value)"]).api
                XCTAssertEqual(set.syncReadAheadPages, value)
            }
            for value in ["-1", "10001", "99999999999999999999", "many"] {
                XCTAssertThrowsError(try StratusConfiguration.fromEnvironment(["STRATUS_DATA_DIR": directory, "STRATUS_SYNC_READ_AHEAD_PAGES": value])) { error in
                    XCTAssertTrue(String(describing: error).contains("STRATUS_SYNC_READ_AHEAD_PAGES"), "\(error)")
                }
            }
        }
    }
}
