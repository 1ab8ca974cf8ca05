import Foundation
import StratusCore
import StratusRuntime
import StratusTesting
import XCTest
import Yams

/// The deployment files, checked for structure (no container engine runs here): docker-compose.yml,
/// the Dockerfile against Package.swift's executables, and the CI entry point.
final class DeploymentFilesTests: XCTestCase {
    /// Compose service → the executable it runs.
    private static let appServices = [
        "api": "stratus-api",
        "indexer": "stratus-indexer",
        "subscriptions": "stratus-subscriptions",
        "gc": "stratus-gc",
        "shares": "stratus-shares",
    ]

    private static var root: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    }

    // MARK: - Package.swift

    func testPackageDeclaresTheExpectedExecutables() throws {
        let names = try executableProducts()
        for name in ["stratus"] + Self.appServices.values.sorted() {
            XCTAssertTrue(names.contains(name), "Package.swift has no executable product \(name); found \(names)")
        }
    }

    // MARK: - docker-compose.yml

    func testComposeHasEveryService() throws {
        let services = try composeServices()
        for name in ["postgres", "kafka", "migrate"] + Self.appServices.keys.sorted() {
            XCTAssertNotNil(services[name], "docker-compose.yml has no service \(name)")
        }
        let ui = try XCTUnwrap(services["kafka-ui"] as? [String: Any], "docker-compose.yml has no kafka-ui service")
        XCTAssertEqual(ui["profiles"] as? [String], ["ui"], "kafka-ui runs only under the ui profile")
    }

    func testAppServicesBuildFromTheDockerfileAndShareTheImage() throws {
        let services = try composeServices()
        var images: Set<String> = []
        for name in ["migrate"] + Self.appServices.keys.sorted() {
            let service = try XCTUnwrap(services[name] as? [String: Any], name)
            let build = try XCTUnwrap(service["build"], "\(name) is not built from the Dockerfile")
            if let build = build as? [String: Any] {
                XCTAssertEqual(build["context"] as? String, ".", "\(name) builds from the repository root")
                XCTAssertEqual((build["dockerfile"] as? String) ?? "Dockerfile", "Dockerfile", name)
            } else {
                XCTAssertEqual(build as? String, ".", "\(name) builds from the repository root")
            }
            images.insert(try XCTUnwrap(service["image"] as? String, "\(name) names no image"))
        }
        XCTAssertEqual(images.count, 1, "the migration, API and workers share one image: \(images)")
    }

    func testEachAppServiceRunsItsOwnExecutable() throws {
        let services = try composeServices()
        let executables = try executableProducts()
        for (name, executable) in Self.appServices {
            let service = try XCTUnwrap(services[name] as? [String: Any], name)
            let commandLine = strings(service["entrypoint"]) + strings(service["command"])
            XCTAssertEqual(commandLine.first, executable, "\(name) runs \(commandLine)")
            XCTAssertTrue(executables.contains(executable), "\(executable) is not an executable of Package.swift")
        }
        let migrate = try XCTUnwrap(services["migrate"] as? [String: Any])
        let migration = strings(migrate["entrypoint"]) + strings(migrate["command"])
        XCTAssertEqual(Array(migration.prefix(2)), ["stratus", "migrate"], "migrate runs \(migration)")
    }

    func testAppServicesWaitForTheMigrationAndHealthyServers() throws {
        let services = try composeServices()
        for name in Self.appServices.keys.sorted() {
            let service = try XCTUnwrap(services[name] as? [String: Any], name)
            let dependencies = try XCTUnwrap(service["depends_on"] as? [String: Any], "\(name) needs depends_on with conditions")
            XCTAssertEqual(condition(dependencies["migrate"]), "service_completed_successfully", "\(name) waits for migrate")
            XCTAssertEqual(condition(dependencies["postgres"]), "service_healthy", "\(name) waits for postgres")
            XCTAssertEqual(condition(dependencies["kafka"]), "service_healthy", "\(name) waits for kafka")
        }
        let migrate = try XCTUnwrap(services["migrate"] as? [String: Any])
        let dependencies = try XCTUnwrap(migrate["depends_on"] as? [String: Any])
        XCTAssertEqual(condition(dependencies["postgres"]), "service_healthy", "migrate waits for postgres")
    }

    func testServersHaveHealthchecksAndVolumes() throws {
        let services = try composeServices()
        let postgres = try XCTUnwrap(services["postgres"] as? [String: Any])
        XCTAssertEqual(postgres["image"] as? String, "postgres:16")
        let postgresCheck = strings((postgres["healthcheck"] as? [String: Any])?["test"]).joined(separator: " ")
        XCTAssertTrue(postgresCheck.contains("pg_isready"), "postgres healthcheck: \(postgresCheck)")
        XCTAssertFalse(strings(postgres["volumes"]).isEmpty, "postgres keeps its data in a volume")

        let kafka = try XCTUnwrap(services["kafka"] as? [String: Any])
        XCTAssertEqual(kafka["image"] as? String, "apache/kafka:3.8.0")
        XCTAssertNotNil(kafka["healthcheck"], "kafka has a healthcheck")
        let kafkaEnvironment = environment(of: kafka)
        XCTAssertEqual(kafkaEnvironment["KAFKA_PROCESS_ROLES"], "broker,controller", "kafka runs KRaft in one node")
        for key in ["KAFKA_NODE_ID", "KAFKA_LISTENERS", "KAFKA_ADVERTISED_LISTENERS", "KAFKA_CONTROLLER_QUORUM_VOTERS",
                    "KAFKA_CONTROLLER_LISTENER_NAMES"] {
            XCTAssertNotNil(kafkaEnvironment[key], "kafka sets \(key)")
        }
        XCTAssertEqual(kafkaEnvironment["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"], "1")
        XCTAssertEqual(kafkaEnvironment["KAFKA_ADVERTISED_LISTENERS"]?.contains("kafka:9092"), true)
    }

    func testAppServicesShareTheConfiguration() throws {
        let services = try composeServices()
        for name in ["migrate"] + Self.appServices.keys.sorted() {
            let service = try XCTUnwrap(services[name] as? [String: Any], name)
            let variables = environment(of: service)
            let databaseURL = try XCTUnwrap(variables["STRATUS_DATABASE_URL"], "\(name) has no STRATUS_DATABASE_URL")
            XCTAssertTrue(databaseURL.hasPrefix("postgres://") && databaseURL.contains("@postgres:5432/"), "\(name): \(databaseURL)")
            XCTAssertEqual(variables["STRATUS_KAFKA_BROKERS"], "kafka:9092", name)
            XCTAssertEqual(variables["STRATUS_HTTP_HOST"], "0.0.0.0", name)
            XCTAssertNotNil(variables["STRATUS_SECRET_KEY"], name)
        }
        let api = try XCTUnwrap(services["api"] as? [String: Any])
        XCTAssertTrue(strings(api["ports"]).contains { $0.hasSuffix(":8080") }, "the API publishes port 8080")
    }

    func testNoSecretIsCommitted() throws {
        let services = try composeServices()
        let api = try XCTUnwrap(services["api"] as? [String: Any])
        XCTAssertTrue(environment(of: api)["STRATUS_SECRET_KEY"]?.hasPrefix("${STRATUS_SECRET_KEY:?") == true,
                      "STRATUS_SECRET_KEY comes from the environment and is required")
        let postgres = try XCTUnwrap(services["postgres"] as? [String: Any])
        let password = try XCTUnwrap(environment(of: postgres)["POSTGRES_PASSWORD"])
        XCTAssertTrue(password.hasPrefix("${") && password.contains(":?"), "the database password comes from the environment")
        let databaseURL = try XCTUnwrap(environment(of: api)["STRATUS_DATABASE_URL"])
        XCTAssertTrue(databaseURL.contains("${"), "the database URL takes its password from the environment")
    }

    func testEveryProcessIsAProductionProcessWithTheSameExplicitSecret() throws {
        let services = try composeServices()
        for name in ["migrate"] + Self.appServices.keys.sorted() {
            let service = try XCTUnwrap(services[name] as? [String: Any], name)
            let variables = environment(of: service)
            XCTAssertEqual(variables["STRATUS_DEPLOYMENT"], "production", "\(name) says it is a multi-process deployment")
            XCTAssertTrue(variables["STRATUS_SECRET_KEY"]?.hasPrefix("${STRATUS_SECRET_KEY:?") == true,
                          "\(name) takes the one secret key from the environment, required")
            XCTAssertNil(variables["STRATUS_SECRET_KEY_FILE"], "\(name): one way to pass the key")
        }
    }

    /// What each compose process would read: with the secret it starts, without it it refuses.
    func testComposeProcessesStartOnlyWithTheSecret() throws {
        let services = try composeServices()
        let key = SecretKey.generate().hex
        let dataDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("stratus-compose-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: dataDirectory) }
        for name in ["migrate"] + Self.appServices.keys.sorted() {
            let service = try XCTUnwrap(services[name] as? [String: Any], name)
            var variables = try resolve(environment(of: service), with: ["STRATUS_SECRET_KEY": key, "STRATUS_POSTGRES_PASSWORD": "pw"])
            variables["STRATUS_DATA_DIR"] = dataDirectory
            let configuration = try StratusConfiguration.fromEnvironment(variables)
            XCTAssertEqual(configuration.api.secretKey.hex, key, name)
            XCTAssertEqual(configuration.deployment, .production, name)
            variables["STRATUS_SECRET_KEY"] = nil
            XCTAssertThrowsError(try StratusConfiguration.fromEnvironment(variables), "\(name) starts without the secret") { error in
                XCTAssertTrue(String(describing: error).contains("STRATUS_SECRET_KEY"), "\(error)")
            }
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: dataDirectory + "/dev-secret-key"), "no process generated a key")
    }

    // MARK: - Dockerfile

    func testDockerfileIsMultiStageWithANobleBuilder() throws {
        let stages = try dockerfileLines().filter { $0.uppercased().hasPrefix("FROM ") }
        XCTAssertGreaterThanOrEqual(stages.count, 2, "the Dockerfile has a build and a run stage: \(stages)")
        let builder = try XCTUnwrap(stages.first)
        XCTAssertTrue(builder.contains("swift:") && builder.contains("noble"), "the builder is a Swift image on Ubuntu 24.04: \(builder)")
        XCTAssertTrue(stages.last?.contains("ubuntu:24.04") == true, "the runtime is Ubuntu 24.04: \(stages)")
    }

    func testDockerfileBuildsAndShipsEveryExecutable() throws {
        let dockerfile = try dockerfileLines().joined(separator: "\n")
        for name in try executableProducts() {
            let built = try NSRegularExpression(pattern: "--product\\s+\(NSRegularExpression.escapedPattern(for: name))(\\s|$)")
            XCTAssertNotNil(built.firstMatch(in: dockerfile, range: NSRange(dockerfile.startIndex..., in: dockerfile)),
                            "the Dockerfile does not build --product \(name)")
            let words = Set(dockerfile.split { $0.isWhitespace || $0 == ";" || $0 == "\"" })
            XCTAssertTrue(words.contains(Substring(name)), "the Dockerfile does not name \(name) among what it ships")
        }
        XCTAssertTrue(dockerfile.contains("librdkafka"), "the image installs librdkafka")
        XCTAssertTrue(dockerfile.contains("/usr/lib/swift/linux"), "the image carries the Swift runtime")
    }

    func testTheImageIsAProductionImage() throws {
        let lines = try dockerfileLines()
        XCTAssertTrue(lines.contains { $0.hasPrefix("ENV ") && $0.contains("STRATUS_DEPLOYMENT=production") },
                      "the image's processes refuse to start without a configured secret key")
        XCTAssertFalse(lines.contains { $0.contains("STRATUS_SECRET_KEY") }, "the image carries no secret")
    }

    func testDockerfileShipsTheMigrationsAndRunsUnprivileged() throws {
        let lines = try dockerfileLines()
        XCTAssertTrue(lines.contains { $0.hasPrefix("COPY") && $0.contains("migrations") && $0.contains("/usr/share/stratus/migrations") })
        XCTAssertTrue(lines.contains { $0.contains("STRATUS_MIGRATIONS_DIR=/usr/share/stratus/migrations") })
        let user = try XCTUnwrap(lines.last { $0.uppercased().hasPrefix("USER ") }, "the image sets a user")
        XCTAssertFalse(user.contains("root") || user.hasSuffix(" 0"), "the image runs as a non-root user: \(user)")
    }

    func testDockerignoreKeepsBuildOutputOut() throws {
        let ignored = try String(contentsOf: Self.root.appendingPathComponent(".dockerignore"), encoding: .utf8)
            .split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        for entry in [".build/", ".deps/", ".stratus/", ".git/"] {
            XCTAssertTrue(ignored.contains(entry), ".dockerignore leaves out \(entry)")
        }
        // Package.swift declares targets under Sources/ and Tests/ and the image ships migrations/:
        // the build context must keep them and the builder must copy them, or the package does not load.
        let lines = try dockerfileLines()
        for folder in ["Sources", "Tests", "migrations"] {
            XCTAssertFalse(ignored.contains(folder + "/") || ignored.contains(folder), ".dockerignore must keep \(folder)/")
            XCTAssertTrue(lines.contains { $0.hasPrefix("COPY \(folder) ") }, "the builder copies \(folder)/")
        }
    }

    // MARK: - CI and scripts

    func testCIRunsTheTestScript() throws {
        let url = Self.root.appendingPathComponent(".ci/run")
        let text = try String(contentsOf: url, encoding: .utf8)
        XCTAssertTrue(text.hasPrefix("#!/usr/bin/env bash\n"))
        XCTAssertTrue(text.contains("set -euo pipefail"))
        let exec = text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { $0.hasPrefix("exec ") }
        XCTAssertEqual(exec.count, 1, ".ci/run ends in one exec")
        XCTAssertTrue(exec.first?.hasPrefix("exec scripts/test.sh") == true, ".ci/run runs scripts/test.sh: \(exec)")
    }

    func testScriptsAreStrictBash() throws {
        for script in ["scripts/install-deps.sh", "scripts/test.sh", "scripts/stack.sh", "scripts/fuzz.sh", ".ci/run"] {
            let path = Self.root.appendingPathComponent(script).path
            XCTAssertTrue(FileManager.default.isExecutableFile(atPath: path), "\(script) is executable")
            let text = try String(contentsOfFile: path, encoding: .utf8)
            XCTAssertTrue(text.hasPrefix("#!/usr/bin/env bash\n"), "\(script) is a bash script")
            XCTAssertTrue(text.contains("set -euo pipefail"), "\(script) runs with set -euo pipefail")
        }
        let library = try String(contentsOf: Self.root.appendingPathComponent("scripts/lib.sh"), encoding: .utf8)
        for function in ["free_port", "pg_start", "pg_stop", "tansu_start", "tansu_stop", "tansu_path"] {
            XCTAssertTrue(library.contains("\(function)() {"), "scripts/lib.sh defines \(function)")
        }
    }

    // MARK: - Helpers

    /// The names of Package.swift's `.executable(name: "...")` products.
    private func executableProducts() throws -> [String] {
        let manifest = try String(contentsOf: Self.root.appendingPathComponent("Package.swift"), encoding: .utf8)
        let pattern = try NSRegularExpression(pattern: #"\.executable\(\s*name:\s*"([^"]+)""#)
        let names = pattern.matches(in: manifest, range: NSRange(manifest.startIndex..., in: manifest)).compactMap { match in
            Range(match.range(at: 1), in: manifest).map { String(manifest[$0]) }
        }
        XCTAssertFalse(names.isEmpty, "Package.swift declares no executable products")
        return names
    }

    private func composeServices() throws -> [String: Any] {
        let text = try String(contentsOf: Self.root.appendingPathComponent("docker-compose.yml"), encoding: .utf8)
        let document = try XCTUnwrap(try Yams.load(yaml: text) as? [String: Any], "docker-compose.yml is not a mapping")
        return try XCTUnwrap(document["services"] as? [String: Any], "docker-compose.yml has no services")
    }

    /// Dockerfile instructions, one a line: continuations joined, comments and blank lines dropped.
    private func dockerfileLines() throws -> [String] {
        let text = try String(contentsOf: Self.root.appendingPathComponent("Dockerfile"), encoding: .utf8)
        var lines: [String] = []
        var current = ""
        for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if current.isEmpty && (line.isEmpty || line.hasPrefix("#")) { continue }
            if line.hasSuffix("\\") {
                current += String(line.dropLast()) + " "
            } else {
                current += line
                lines.append(current.trimmingCharacters(in: .whitespaces))
                current = ""
            }
        }
        if !current.isEmpty { lines.append(current) }
        return lines
    }

    /// A compose command, entrypoint, port or volume list as strings (a string is split on spaces).
    private func strings(_ value: Any?) -> [String] {
        switch value {
        case let list as [Any]: return list.map { "\($0)" }
        case let text as String: return text.split(separator: " ").map(String.init)
        default: return []
        }
    }

    /// A service's environment as a dictionary, from either compose form.
    private func environment(of service: [String: Any]) -> [String: String] {
        switch service["environment"] {
        case let mapping as [String: Any]:
            return mapping.mapValues { "\($0)" }
        case let list as [Any]:
            var result: [String: String] = [:]
            for item in list.map({ "\($0)" }) {
                let parts = item.split(separator: "=", maxSplits: 1)
                result[String(parts[0])] = parts.count > 1 ? String(parts[1]) : ""
            }
            return result
        default:
            return [:]
        }
    }

    /// Compose's `${NAME}`, `${NAME:-default}` and `${NAME:?message}` with `values`; a required
    /// variable without a value fails the test (compose would refuse to start).
    private func resolve(_ variables: [String: String], with values: [String: String]) throws -> [String: String] {
        let pattern = try NSRegularExpression(pattern: #"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([-?])([^}]*))?\}"#)
        return variables.mapValues { text in
            let result = NSMutableString(string: text)
            for match in pattern.matches(in: text, range: NSRange(text.startIndex..., in: text)).reversed() {
                func group(_ index: Int) -> String? { match.range(at: index).location == NSNotFound ? nil : (text as NSString).substring(with: match.range(at: index)) }
                let name = group(1) ?? ""
                var replacement = values[name]
                if replacement == nil, group(2) == "-" { replacement = group(3) ?? "" }
                if replacement == nil { XCTFail("compose needs \(name), which the test does not give") }
                result.replaceCharacters(in: match.range, with: replacement ?? "")
            }
            return result as String
        }
    }

    private func condition(_ dependency: Any?) -> String? {
        (dependency as? [String: Any])?["condition"] as? String
    }
}
