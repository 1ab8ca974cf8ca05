import AsyncHTTPClient
import Foundation
import Hummingbird
import HummingbirdTesting
import NIOCore
import StratusCore
import StratusPostgres
import StratusRuntime
import StratusTesting
import Synchronization
import XCTest

/// Distributed tracing through the pipeline, with the built executables and a small OTLP/HTTP
/// collector of the test's own (http/json, decoded here): one `records/modify` is one trace that
/// holds the API's request span, its database transaction, the relay's publish, the indexer's and
/// the subscriptions worker's applies and the webhook delivery of the notification it logged. And
/// tracing is off unless asked for.
final class TracingTests: XCTestCase {
    /// A span as the collector received it.
    struct ReceivedSpan: Sendable, CustomStringConvertible {
        var service: String
        var traceID: String
        var spanID: String
        var parentSpanID: String
        var name: String
        var attributes: [String: String]

        var description: String {
            "\(service) \(name) trace=\(traceID) span=\(spanID) parent=\(parentSpanID.isEmpty ? "-" : parentSpanID) \(attributes)"
        }
    }

    /// What the collector holds: every span of every export, and how many exports came.
    final class Received: Sendable {
        let state = Mutex<(spans: [ReceivedSpan], exports: Int)>(([], 0))
        var spans: [ReceivedSpan] { state.withLock { $0.spans } }
        var exports: Int { state.withLock { $0.exports } }

        /// Reads an OTLP/HTTP JSON export (`ExportTraceServiceRequest`).
        func add(_ body: Data) throws {
            typealias Object = [String: Any]
            let request = try XCTUnwrap(JSONSerialization.jsonObject(with: body) as? Object)
            var spans: [ReceivedSpan] = []
            for resource in request["resourceSpans"] as? [Object] ?? [] {
                let resourceAttributes = Self.attributes((resource["resource"] as? Object)?["attributes"])
                for scope in resource["scopeSpans"] as? [Object] ?? [] {
                    for span in scope["spans"] as? [Object] ?? [] {
                        spans.append(ReceivedSpan(
                            service: resourceAttributes["service.name"] ?? "?", traceID: span["traceId"] as? String ?? "",
                            spanID: span["spanId"] as? String ?? "", parentSpanID: span["parentSpanId"] as? String ?? "",
                            name: span["name"] as? String ?? "", attributes: Self.attributes(span["attributes"])))
                    }
                }
            }
            state.withLock {
                $0.spans += spans
                $0.exports += 1
            }
        }

        static func attributes(_ list: Any?) -> [String: String] {
            var found: [String: String] = [:]
            for attribute in list as? [[String: Any]] ?? [] {
                guard let key = attribute["key"] as? String, let value = attribute["value"] as? [String: Any], let first = value.first else { continue }
                found[key] = "\(first.value)"
            }
            return found
        }
    }

    /// Runs `body` with an OTLP/HTTP collector listening on a port of its own (`/v1/traces`).
    static func withCollector(_ body: @Sendable (Int, Received) async throws -> Void) async throws {
        let received = Received()
        let router = Router()
        router.post("/v1/traces") { request, _ -> Response in
            let bytes = try await request.body.collect(upTo: 32 << 20)
            try received.add(Data(buffer: bytes))
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: "{}")))
        }
        // A webhook receiver beside it, for the notifications' deliveries.
        router.post("/hook") { _, _ in HTTPResponse.Status.ok }
        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)), logger: TestSupport.logger)
        try await app.test(.live) { client in
            try await body(try XCTUnwrap(client.port), received)
        }
    }

    func testOneRecordWriteIsOneTraceFromTheAPIThroughTheRelayToEachWorker() async throws {
        let brokers = try TestSupport.kafkaBrokers()
        let url = try await TestSupport.createMigratedDatabase()
        let key = SecretKey.generate()
        try await Self.withCollector { collectorPort, received in
            let token = try await TestSupport.withStore(url: url) { store in
                let token = try await ContainerStore(store: store).create(container: "iCloud.com.example.notes", label: "test", logger: TestSupport.logger)
                _ = try await DeliveryStore(store: store).createWebhook(
                    container: "iCloud.com.example.notes", url: "http://127.0.0.1:\(collectorPort)/hook", logger: TestSupport.logger)
                return token
            }
            let topic = "tracing-\(UUID().uuidString.prefix(8))"
            let port = try Broker.freePort()
            let dataDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("stratus-tracing-\(UUID().uuidString)").path
            defer { try? FileManager.default.removeItem(atPath: dataDirectory) }
            let base = [
                "STRATUS_DATABASE_URL": url, "STRATUS_KAFKA_BROKERS": brokers, "STRATUS_TOPIC": topic, "STRATUS_TOPIC_PARTITIONS": "1",
                "STRATUS_CONSUMER_GROUP_SUFFIX": topic, "STRATUS_SECRET_KEY": key.hex, "STRATUS_DATA_DIR": dataDirectory,
                "STRATUS_KAFKA_BACKGROUND_FETCH_WAIT_MS": "100", "STRATUS_WEBHOOK_ALLOW_LOOPBACK": "true",
            ]
            let traced = base.merging([
                "OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:\(collectorPort)",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json", "OTEL_BSP_SCHEDULE_DELAY": "100",
                // A collector's credential, as a deployment would send it: never in a log.
                "OTEL_EXPORTER_OTLP_HEADERS": "x-collector-key=collector-secret-4f1c",
            ]) { $1 }
            // The API first: its relay makes the topic the workers read.
            try await StratusExecutable.with("stratus-api", settings: traced.merging(["STRATUS_HTTP_PORT": "\(port)"]) { $1 }) { api in
                let endpoint = "http://127.0.0.1:\(port)"
                try await api.answersHealth(at: endpoint)
                try await StratusExecutable.with("stratus-indexer", settings: traced) { indexer in
                    try await StratusExecutable.with("stratus-subscriptions", settings: traced) { subscriptions in
                        let user = WebAuthToken(userRecordName: "_alice", container: "iCloud.com.example.notes", expiresAt: Int64(Date().timeIntervalSince1970) + 3600)
                        let database = "/database/1/iCloud.com.example.notes/development/private/"
                        let query = "?ckAPIToken=\(token)&ckWebAuthToken=\(user.signed(with: key))"
                        // A zone, and a database subscription whose notifications go to the webhook.
                        let zone = try await Self.post(endpoint + database + "zones/modify" + query, [
                            "operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Notes"]]]]])
                        XCTAssertNotNil((zone["zones"] as? [[String: Any]])?.first, "\(zone)")
                        let subscription = try await Self.post(endpoint + database + "subscriptions/modify" + query, [
                            "operations": [["operationType": "create", "subscription": ["subscriptionID": "db", "subscriptionType": "database"]]]])
                        XCTAssertNotNil((subscription["subscriptions"] as? [[String: Any]])?.first?["subscriptionID"], "\(subscription)")
                        func create(_ name: String, at endpoint: String) async throws {
                            let saved = try await Self.post(endpoint + database + "records/modify" + query, ["zoneID": ["zoneName": "Notes"], "operations": [[
                                "operationType": "create", "record": ["recordName": name, "recordType": "Note", "fields": ["title": ["value": "hello"]]],
                            ]]])
                            XCTAssertNotNil((saved["records"] as? [[String: Any]])?.first?["recordChangeTag"], "\(saved)")
                        }
                        // First a write through an API process with only the endpoint set (tracing off):
                        // it records nothing, and its event carries no trace (its relay is off, so the
                        // traced process publishes every event).
                        let plainPort = try Broker.freePort()
                        let plain = traced.merging([
                            "OTEL_TRACES_EXPORTER": "", "OTEL_SERVICE_NAME": "stratus-api-plain", "STRATUS_RELAY": "off", "STRATUS_HTTP_PORT": "\(plainPort)",
                        ]) { $1 }.filter { !$0.value.isEmpty }
                        try await StratusExecutable.with("stratus-api", settings: plain) { plainAPI in
                            try await plainAPI.answersHealth(at: "http://127.0.0.1:\(plainPort)")
                            try await create("plain", at: "http://127.0.0.1:\(plainPort)")
                        }
                        try await create("traced", at: endpoint)

                        var complete: [ReceivedSpan] = []
                        do {
                            try await TestSupport.eventually(timeout: .seconds(60), "one trace with the API, database, relay, indexer and subscriptions spans") {
                                for process in [api, indexer, subscriptions] { try process.requireRunning() }
                                complete = Self.completeTrace(in: received.spans)
                                return !complete.isEmpty
                            }
                        } catch {
                            print("the collector received \(received.exports) exports:\n" + received.spans.map(\.description).joined(separator: "\n"))
                            throw error
                        }
                        // The spans hang together: every parent named is a span of the same trace.
                        let ids = Set(complete.map(\.spanID))
                        let roots = complete.filter { $0.parentSpanID.isEmpty }
                        XCTAssertEqual(roots.map(\.name).count, 1, "one root: the request\n\(complete.map(\.description).joined(separator: "\n"))")
                        for span in complete where !span.parentSpanID.isEmpty {
                            XCTAssertTrue(ids.contains(span.parentSpanID), "the parent of \(span) is in the trace")
                        }
                        // Nothing from the untraced process, and no span for its write's event anywhere.
                        XCTAssertFalse(received.spans.contains { $0.service == "stratus-api-plain" })
                        let requestTraces = Set(received.spans.filter { $0.attributes["stratus.request_id"] != nil }.map(\.traceID))
                        for span in received.spans where span.name.hasSuffix(" apply") || span.name.hasPrefix("deliver ") {
                            XCTAssertTrue(requestTraces.contains(span.traceID), "only traced requests' events start worker spans: \(span)")
                        }
                        // The trace context each event carries: the traced write's names the trace; the plain one's none.
                        let traceID = try XCTUnwrap(Self.hex(complete[0].traceID))
                        let plainTraced = try await TestSupport.count(url: url, """
                            SELECT count(*) FROM events WHERE payload::text LIKE '%"plain"%' AND causation->>'traceParent' IS NOT NULL
                            """)
                        XCTAssertEqual(plainTraced, 0)
                        let tracedEvents = try await TestSupport.count(url: url, """
                            SELECT count(*) FROM events WHERE payload::text LIKE '%"traced"%' AND causation->>'traceParent' LIKE \("00-\(traceID)-%")
                            """)
                        XCTAssertEqual(tracedEvents, 1)
                        for process in [api, indexer, subscriptions] {
                            XCTAssertFalse(process.output().contains("collector-secret-4f1c"), "\(process.name) logged the collector's credential")
                            XCTAssertTrue(process.output().contains("_HEADERS") && process.output().contains("<redacted>"),
                                          "the exporter says what it read, not what it held")
                        }
                        // The push senders' HTTP clients record no span of their own (it would hold the receiver's URL).
                        XCTAssertFalse(received.spans.contains { $0.service == "stratus-subscriptions" && $0.attributes["url.full"] != nil })
                        // No statement's text or values, and no credential, in any span.
                        for span in received.spans {
                            for value in span.attributes.values + [span.name] {
                                XCTAssertFalse(value.contains(token) || value.contains("hello") || value.contains("INSERT"), "\(span)")
                            }
                        }
                    }
                }
            }
        }
    }

    /// The spans of the trace that holds the `records/modify` request and each part of the pipeline
    /// it went through; empty until they have all arrived.
    static func completeTrace(in spans: [ReceivedSpan]) -> [ReceivedSpan] {
        let traces = Dictionary(grouping: spans, by: \.traceID)
        for request in spans where request.service == "stratus-api" && request.attributes["url.path"]?.hasSuffix("/records/modify") == true {
            let trace = traces[request.traceID] ?? []
            let parts: [(ReceivedSpan) -> Bool] = [
                { $0.service == "stratus-api" && $0.attributes["db.system.name"] == "postgresql" },
                { $0.service == "stratus-api" && $0.name.hasPrefix("publish ") },
                { $0.service == "stratus-indexer" && $0.name == "stratus-indexer apply" },
                { $0.service == "stratus-subscriptions" && $0.name == "stratus-subscriptions apply" },
                { $0.service == "stratus-subscriptions" && $0.name == "deliver webhook" },
            ]
            if parts.allSatisfy({ part in trace.contains(where: part) }) { return trace }
        }
        return []
    }

    /// A trace id as the hex digits of a `traceparent`, whether the export wrote it in hex (as the
    /// OTLP JSON encoding asks) or in base64 (the generic protobuf JSON encoding of bytes).
    static func hex(_ id: String) -> String? {
        if id.count == 32, id.allSatisfy(\.isHexDigit) { return id.lowercased() }
        guard let bytes = Data(base64Encoded: id), bytes.count == 16 else { return nil }
        return bytes.map { String(format: "%02x", $0) }.joined()
    }

    static func post(_ url: String, _ json: [String: Any]) async throws -> [String: Any] {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.body = .bytes(ByteBuffer(data: try JSONSerialization.data(withJSONObject: json)))
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let data = Data(buffer: try await response.body.collect(upTo: 1 << 20))
        return try XCTUnwrap(JSONSerialization.jsonObject(with: data) as? [String: Any], "\(response.status)")
    }

    /// Off by default: without `OTEL_TRACES_EXPORTER=otlp` no exporter is set up and nothing is
    /// bootstrapped (the other `OTEL_*` variables alone turn nothing on); a value this build cannot
    /// honour is refused at start.
    func testTracingIsOffUnlessTheTracesExporterIsOTLP() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("stratus-tracing-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let defaults = try StratusConfiguration.fromEnvironment(["STRATUS_DATA_DIR": directory])
        XCTAssertEqual(defaults.tracing, .off)
        XCTAssertFalse(defaults.api.tracing, "no request tracing middleware")
        for environment in [
            ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_SERVICE_NAME": "x"],
            ["OTEL_TRACES_EXPORTER": "none"],
            ["OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"],
        ] {
            let settings = try TracingSettings(environment: environment)
            XCTAssertFalse(settings.enabled, "\(environment)")
            XCTAssertTrue(try ProcessTracing.services(settings, logger: TestSupport.logger).isEmpty, "no exporter service: \(environment)")
        }
        XCTAssertTrue(try TracingSettings(environment: ["OTEL_TRACES_EXPORTER": "otlp"]).enabled)
        let on = try StratusConfiguration.fromEnvironment(["STRATUS_DATA_DIR": directory, "OTEL_TRACES_EXPORTER": "otlp"])
        XCTAssertTrue(on.tracing.enabled && on.api.tracing)
        for environment in [
            ["OTEL_TRACES_EXPORTER": "zipkin"],
            ["OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"],
            ["OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"],
        ] {
            XCTAssertThrowsError(try StratusConfiguration.fromEnvironment(environment.merging(["STRATUS_DATA_DIR": directory]) { $1 }), "\(environment)")
        }
    }
}
