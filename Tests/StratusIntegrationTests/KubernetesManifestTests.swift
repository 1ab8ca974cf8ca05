import Foundation
import StratusCore
import StratusRuntime
import XCTest
import Yams

/// The Kubernetes manifests (deploy/kubernetes), checked for structure (no cluster runs here): the
/// base and its overlays, one Deployment per process with its probes on endpoints the processes
/// serve, the migration, disruption budgets and autoscalers, and the same settings as
/// docker-compose.yml, which each process would start with.
final class KubernetesManifestTests: XCTestCase {
    /// Deployment → what it runs, and compose's service of the same process.
    private static let processes = [
        "stratus-api": "api",
        "stratus-indexer": "indexer",
        "stratus-subscriptions": "subscriptions",
        "stratus-gc": "gc",
        "stratus-shares": "shares",
    ]

    private static var root: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    }

    private static var kubernetes: URL { root.appendingPathComponent("deploy/kubernetes") }

    // MARK: - Kustomizations

    func testTheBaseListsFilesThatExistAndTheOverlaysBuildOnIt() throws {
        let base = try mapping(at: "base/kustomization.yaml")
        let resources = try XCTUnwrap(base["resources"] as? [String])
        XCTAssertFalse(resources.isEmpty)
        for resource in resources {
            XCTAssertTrue(FileManager.default.fileExists(atPath: Self.kubernetes.appendingPathComponent("base/\(resource)").path), "base lists \(resource)")
        }
        for overlay in ["development", "production"] {
            let kustomization = try mapping(at: "overlays/\(overlay)/kustomization.yaml")
            XCTAssertEqual(kustomization["resources"] as? [String], ["../../base"], overlay)
            XCTAssertNotNil(kustomization["namespace"] as? String, "\(overlay) names its namespace")
        }
        // Every manifest file of the base is listed: nothing written is left out of a deployment.
        let files = try FileManager.default.contentsOfDirectory(atPath: Self.kubernetes.appendingPathComponent("base").path)
            .filter { $0.hasSuffix(".yaml") && $0 != "kustomization.yaml" }
        XCTAssertEqual(Set(files), Set(resources))
    }

    // MARK: - Processes

    func testEveryProcessHasADeploymentRunningItsOwnExecutable() throws {
        let deployments = try objects(kind: "Deployment")
        XCTAssertEqual(Set(deployments.keys), Set(Self.processes.keys))
        for (name, deployment) in deployments {
            let container = try mainContainer(deployment, name)
            XCTAssertEqual(container["command"] as? [String], [name], name)
            XCTAssertEqual(container["image"] as? String, "stratus", "\(name) runs the one image (set by the kustomization's images)")
            let selector = try XCTUnwrap((deployment["spec"] as? [String: Any])?["selector"] as? [String: Any])
            let labels = try XCTUnwrap(((template(deployment)["metadata"] as? [String: Any])?["labels"]) as? [String: String])
            for (key, value) in try XCTUnwrap(selector["matchLabels"] as? [String: String]) {
                XCTAssertEqual(labels[key], value, "\(name)'s pods match its selector")
            }
        }
    }

    func testTheMigrationRunsAsAJobAndBeforeEveryProcess() throws {
        let jobs = try objects(kind: "Job")
        let job = try XCTUnwrap(jobs["stratus-migrate"])
        let spec = try XCTUnwrap((((job["spec"] as? [String: Any])?["template"] as? [String: Any])?["spec"]) as? [String: Any])
        let containers = try XCTUnwrap(spec["containers"] as? [[String: Any]])
        XCTAssertEqual(containers.first?["command"] as? [String], ["stratus", "migrate"])
        XCTAssertNotEqual(spec["restartPolicy"] as? String, "Always", "a Job's pod ends")
        for (name, deployment) in try objects(kind: "Deployment") {
            let initContainers = try XCTUnwrap(podSpec(deployment)["initContainers"] as? [[String: Any]], "\(name) waits for the migration")
            XCTAssertEqual(initContainers.first?["command"] as? [String], ["stratus", "migrate"], name)
        }
    }

    func testProbesUseTheEndpointsTheProcessesServe() throws {
        let operations = try source("Sources/StratusAPI/OperationsRoutes.swift")
        let observability = try source("Sources/StratusRuntime/Observability.swift")
        for (name, deployment) in try objects(kind: "Deployment") {
            let container = try mainContainer(deployment, name)
            let readiness = try probe(container, "readinessProbe", name)
            let liveness = try probe(container, "livenessProbe", name)
            let port = try XCTUnwrap((container["ports"] as? [[String: Any]])?.first)
            XCTAssertEqual(readiness.port, port["name"] as? String, name)
            XCTAssertEqual(liveness.port, port["name"] as? String, name)
            let environment = try containerEnvironment(container)
            if name == "stratus-api" {
                XCTAssertEqual(readiness.path, "/ready", "the API is ready once it reaches PostgreSQL")
                XCTAssertEqual(liveness.path, "/health")
                XCTAssertTrue(operations.contains(#"router.get("/ready")"#) && operations.contains(#"router.get("/health")"#))
                XCTAssertEqual(port["containerPort"] as? Int, Int(environment["STRATUS_HTTP_PORT"] ?? ""), "the probe's port is the one the API listens on")
            } else {
                XCTAssertEqual(readiness.path, "/health", name)
                XCTAssertEqual(liveness.path, "/health", name)
                XCTAssertTrue(observability.contains(#"router.get("/health")"#))
                XCTAssertEqual(port["containerPort"] as? Int, Int(environment["STRATUS_METRICS_PORT"] ?? ""), "\(name) serves /health on its metrics port")
            }
            // A stopping pod is given longer than the API's own shutdown deadline.
            let grace = try XCTUnwrap(podSpec(deployment)["terminationGracePeriodSeconds"] as? Int, name)
            XCTAssertGreaterThan(grace, 10, name)
        }
    }

    func testEveryProcessHasADisruptionBudgetAndAnAutoscaler() throws {
        let budgets = try objects(kind: "PodDisruptionBudget")
        let autoscalers = try objects(kind: "HorizontalPodAutoscaler")
        let workerSource = try source("Sources/StratusWorkers/Shared/Worker.swift")
        for (name, deployment) in try objects(kind: "Deployment") {
            let selector = try XCTUnwrap(((deployment["spec"] as? [String: Any])?["selector"] as? [String: Any])?["matchLabels"] as? [String: String])
            let budget = try XCTUnwrap(budgets[name], "\(name) has a disruption budget")
            XCTAssertEqual(((budget["spec"] as? [String: Any])?["selector"] as? [String: Any])?["matchLabels"] as? [String: String], selector, name)
            let autoscaler = try XCTUnwrap(autoscalers[name], "\(name) has an autoscaler")
            let spec = try XCTUnwrap(autoscaler["spec"] as? [String: Any])
            XCTAssertEqual((spec["scaleTargetRef"] as? [String: Any])?["name"] as? String, name)
            let metrics = try XCTUnwrap(spec["metrics"] as? [[String: Any]])
            if name == "stratus-api" {
                XCTAssertEqual(metrics.first?["type"] as? String, "Resource", "the API scales on CPU")
                XCTAssertGreaterThanOrEqual(spec["minReplicas"] as? Int ?? 0, 2, "two API pods at least: one can be drained")
            } else {
                // Workers scale on the lag they export, by their own name; never past the partitions.
                let external = try XCTUnwrap(metrics.first?["external"] as? [String: Any], name)
                let metric = try XCTUnwrap(external["metric"] as? [String: Any])
                let metricName = try XCTUnwrap(metric["name"] as? String)
                XCTAssertTrue(workerSource.contains("Gauge(label: \"\(metricName)\""), "\(metricName) is a gauge the workers export")
                XCTAssertEqual((metric["selector"] as? [String: Any])?["matchLabels"] as? [String: String], ["worker": name], name)
                XCTAssertLessThanOrEqual(spec["maxReplicas"] as? Int ?? .max, 8, "\(name): more pods than the topic's partitions would sit idle")
            }
        }
    }

    // MARK: - Settings

    /// Every setting compose gives a process, the manifests give it too, with the same value where
    /// the value is not the site's own (addresses, secrets); every setting they add is documented;
    /// and each process would start with them (given the secrets), refusing to without its key.
    func testTheSettingsAgreeWithComposeAndEveryProcessWouldStart() throws {
        let compose = try XCTUnwrap(try Yams.load(yaml: String(contentsOf: Self.root.appendingPathComponent("docker-compose.yml"), encoding: .utf8)) as? [String: Any])
        let services = try XCTUnwrap(compose["services"] as? [String: Any])
        let configuration = try XCTUnwrap(objects(kind: "ConfigMap")["stratus-config"]?["data"] as? [String: String])
        let secrets = try exampleSecrets()
        let documented = try source("docs/configuration.md")
        let siteSpecific: Set<String> = ["STRATUS_DATABASE_URL", "STRATUS_KAFKA_BROKERS", "STRATUS_SECRET_KEY", "STRATUS_LOG_LEVEL"]
        let key = SecretKey.generate().hex
        for (name, deployment) in try objects(kind: "Deployment") {
            let service = try XCTUnwrap(services[try XCTUnwrap(Self.processes[name])] as? [String: Any], name)
            let composeEnvironment = try XCTUnwrap(service["environment"] as? [String: Any]).mapValues { "\($0)" }
            var environment = configuration.merging(secrets) { _, secret in secret }
            environment.merge(try containerEnvironment(try mainContainer(deployment, name))) { _, own in own }
            for (variable, value) in composeEnvironment {
                XCTAssertNotNil(environment[variable], "\(name): compose sets \(variable), the manifests do not")
                if !siteSpecific.contains(variable) { XCTAssertEqual(environment[variable], value, "\(name): \(variable)") }
            }
            for variable in environment.keys {
                XCTAssertTrue(documented.contains("`\(variable)`"), "\(variable) is not in docs/configuration.md")
            }
            environment["STRATUS_SECRET_KEY"] = key
            environment["STRATUS_DATA_DIR"] = FileManager.default.temporaryDirectory.appendingPathComponent("stratus-k8s-\(UUID().uuidString)").path
            let parsed = try StratusConfiguration.fromEnvironment(environment)
            XCTAssertEqual(parsed.deployment, .production, name)
            XCTAssertEqual(parsed.api.secretKey.hex, key, name)
            environment["STRATUS_SECRET_KEY"] = nil
            XCTAssertThrowsError(try StratusConfiguration.fromEnvironment(environment), "\(name) would start without the secret key")
        }
    }

    func testNoSecretIsCommitted() throws {
        let configuration = try XCTUnwrap(objects(kind: "ConfigMap")["stratus-config"]?["data"] as? [String: String])
        for variable in ["STRATUS_SECRET_KEY", "STRATUS_DATABASE_URL", "STRATUS_S3_SECRET_ACCESS_KEY"] {
            XCTAssertNil(configuration[variable], "\(variable) belongs in the Secret, not the ConfigMap")
        }
        XCTAssertEqual(Set(try exampleSecrets().keys), ["STRATUS_SECRET_KEY", "STRATUS_DATABASE_URL", "STRATUS_S3_SECRET_ACCESS_KEY"])
        for value in try exampleSecrets().values { XCTAssertTrue(value.contains("replace"), "the example holds placeholders only: \(value)") }
        let ignored = try source(".gitignore")
        XCTAssertTrue(ignored.contains("deploy/kubernetes/overlays/*/secrets.env"), "an overlay's secrets file stays out of git")
        for (name, deployment) in try objects(kind: "Deployment") {
            let sources = try XCTUnwrap(try mainContainer(deployment, name)["envFrom"] as? [[String: Any]])
            XCTAssertTrue(sources.contains { ($0["secretRef"] as? [String: Any])?["name"] as? String == "stratus-secrets" }, name)
        }
    }

    // MARK: - Rendered and checked against the Kubernetes API's schema

    /// Every overlay renders (scripts/render-manifests.py, as `kubectl apply -k` would) into
    /// objects the Kubernetes API's own schema accepts, strictly (no unknown field); the overlays'
    /// namespaces, images and patches are in what they render.
    func testEveryOverlayRendersIntoObjectsTheKubernetesAPIAccepts() throws {
        let (status, output) = try Self.render(["base", "overlays/development", "overlays/production"].map { Self.kubernetes.appendingPathComponent($0).path })
        XCTAssertEqual(status, 0, output)
        for directory in ["base", "overlays/development", "overlays/production"] {
            XCTAssertTrue(output.contains("deploy/kubernetes/\(directory): "), "\(directory) was checked: \(output.suffix(2_000))")
        }
        XCTAssertTrue(output.contains("namespace: stratus-dev"), "the development overlay's namespace")
        XCTAssertTrue(output.contains("image: registry.example.com/stratus:1.0.0"), "the production overlay's image")
        XCTAssertTrue(output.contains("STRATUS_LOG_LEVEL: debug"), "the development overlay's merged setting")
        XCTAssertFalse(output.contains("invalid:"), output)
    }

    /// The check refuses what the API server would: a Deployment with a field its schema lacks,
    /// and one whose field has the wrong type.
    func testTheCheckRefusesAnObjectTheKubernetesAPIWouldRefuse() throws {
        let copy = FileManager.default.temporaryDirectory.appendingPathComponent("stratus-manifests-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: copy) }
        for (broken, expected) in [("  replicas: 2\n", "  replicas: 2\n  replicaz: 2\n"), ("  replicas: 2\n", "  replicas: two\n")] {
            try? FileManager.default.removeItem(at: copy)
            try FileManager.default.copyItem(at: Self.kubernetes, to: copy)
            let api = copy.appendingPathComponent("base/api.yaml")
            let text = try String(contentsOf: api, encoding: .utf8)
            XCTAssertTrue(text.contains(broken))
            try text.replacingOccurrences(of: broken, with: expected).write(to: api, atomically: true, encoding: .utf8)
            let (status, output) = try Self.render([copy.appendingPathComponent("base").path])
            XCTAssertNotEqual(status, 0, "\(expected): \(output.suffix(2_000))")
            XCTAssertTrue(output.contains("invalid: \(copy.appendingPathComponent("base").path): Deployment stratus-api"), output.suffix(2_000).description)
        }
    }

    /// Runs scripts/render-manifests.py --validate on `directories`: its status and its output.
    private static func render(_ directories: [String]) throws -> (Int32, String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        let python = ProcessInfo.processInfo.environment["STRATUS_TEST_PYTHON"] ?? "python3"
        process.arguments = [python, root.appendingPathComponent("scripts/render-manifests.py").path, "--validate"] + directories
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("stratus-render-\(UUID().uuidString.prefix(8)).log")
        FileManager.default.createFile(atPath: log.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: log) }
        let handle = try FileHandle(forWritingTo: log)
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        process.waitUntilExit()
        try handle.close()
        return (process.terminationStatus, try String(contentsOf: log, encoding: .utf8))
    }

    // MARK: - Reading the manifests

    private func mapping(at path: String) throws -> [String: Any] {
        let text = try String(contentsOf: Self.kubernetes.appendingPathComponent(path), encoding: .utf8)
        return try XCTUnwrap(try Yams.load(yaml: text) as? [String: Any], path)
    }

    /// The base's objects of `kind`, by name.
    private func objects(kind: String) throws -> [String: [String: Any]] {
        var found: [String: [String: Any]] = [:]
        for resource in try XCTUnwrap(try mapping(at: "base/kustomization.yaml")["resources"] as? [String]) {
            let text = try String(contentsOf: Self.kubernetes.appendingPathComponent("base/\(resource)"), encoding: .utf8)
            for case let object as [String: Any] in try Yams.load_all(yaml: text) where object["kind"] as? String == kind {
                let name = try XCTUnwrap((object["metadata"] as? [String: Any])?["name"] as? String, "a \(kind) in \(resource) has no name")
                XCTAssertNil(found[name], "two \(kind)s named \(name)")
                found[name] = object
            }
        }
        return found
    }

    private func template(_ deployment: [String: Any]) throws -> [String: Any] {
        try XCTUnwrap((deployment["spec"] as? [String: Any])?["template"] as? [String: Any])
    }

    private func podSpec(_ deployment: [String: Any]) throws -> [String: Any] {
        try XCTUnwrap(try template(deployment)["spec"] as? [String: Any])
    }

    private func mainContainer(_ deployment: [String: Any], _ name: String) throws -> [String: Any] {
        let containers = try XCTUnwrap(try podSpec(deployment)["containers"] as? [[String: Any]], name)
        XCTAssertEqual(containers.count, 1, name)
        return try XCTUnwrap(containers.first)
    }

    private func containerEnvironment(_ container: [String: Any]) throws -> [String: String] {
        var environment: [String: String] = [:]
        for entry in container["env"] as? [[String: Any]] ?? [] {
            environment[try XCTUnwrap(entry["name"] as? String)] = try XCTUnwrap(entry["value"] as? String, "env values are literal strings")
        }
        return environment
    }

    private func probe(_ container: [String: Any], _ key: String, _ name: String) throws -> (path: String, port: String) {
        let get = try XCTUnwrap((container[key] as? [String: Any])?["httpGet"] as? [String: Any], "\(name) has an HTTP \(key)")
        return (try XCTUnwrap(get["path"] as? String), try XCTUnwrap(get["port"] as? String))
    }

    private func exampleSecrets() throws -> [String: String] {
        let text = try source("deploy/kubernetes/overlays/development/secrets.env.example")
        var values: [String: String] = [:]
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            let parts = line.split(separator: "=", maxSplits: 1)
            if parts.count == 2 { values[String(parts[0])] = String(parts[1]) }
        }
        return values
    }

    private func source(_ path: String) throws -> String {
        try String(contentsOf: Self.root.appendingPathComponent(path), encoding: .utf8)
    }
}
