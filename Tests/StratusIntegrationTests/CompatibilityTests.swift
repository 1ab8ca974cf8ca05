import Foundation
import Hummingbird
import HummingbirdTesting
import StratusAPI
import StratusCore
import StratusPostgres
import StratusTesting
import XCTest

/// Wire compatibility with Apple's CloudKit Web Services Reference (issue #18): for every operation
/// Stratus serves, the requests Apple documents and the shapes of the answers Apple documents, as
/// fixtures sent to the real API over a fresh database and checked key by key.
///
/// ## Fixtures
/// `Compatibility/<operation with / as ->.json` (`records/modify` → `records-modify.json`), plus
/// `errors.json` (top-level error dictionaries) and `_shapes.json` (the named shapes all share):
///
///     {"operation": "records/modify", "reference": "Apple's pages this file follows",
///      "cases": [{"name": "…", "about": "…", "indexer": false, "steps": [step, …]}]}
///
/// Each case runs on a database of its own (with the relay and the indexer when `"indexer": true`,
/// for queries). Its steps run in order; a step is
///
///     {"operation": "records/modify",   // default: the file's operation
///      "method": "POST",                // or "GET"
///      "database": "private",           // or "public", "shared"
///      "user": "_alice",                // default "_alice"; null: the API token only
///      "query": "ckAPIToken={apiToken}",  // replaces the query string ({apiToken}: the container's token)
///      "body": {…},                     // a string "$name" anywhere is replaced by a captured value
///      "until": shape,                  // first repeat (bounded) until a 200 answer has this shape
///      "expect": {"status": 200, "body": shape},  // without it the step must answer 200
///      "capture": {"name": "records.0.recordChangeTag"},  // dotted key path; numbers index arrays
///      "about": "…"}
///
/// ## Shapes
/// - `"string"`, `"number"`, `"bool"`, `"object"`, `"array"`, `"any"`
/// - `"base64"`: a string of standard padded base64 (A–Z a–z 0–9 + /, `=` padding, length a multiple of 4)
/// - `"@name"`: the named shape `name` of `_shapes.json`
/// - `{"equals": value}`, `{"enum": [value, …]}`, `{"includes": "text"}` (a string containing `text`)
/// - `{"type": "object", "required": {key: shape}, "optional": {key: shape}, "absent": [key],
///   "each": shape (every member), "sameValue": [[key, key]] (equal when both present),
///   "when": [{"key": key, "in": [value, …], "require": {key: shape}}] (conditional keys)}`;
///   keys the shape does not name are allowed, as clients ignore keys they do not know
/// - `{"array-of": shape, "count": n, "minCount": n, "contains": [shape, …] (each matched by some
///   element), "elements": [shape, …] (exactly these, in order)}`
/// - `{"all-of": [shape, …]}`, `{"any-of": [shape, …]}`
///
/// An unknown key in a case, a step or a shape fails the test, so a typo cannot make a check vanish.
final class CompatibilityTests: XCTestCase {
    // MARK: - One test per fixture file

    func testZonesList() async throws { try await runFixture("zones-list") }
    func testZonesLookup() async throws { try await runFixture("zones-lookup") }
    func testZonesModify() async throws { try await runFixture("zones-modify") }
    func testZonesChanges() async throws { try await runFixture("zones-changes") }
    func testChangesDatabase() async throws { try await runFixture("changes-database") }
    func testRecordsModify() async throws { try await runFixture("records-modify") }
    func testRecordsLookup() async throws { try await runFixture("records-lookup") }
    func testRecordsQuery() async throws { try await runFixture("records-query") }
    func testRecordsChanges() async throws { try await runFixture("records-changes") }
    func testChangesZone() async throws { try await runFixture("changes-zone") }
    func testRecordsResolve() async throws { try await runFixture("records-resolve") }
    func testRecordsAccept() async throws { try await runFixture("records-accept") }
    func testUsersCaller() async throws { try await runFixture("users-caller") }
    func testSubscriptionsModify() async throws { try await runFixture("subscriptions-modify") }
    func testSubscriptionsList() async throws { try await runFixture("subscriptions-list") }
    func testSubscriptionsLookup() async throws { try await runFixture("subscriptions-lookup") }
    func testUsersCurrent() async throws { try await runFixture("users-current") }
    func testUsersDiscover() async throws { try await runFixture("users-discover") }
    func testUsersLookupEmail() async throws { try await runFixture("users-lookup-email") }
    func testUsersLookupID() async throws { try await runFixture("users-lookup-id") }
    func testErrors() async throws { try await runFixture("errors") }
    func testAssetsUpload() async throws { try await runFixture("assets-upload") }
    func testAssetsRereference() async throws { try await runFixture("assets-rereference") }

    // MARK: - The suite checks itself

    /// Every fixture file is run by a test method above, and every operation the API routes under
    /// `/database/1/…` (with each of its HTTP methods) is sent by the fixture named after it.
    func testEveryFixtureRunsAndEveryRoutedOperationHasOne() throws {
        let source = try String(contentsOf: URL(fileURLWithPath: #filePath), encoding: .utf8)
        let pattern = try NSRegularExpression(pattern: #"func test[A-Za-z]+\(\) async throws \{ try await runFixture\("([a-z0-9-]+)"\) \}"#)
        let run = Set(pattern.matches(in: source, range: NSRange(source.startIndex..., in: source)).compactMap { match in
            Range(match.range(at: 1), in: source).map { String(source[$0]) }
        })
        let files = Set(try FileManager.default.contentsOfDirectory(atPath: Self.directory.path)
            .filter { $0.hasSuffix(".json") }.map { String($0.dropLast(".json".count)) }).subtracting(["_shapes"])
        XCTAssertFalse(files.isEmpty, "no fixtures in \(Self.directory.path)")
        XCTAssertEqual(files.subtracting(run).sorted(), [], "fixture files that no test method runs")
        XCTAssertEqual(run.subtracting(files).sorted(), [], "test methods naming a fixture file that does not exist")

        let store = try PostgresStore(url: "postgres://stratus@127.0.0.1:9/unused", logger: TestSupport.logger)
        let router = buildRouter(APIDependencies(store: store, readiness: [], metrics: { "" }), configuration: APIConfiguration(secretKey: SecretKey.generate()))
        let prefix = "/database/1/{container}/{environment}/{database}/"
        let routed = router.routes.compactMap { route -> (method: String, operation: String)? in
            let path = route.path.description
            return path.hasPrefix(prefix) ? (route.method.rawValue, String(path.dropFirst(prefix.count))) : nil
        }
        XCTAssertGreaterThan(routed.count, 10, "the router lists too few database operations: \(routed)")
        for (method, operation) in routed {
            let name = operation.replacingOccurrences(of: "/", with: "-")
            guard files.contains(name) else {
                XCTFail("\(method) \(operation) is routed but has no fixture \(name).json")
                continue
            }
            let fixture = try Self.load(name)
            XCTAssertEqual(fixture["operation"]?.stringValue, operation, "\(name).json must be the fixture of \(operation)")
            let sent = (fixture["cases"]?.arrayValue ?? []).flatMap { $0["steps"]?.arrayValue ?? [] }.map { step in
                "\(step["method"]?.stringValue ?? "POST") \(step["operation"]?.stringValue ?? operation)"
            }
            XCTAssertTrue(sent.contains("\(method) \(operation)"), "\(name).json never sends \(method) \(operation)")
        }
    }

    /// A checker that accepts everything would make every fixture pass: it must refuse a wrong type,
    /// a missing required key, a token that is not standard padded base64, a conditional key that
    /// is missing, and a key that must be absent — and accept the right value.
    func testShapeCheckerRejectsWrongTypesMissingKeysAndNonBase64Tokens() throws {
        let checker = ShapeChecker(named: try Self.load("_shapes")["shapes"]?.objectValue ?? [:])
        let zone = #"{"zoneID":{"zoneName":"Notes","ownerRecordName":"_a","zoneType":"REGULAR_CUSTOM_ZONE"},"syncToken":"AAECAw==","atomic":true}"#
        XCTAssertEqual(checker.problems(try Self.json(zone), .string("@zone")), [], "a right zone dictionary passes")

        let wrongType = try Self.json(zone.replacingOccurrences(of: #""atomic":true"#, with: #""atomic":"true""#))
        XCTAssertEqual(checker.problems(wrongType, .string("@zone")), [#"body.atomic: expected bool, got string "true""#])
        let missing = try Self.json(zone.replacingOccurrences(of: #""syncToken":"AAECAw==","#, with: ""))
        XCTAssertEqual(checker.problems(missing, .string("@zone")), ["body.syncToken: missing required key"])

        for token in ["2.eyJ2IjoxfQ.c2lnbmF0dXJl", "AAECAw", "AA-_", "AAECAw===", "", "AAE CAw=="] {
            XCTAssertFalse(checker.problems(.string(token), .string("base64")).isEmpty, "'\(token)' is not standard padded base64")
        }
        for token in ["AAECAw==", "AAECAwQ=", "AAECAwQF", "+/+/"] {
            XCTAssertEqual(checker.problems(.string(token), .string("base64")), [], "'\(token)' is standard padded base64")
        }

        let busy = #"{"uuid":"u","serverErrorCode":"TRY_AGAIN_LATER","reason":"busy"}"#
        XCTAssertEqual(checker.problems(try Self.json(busy), .string("@error")), [#"body.retryAfter: missing, but required when serverErrorCode is "TRY_AGAIN_LATER""#])
        XCTAssertEqual(checker.problems(try Self.json(busy.replacingOccurrences(of: "}", with: #","retryAfter":2}"#)), .string("@error")), [])
        let signIn = #"{"uuid":"u","serverErrorCode":"AUTHENTICATION_REQUIRED","reason":"sign in"}"#
        XCTAssertEqual(checker.problems(try Self.json(signIn), .string("@error")).count, 1, "AUTHENTICATION_REQUIRED needs redirectURL")

        let record = try Self.json(#"{"fields":{"a":{"value":1},"b":{"value":2}}}"#)
        XCTAssertEqual(checker.problems(record, try Self.json(#"{"type":"object","required":{"fields":{"type":"object","absent":["b"]}}}"#)),
                       ["body.fields.b: present, but must be absent"])
        XCTAssertEqual(checker.problems(try Self.json(#"[1,"x"]"#), try Self.json(#"{"array-of":"number"}"#)), [#"body[1]: expected number, got string "x""#])
        XCTAssertFalse(checker.problems(record, try Self.json(#"{"type":"object","requird":{}}"#)).isEmpty, "a misspelt shape key is reported")
    }

    // MARK: - Running fixtures

    static var directory: URL { URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Compatibility") }

    static func load(_ name: String) throws -> JSONValue {
        let url = directory.appendingPathComponent("\(name).json")
        do { return try JSONDecoder().decode(JSONValue.self, from: Data(contentsOf: url)) } catch {
            throw CaseRunner.FixtureError(description: "\(url.lastPathComponent) is not readable JSON: \(error)")
        }
    }

    static func json(_ text: String) throws -> JSONValue { try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)) }

    private static let caseKeys: Set<String> = ["name", "about", "behaviour", "indexer", "steps"]

    /// Runs every case of a fixture file, each on a database of its own.
    func runFixture(_ name: String) async throws {
        let checker = ShapeChecker(named: try Self.load("_shapes")["shapes"]?.objectValue ?? [:])
        let fixture = try Self.load(name)
        let cases = fixture["cases"]?.arrayValue ?? []
        XCTAssertFalse(cases.isEmpty, "\(name).json has no cases")
        for (index, testCase) in cases.enumerated() {
            let label = "\(name).json › \(testCase["name"]?.stringValue ?? "case \(index + 1)")"
            let unknown = Set(testCase.objectValue.map { Array($0.keys) } ?? []).subtracting(Self.caseKeys)
            guard unknown.isEmpty, let steps = testCase["steps"]?.arrayValue, !steps.isEmpty else {
                XCTFail("\(label): a case needs steps and takes only \(Self.caseKeys.sorted()); unknown: \(unknown.sorted())")
                continue
            }
            let runner = CaseRunner(checker: checker, operation: fixture["operation"]?.stringValue, label: label)
            // A case that throws (a server missing, a wait that timed out) is reported and the next case runs.
            do {
                if testCase["indexer"] == .bool(true) {
                    try await QueryTests.withStack { api, client in try await runner.run(steps, api: api, client: client) }
                } else {
                    try await RecordAPITests.withAPI { api, client in try await runner.run(steps, api: api, client: client) }
                }
            } catch {
                XCTFail("\(label): \(error)")
            }
        }
    }
}

/// Runs the steps of one case, reporting each mismatch as a test failure naming the fixture, the
/// case, the step and the key path.
struct CaseRunner: Sendable {
    let checker: ShapeChecker
    /// The fixture file's operation, the default of its steps.
    let operation: String?
    let label: String

    private static let stepKeys: Set<String> = ["operation", "method", "database", "user", "query", "body", "until", "expect", "capture", "about"]

    struct Call {
        var uri: String
        var method: HTTPRequest.Method
        var body: JSONValue?
    }

    func run(_ steps: [JSONValue], api: RecordAPITests.Fixture, client: any TestClientProtocol) async throws {
        var captured: [String: JSONValue] = [:]
        for (index, step) in steps.enumerated() {
            let operation = step["operation"]?.stringValue ?? self.operation ?? "?"
            let place = "\(label) › step \(index + 1) (\(step["method"]?.stringValue ?? "POST") \(operation))"
            let unknown = Set(step.objectValue.map { Array($0.keys) } ?? []).subtracting(Self.stepKeys)
            let expect = step["expect"]?.objectValue ?? [:]
            guard unknown.isEmpty, Set(expect.keys).isSubset(of: ["status", "body"]) else {
                return XCTFail("\(place): unknown keys \(unknown.union(Set(expect.keys).subtracting(["status", "body"])).sorted())")
            }
            let request: Call
            do { request = try makeRequest(step, operation: operation, api: api, captured: captured) } catch {
                return XCTFail("\(place): \(error)")
            }
            if let awaited = step["until"] {
                try await TestSupport.eventually("\(place) to answer with \(ShapeChecker.render(awaited))") {
                    let (status, body) = try await send(request, client: client)
                    return status == 200 && checker.problems(body, awaited).isEmpty
                }
            }
            let (status, body) = try await send(request, client: client)
            let expectedStatus = expect["status"].flatMap { (status: JSONValue) -> Int? in if case .int(let code) = status { Int(code) } else { nil } } ?? 200
            if status != expectedStatus {
                XCTFail("\(place): HTTP status \(status), expected \(expectedStatus); body \(ShapeChecker.render(body))")
                // A setup step that failed leaves nothing for the next steps to work on.
                if step["expect"] == nil { return }
            }
            if let shape = expect["body"] {
                for problem in checker.problems(body, shape) { XCTFail("\(place): \(problem)") }
            }
            for (name, keyPath) in (step["capture"]?.objectValue ?? [:]).sorted(by: { $0.key < $1.key }) {
                guard let path = keyPath.stringValue, let value = body.value(at: path) else {
                    return XCTFail("\(place): nothing to capture as $\(name) at \(ShapeChecker.render(keyPath)); the rest of the case is skipped")
                }
                captured[name] = value
            }
        }
    }

    struct FixtureError: Error, CustomStringConvertible { var description: String }

    private func makeRequest(_ step: JSONValue, operation: String, api: RecordAPITests.Fixture, captured: [String: JSONValue]) throws -> Call {
        let user: String? = switch step["user"] {
        case nil: "_alice"
        case .null?: nil
        case .string(let name)?: name
        default: throw FixtureError(description: "user must be a string or null")
        }
        var uri = api.path(operation, database: step["database"]?.stringValue ?? "private", user: user)
        if let query = step["query"]?.stringValue {
            uri = String(uri.prefix { $0 != "?" }) + "?" + query.replacingOccurrences(of: "{apiToken}", with: api.apiToken)
        }
        let method: HTTPRequest.Method = switch step["method"]?.stringValue ?? "POST" {
        case "GET": .get
        case "POST": .post
        case let other: throw FixtureError(description: "method must be GET or POST, not \(other)")
        }
        return Call(uri: uri, method: method, body: try step["body"].map { try Self.substitute($0, captured) })
    }

    /// Replaces every string `"$name"` by the value captured as `name`.
    static func substitute(_ value: JSONValue, _ captured: [String: JSONValue]) throws -> JSONValue {
        switch value {
        case .string(let text) where text.hasPrefix("$"):
            guard let found = captured[String(text.dropFirst())] else { throw FixtureError(description: "\(text) was not captured by an earlier step") }
            return found
        case .array(let elements): return .array(try elements.map { try substitute($0, captured) })
        case .object(let members): return .object(try members.mapValues { try substitute($0, captured) })
        default: return value
        }
    }

    /// Sends a request and decodes the answer exactly (JSON booleans stay booleans, integers stay integers).
    private func send(_ request: Call, client: any TestClientProtocol) async throws -> (Int, JSONValue) {
        let body = try request.body.map { ByteBuffer(data: try JSONEncoder().encode($0)) }
        return try await client.execute(uri: request.uri, method: request.method, body: body) { response in
            let data = Data(buffer: response.body)
            let json = (try? JSONDecoder().decode(JSONValue.self, from: data)) ?? .string("(not JSON) " + String(decoding: data.prefix(300), as: UTF8.self))
            return (Int(response.status.code), json)
        }
    }
}
