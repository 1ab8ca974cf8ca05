import Foundation
import Hummingbird
import HummingbirdTesting
import StratusAPI
import StratusCore
import StratusPostgres
import StratusRuntime
import StratusTesting
import XCTest

/// records/modify and records/lookup over HTTP with Apple's JSON shapes, against the real PostgreSQL.
final class RecordAPITests: XCTestCase {
    struct Fixture: Sendable {
        let store: PostgresStore
        let configuration: APIConfiguration
        let apiToken: String
        /// Owns the work the API starts off its requests (sync pages read ahead, maintenance runs);
        /// runs for as long as `withAPI`'s fixture.
        var tasks = TaskOwner(name: "stratus-api", logger: TestSupport.logger)
        /// The database's URL, for a process the test starts (set by `withAPI`).
        var databaseURL = ""
        let container = "iCloud.com.example.notes"

        func path(_ operation: String, database: String = "private", user: String? = "_alice") -> String {
            var query = "ckAPIToken=\(apiToken)"
            if let user {
                let token = WebAuthToken(userRecordName: user, container: container, expiresAt: Int64(Date().timeIntervalSince1970) + 3600)
                query += "&ckWebAuthToken=\(token.signed(with: configuration.secretKey))"
            }
            return "/database/1/\(container)/development/\(database)/\(operation)?\(query)"
        }
    }

    typealias Body = [String: Any]

    func withFixture(_ body: @Sendable (Fixture, any TestClientProtocol) async throws -> Void) async throws {
        try await Self.withAPI(body)
    }

    /// The API over a fresh migrated database with one container; `maxResults` caps result pages.
    /// `maintenance`: the console may start reindex and replay runs (as `stratus-api` does, without a broker).
    static func withAPI(
        maxResults: Int? = nil, maxResponseBytes: Int? = nil, maintenance: Bool = false,
        _ body: @Sendable (Fixture, any TestClientProtocol) async throws -> Void
    ) async throws {
        try await TestSupport.withMigratedStore { store, url in
            let token = try await ContainerStore(store: store).create(container: "iCloud.com.example.notes", label: "test", logger: TestSupport.logger)
            var configuration = APIConfiguration(secretKey: SecretKey.generate())
            configuration.console.workers = StratusProcess.workerNames
            if let maxResults { configuration.limits.maxResults = maxResults }
            if let maxResponseBytes { configuration.limits.maxResponseBytes = maxResponseBytes }
            let tasks = TaskOwner(name: "stratus-api", logger: TestSupport.logger)
            let fixture = Fixture(store: store, configuration: configuration, apiToken: token, tasks: tasks, databaseURL: url)
            let launcher = maintenance ? Maintenance.launcher(store: store, broker: .init(kafka: nil, topic: "stratus.events"), owner: tasks) : nil
            let router = buildRouter(
                APIDependencies(store: store, readiness: [], metrics: { "" }, maintenance: launcher, tasks: tasks), configuration: configuration)
            try await TaskOwnerTests.whileRunning(tasks) { _ in
                try await Application(router: router, logger: TestSupport.logger).test(.router) { client in
                    try await body(fixture, client)
                }
            }
        }
    }

    /// Posts JSON and returns the status and the decoded body.
    @discardableResult
    static func post(_ client: any TestClientProtocol, _ uri: String, _ json: Any) async throws -> (Int, Body) {
        let data = try JSONSerialization.data(withJSONObject: json)
        return try await client.execute(uri: uri, method: .post, body: ByteBuffer(data: data)) { response in
            let object = try JSONSerialization.jsonObject(with: Data(buffer: response.body), options: [.fragmentsAllowed]) as? Body ?? [:]
            return (Int(response.status.code), object)
        }
    }

    static func createZone(_ client: any TestClientProtocol, _ fixture: Fixture, _ name: String, user: String = "_alice") async throws {
        let (status, _) = try await post(client, fixture.path("zones/modify", user: user), ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": name]]]]])
        XCTAssertEqual(status, 200)
    }

    static func modify(_ client: any TestClientProtocol, _ fixture: Fixture, zone: String? = "Notes", atomic: Bool? = nil, user: String = "_alice",
                       database: String = "private", extra: Body = [:], _ operations: [Body]) async throws -> (Int, [Body]) {
        var body: Body = ["operations": operations]
        if let zone { body["zoneID"] = ["zoneName": zone] }
        if let atomic { body["atomic"] = atomic }
        body.merge(extra) { _, new in new }
        let (status, json) = try await post(client, fixture.path("records/modify", database: database, user: user), body)
        return (status, json["records"] as? [Body] ?? [json])
    }

    static func lookup(_ client: any TestClientProtocol, _ fixture: Fixture, zone: String = "Notes", user: String = "_alice", _ names: [String], extra: Body = [:]) async throws -> [Body] {
        var body: Body = ["zoneID": ["zoneName": zone], "records": names.map { ["recordName": $0] }]
        body.merge(extra) { _, new in new }
        let (_, json) = try await post(client, fixture.path("records/lookup", user: user), body)
        return json["records"] as? [Body] ?? []
    }

    static func note(_ name: String, _ fields: Body, tag: String? = nil, type: String = "Note") -> Body {
        var record: Body = ["recordName": name, "recordType": type, "fields": fields]
        if let tag { record["recordChangeTag"] = tag }
        return record
    }

    static func fields(_ record: Body) -> [String: Body] { record["fields"] as? [String: Body] ?? [:] }

    func testEveryOperationType() async throws {
        try await withFixture { fixture, client in
            try await Self.createZone(client, fixture, "Notes")
            // create
            var (status, records) = try await Self.modify(client, fixture, [["operationType": "create", "record": Self.note("n1", ["title": ["value": "Hello"], "body": ["value": "World"]])]])
            XCTAssertEqual(status, 200)
            let created = records[0]
            XCTAssertEqual(created["recordName"] as? String, "n1")
            XCTAssertEqual(created["recordType"] as? String, "Note")
            let tag1 = try XCTUnwrap(created["recordChangeTag"] as? String)
            XCTAssertEqual((created["created"] as? Body)?["userRecordName"] as? String, "_alice")
            XCTAssertNotNil((created["modified"] as? Body)?["timestamp"] as? Int)
            XCTAssertEqual((created["zoneID"] as? Body)?["zoneName"] as? String, "Notes")
            // create again → EXISTS
            (_, records) = try await Self.modify(client, fixture, [["operationType": "create", "record": Self.note("n1", [:])]])
            XCTAssertEqual(records[0]["serverErrorCode"] as? String, "EXISTS")
            // update merges: only the sent field changes; unsent fields stay.
            (_, records) = try await Self.modify(client, fixture, [["operationType": "update", "record": Self.note("n1", ["title": ["value": "Hi"]], tag: tag1)]])
            let tag2 = try XCTUnwrap(records[0]["recordChangeTag"] as? String)
            XCTAssertNotEqual(tag1, tag2, "the change tag changes on every write")
            XCTAssertEqual(Self.fields(records[0])["title"]?["value"] as? String, "Hi")
            XCTAssertEqual(Self.fields(records[0])["body"]?["value"] as? String, "World")
            // update with a stale tag → CONFLICT carrying the server's record
            (status, records) = try await Self.modify(client, fixture, [["operationType": "update", "record": Self.note("n1", ["title": ["value": "stale"]], tag: tag1)]])
            XCTAssertEqual(records[0]["serverErrorCode"] as? String, "CONFLICT")
            let server = try XCTUnwrap(records[0]["serverRecord"] as? Body)
            XCTAssertEqual(server["recordChangeTag"] as? String, tag2)
            XCTAssertEqual(Self.fields(server)["title"]?["value"] as? String, "Hi")
            // update without a tag → BAD_REQUEST
            (_, records) = try await Self.modify(client, fixture, [["operationType": "update", "record": Self.note("n1", ["title": ["value": "x"]])]])
            XCTAssertEqual(records[0]["serverErrorCode"] as? String, "BAD_REQUEST")
            // forceUpdate ignores the tag and still merges
            (_, records) = try await Self.modify(client, fixture, [["operationType": "forceUpdate", "record": Self.note("n1", ["title": ["value": "Forced"]], tag: "whatever")]])
            let tag3 = try XCTUnwrap(records[0]["recordChangeTag"] as? String)
            XCTAssertEqual(Self.fields(records[0])["body"]?["value"] as? String, "World")
            // replace drops unsent fields
            (_, records) = try await Self.modify(client, fixture, [["operationType": "replace", "record": Self.note("n1", ["title": ["value": "Only"]], tag: tag3)]])
            let tag4 = try XCTUnwrap(records[0]["recordChangeTag"] as? String)
            XCTAssertEqual(Set(Self.fields(records[0]).keys), ["title"])
            // forceReplace creates a missing record and replaces an existing one
            (_, records) = try await Self.modify(client, fixture, [
                ["operationType": "forceReplace", "record": Self.note("n2", ["title": ["value": "New"]])],
                ["operationType": "forceReplace", "record": Self.note("n1", ["other": ["value": 1]])],
            ])
            XCTAssertEqual(records[0]["recordName"] as? String, "n2")
            XCTAssertEqual(Set(Self.fields(records[1]).keys), ["other"])
            let tag5 = try XCTUnwrap(records[1]["recordChangeTag"] as? String)
            XCTAssertNotEqual(tag4, tag5)
            // delete needs the current tag
            (_, records) = try await Self.modify(client, fixture, [["operationType": "delete", "record": ["recordName": "n1", "recordChangeTag": tag4]]])
            XCTAssertEqual(records[0]["serverErrorCode"] as? String, "CONFLICT")
            (_, records) = try await Self.modify(client, fixture, [["operationType": "delete", "record": ["recordName": "n1", "recordChangeTag": tag5]]])
            XCTAssertEqual(records[0]["deleted"] as? Bool, true)
            // forceDelete without a tag; a missing record is NOT_FOUND
            (_, records) = try await Self.modify(client, fixture, [["operationType": "forceDelete", "record": ["recordName": "n2"]]])
            XCTAssertEqual(records[0]["deleted"] as? Bool, true)
            (_, records) = try await Self.modify(client, fixture, [["operationType": "forceDelete", "record": ["recordName": "n2"]]])
            XCTAssertEqual(records[0]["serverErrorCode"] as? String, "NOT_FOUND")
            let lookedUp = try await Self.lookup(client, fixture, ["n1", "n2"])
            XCTAssertEqual(lookedUp.map { $0["serverErrorCode"] as? String }, ["NOT_FOUND", "NOT_FOUND"])

            // Every successful write appended an event with consecutive zone sequences.
            let events = try await EventLog(store: fixture.store).events(after: 0, limit: 100, logger: TestSupport.logger)
            let recordEvents = events.filter { $0.type.rawValue.hasPrefix("record.") }
            XCTAssertEqual(recordEvents.map(\.type.rawValue), ["record.saved", "record.saved", "record.saved", "record.saved", "record.saved", "record.saved", "record.deleted", "record.deleted"])
            // (The schema's events, which the first save's new type and fields appended, belong to no zone.)
            let zoneEvents = events.filter { $0.type != SchemaChanged.eventType }
            XCTAssertEqual(zoneEvents.compactMap(\.zoneSequence), Array(1...Int64(zoneEvents.count)))
            let saved = try recordEvents[1].decode(RecordSaved.self)
            XCTAssertEqual(saved.previousChangeTag, tag1)
            XCTAssertEqual(saved.changedFields, ["title"])
        }
    }

    func testEveryFieldTypeRoundTrips() async throws {
        try await withFixture { fixture, client in
            try await Self.createZone(client, fixture, "Notes")
            let big: Int64 = 9_007_199_254_740_993  // 2^53 + 1: not representable as a double
            let location: Body = ["latitude": 47.5, "longitude": 8.25, "horizontalAccuracy": 5.0, "altitude": 400.0, "timestamp": 1_700_000_000_000]
            let asset = try await AssetTests.upload(client, fixture, record: "all", field: "a", [1, 2, 3])
            let listed = try await AssetTests.upload(client, fixture, record: "all", field: "al", [4])
            let fields: Body = [
                "s": ["value": "text", "type": "STRING"],
                "i": ["value": big, "type": "INT64"],
                "iString": ["value": "-9223372036854775808", "type": "INT64"],
                "d": ["value": 3.25, "type": "DOUBLE"],
                "t": ["value": 1_700_000_000_123, "type": "TIMESTAMP"],
                "b": ["value": Data([0, 1, 2, 255]).base64EncodedString(), "type": "BYTES"],
                "r": ["value": ["recordName": "target", "action": "NONE"], "type": "REFERENCE"],
                "a": ["value": asset, "type": "ASSETID"],
                "l": ["value": location, "type": "LOCATION"],
                "sl": ["value": ["a", "b"], "type": "STRING_LIST"],
                "il": ["value": [1, big], "type": "INT64_LIST"],
                "dl": ["value": [1.5, 2], "type": "DOUBLE_LIST"],
                "tl": ["value": [1, 2], "type": "TIMESTAMP_LIST"],
                "bl": ["value": [Data([9]).base64EncodedString()], "type": "BYTES_LIST"],
                "rl": ["value": [["recordName": "x"], ["recordName": "y", "action": "NONE"]], "type": "REFERENCE_LIST"],
                "al": ["value": [listed], "type": "ASSETID_LIST"],
                "ll": ["value": [location], "type": "LOCATION_LIST"],
                "inferredString": ["value": "x"],
                "inferredInt": ["value": 42],
                "inferredDouble": ["value": 4.5],
                "inferredList": ["value": [1, 2, 3]],
                "inferredReference": ["value": ["recordName": "target"]],
                "inferredLocation": ["value": ["latitude": 1.0, "longitude": 2.0]],
            ]
            let (status, records) = try await Self.modify(client, fixture, [["operationType": "create", "record": Self.note("all", fields)]])
            XCTAssertEqual(status, 200, "\(records)")
            let looked = try await Self.lookup(client, fixture, ["all"])
            let stored = Self.fields(looked[0])
            let expectedTypes = [
                "s": "STRING", "i": "INT64", "iString": "INT64", "d": "DOUBLE", "t": "TIMESTAMP", "b": "BYTES", "r": "REFERENCE", "a": "ASSETID",
                "l": "LOCATION", "sl": "STRING_LIST", "il": "INT64_LIST", "dl": "DOUBLE_LIST", "tl": "TIMESTAMP_LIST", "bl": "BYTES_LIST",
                "rl": "REFERENCE_LIST", "al": "ASSETID_LIST", "ll": "LOCATION_LIST", "inferredString": "STRING", "inferredInt": "INT64",
                "inferredDouble": "DOUBLE", "inferredList": "INT64_LIST", "inferredReference": "REFERENCE", "inferredLocation": "LOCATION",
            ]
            for (name, type) in expectedTypes { XCTAssertEqual(stored[name]?["type"] as? String, type, name) }
            XCTAssertEqual((stored["i"]?["value"] as? NSNumber)?.int64Value, big, "INT64 beyond 2^53 is exact")
            XCTAssertEqual((stored["iString"]?["value"] as? NSNumber)?.int64Value, Int64.min)
            XCTAssertEqual(stored["d"]?["value"] as? Double, 3.25)
            XCTAssertEqual((stored["t"]?["value"] as? NSNumber)?.int64Value, 1_700_000_000_123)
            XCTAssertEqual(stored["b"]?["value"] as? String, Data([0, 1, 2, 255]).base64EncodedString())
            XCTAssertEqual((stored["r"]?["value"] as? Body)?["recordName"] as? String, "target")
            XCTAssertEqual((stored["a"]?["value"] as? Body)?["receipt"] as? String, asset["receipt"] as? String)
            XCTAssertEqual((stored["l"]?["value"] as? Body)?["latitude"] as? Double, 47.5)
            XCTAssertEqual((stored["l"]?["value"] as? Body)?["altitude"] as? Double, 400)
            XCTAssertEqual(stored["sl"]?["value"] as? [String], ["a", "b"])
            XCTAssertEqual((stored["il"]?["value"] as? [NSNumber])?.map(\.int64Value), [1, big])
            XCTAssertEqual(stored["dl"]?["value"] as? [Double], [1.5, 2])
            XCTAssertEqual(((stored["rl"]?["value"] as? [Body])?.compactMap { $0["recordName"] as? String }), ["x", "y"])
            // The exact digits travel on the wire, as a number and, with numbersAsStrings, as a string.
            let raw = try await client.execute(uri: fixture.path("records/lookup"), method: .post,
                                               body: ByteBuffer(string: #"{"zoneID":{"zoneName":"Notes"},"records":[{"recordName":"all"}],"desiredKeys":["i"]}"#)) { String(buffer: $0.body) }
            XCTAssertTrue(raw.contains("9007199254740993"), raw)
            let strings = try await Self.lookup(client, fixture, ["all"], extra: ["numbersAsStrings": true, "desiredKeys": ["i", "d"]])
            XCTAssertEqual(Self.fields(strings[0])["i"]?["value"] as? String, "9007199254740993")
            XCTAssertEqual(Self.fields(strings[0])["d"]?["value"] as? String, "3.25")
            XCTAssertEqual(Set(Self.fields(strings[0]).keys), ["i", "d"], "desiredKeys trims the fields")

            // Mismatched types are BAD_REQUEST naming the field.
            for (name, value) in [("wrong", ["value": "text", "type": "INT64"]), ("bad", ["value": 1, "type": "NOPE"]), ("frac", ["value": 1.5, "type": "INT64"]),
                                  ("bytes", ["value": "%%%", "type": "BYTES"]), ("loc", ["value": ["latitude": 100, "longitude": 0], "type": "LOCATION"]),
                                  ("boolean", ["value": true])] as [(String, Body)] {
                let (_, errors) = try await Self.modify(client, fixture, [["operationType": "create", "record": Self.note("x-\(name)", [name: value])]])
                XCTAssertEqual(errors[0]["serverErrorCode"] as? String, "BAD_REQUEST", name)
                XCTAssertTrue((errors[0]["reason"] as? String ?? "").contains(name), "the reason names the field \(name): \(errors[0])")
            }
        }
    }

    func testAtomicAndNonAtomicBatchesWithMixedFailures() async throws {
        try await withFixture { fixture, client in
            try await Self.createZone(client, fixture, "Notes")
            _ = try await Self.modify(client, fixture, [["operationType": "create", "record": Self.note("existing", ["v": ["value": 1]])]])
            let batch: [Body] = [
                ["operationType": "create", "record": Self.note("a", ["v": ["value": 1]])],
                ["operationType": "create", "record": Self.note("existing", ["v": ["value": 2]])],
                ["operationType": "create", "record": Self.note("b", ["v": ["value": 3]])],
            ]
            // Atomic (the default in custom zones): nothing is stored, the innocent get ATOMIC_ERROR.
            var (_, records) = try await Self.modify(client, fixture, batch)
            XCTAssertEqual(records.map { $0["serverErrorCode"] as? String }, ["ATOMIC_ERROR", "EXISTS", "ATOMIC_ERROR"])
            var looked = try await Self.lookup(client, fixture, ["a", "b"])
            XCTAssertEqual(looked.map { $0["serverErrorCode"] as? String }, ["NOT_FOUND", "NOT_FOUND"])
            // Not atomic: each item reports its own fate, and what is reported stored is stored.
            (_, records) = try await Self.modify(client, fixture, atomic: false, batch)
            XCTAssertEqual(records.map { $0["serverErrorCode"] as? String }, [nil, "EXISTS", nil])
            looked = try await Self.lookup(client, fixture, ["a", "b", "existing"])
            XCTAssertEqual(looked.compactMap { Self.fields($0)["v"]?["value"] as? Int }, [1, 3, 1])
            // The default zone is never atomic.
            (_, records) = try await Self.modify(client, fixture, zone: nil, atomic: true, [
                ["operationType": "create", "record": Self.note("d1", [:])],
                ["operationType": "update", "record": Self.note("missing", [:], tag: "t")],
            ])
            XCTAssertEqual(records.map { $0["serverErrorCode"] as? String }, [nil, "NOT_FOUND"])
        }
    }

    func testReferencesCascadeAndValidate() async throws {
        try await withFixture { fixture, client in
            try await Self.createZone(client, fixture, "Notes")
            let ref: (String, String) -> Body = { target, action in ["value": ["recordName": target, "action": action], "type": "REFERENCE"] }
            // VALIDATE needs the target at save.
            var (_, records) = try await Self.modify(client, fixture, [["operationType": "create", "record": Self.note("orphan", ["p": ref("nobody", "VALIDATE")])]])
            XCTAssertEqual(records[0]["serverErrorCode"] as? String, "VALIDATING_REFERENCE_ERROR")
            // A chain: root ← child (DELETE_SELF) ← grandchild (DELETE_SELF); guarded ← keeper (VALIDATE).
            (_, records) = try await Self.modify(client, fixture, [
                ["operationType": "create", "record": Self.note("root", [:])],
                ["operationType": "create", "record": Self.note("child", ["p": ref("root", "DELETE_SELF")])],
                ["operationType": "create", "record": Self.note("grandchild", ["p": ref("child", "DELETE_SELF")])],
                ["operationType": "create", "record": Self.note("guarded", [:])],
                ["operationType": "create", "record": Self.note("keeper", ["p": ref("guarded", "VALIDATE")])],
            ])
            XCTAssertEqual(records.compactMap { $0["serverErrorCode"] as? String }, [], "\(records)")
            (_, records) = try await Self.modify(client, fixture, [["operationType": "forceDelete", "record": ["recordName": "root"]]])
            XCTAssertEqual(records[0]["deleted"] as? Bool, true)
            let looked = try await Self.lookup(client, fixture, ["root", "child", "grandchild"])
            XCTAssertEqual(looked.map { $0["serverErrorCode"] as? String }, ["NOT_FOUND", "NOT_FOUND", "NOT_FOUND"], "DELETE_SELF cascades transitively")
            let events = try await EventLog(store: fixture.store).events(after: 0, limit: 100, logger: TestSupport.logger)
            let deletions = try events.filter { $0.type.rawValue == "record.deleted" }.map { try $0.decode(RecordDeleted.self) }
            XCTAssertEqual(deletions.map(\.recordName), ["root", "child", "grandchild"], "each cascaded delete is its own event")
            XCTAssertEqual(deletions.map(\.cascadedFrom), [nil, "root", "child"])
            XCTAssertNotNil(deletions[0].createdVersion)
            // A VALIDATE referrer blocks deleting its target.
            (_, records) = try await Self.modify(client, fixture, [["operationType": "forceDelete", "record": ["recordName": "guarded"]]])
            XCTAssertEqual(records[0]["serverErrorCode"] as? String, "VALIDATING_REFERENCE_ERROR")
            // References stay within a zone.
            (_, records) = try await Self.modify(client, fixture, [["operationType": "create", "record": Self.note("cross", [
                "p": ["value": ["recordName": "root", "zoneID": ["zoneName": "Elsewhere"]], "type": "REFERENCE"],
            ])]])
            XCTAssertEqual(records.first?["serverErrorCode"] as? String, "BAD_REQUEST")
            // Deleting the zone deletes its records.
            _ = try await Self.post(client, fixture.path("zones/modify"), ["operations": [["operationType": "delete", "zone": ["zoneID": ["zoneName": "Notes"]]]]])
            try await Self.createZone(client, fixture, "Notes")
            let afterRecreate = try await Self.lookup(client, fixture, ["guarded", "keeper"])
            XCTAssertEqual(afterRecreate.map { $0["serverErrorCode"] as? String }, ["NOT_FOUND", "NOT_FOUND"])
        }
    }

    func testUsersAreIsolatedAndPublicWritesNeedAUser() async throws {
        try await withFixture { fixture, client in
            try await Self.createZone(client, fixture, "Notes")
            _ = try await Self.modify(client, fixture, [["operationType": "create", "record": Self.note("secret", ["v": ["value": "alice's"]])]])
            // Bob has no zone Notes, and his default zone does not hold alice's record.
            let (status, _) = try await Self.post(client, fixture.path("records/lookup", user: "_bob"), ["zoneID": ["zoneName": "Notes"], "records": [["recordName": "secret"]]])
            XCTAssertEqual(status, 404)
            let bobDefault = try await Self.lookup(client, fixture, zone: "_defaultZone", user: "_bob", ["secret"])
            XCTAssertEqual(bobDefault.first?["serverErrorCode"] as? String, "NOT_FOUND")
            // Naming alice as the zone owner does not help bob.
            let (ownerStatus, _) = try await Self.post(client, fixture.path("records/lookup", user: "_bob"),
                                                       ["zoneID": ["zoneName": "Notes", "ownerRecordName": "_alice"], "records": [["recordName": "secret"]]])
            XCTAssertEqual(ownerStatus, 404)
            // Public database: writes need a user; reads need none unless the container opts out.
            let (anonymous, anonymousBody) = try await Self.post(client, fixture.path("records/modify", database: "public", user: nil),
                                                                 ["operations": [["operationType": "create", "record": Self.note("p1", [:])]]])
            XCTAssertEqual(anonymous, 421)
            XCTAssertEqual(anonymousBody["serverErrorCode"] as? String, "AUTHENTICATION_REQUIRED")
            // (One schema per container and environment: `v` of a Note is the STRING alice stored above.)
            let (_, written) = try await Self.modify(client, fixture, zone: nil, database: "public", [["operationType": "create", "record": Self.note("p1", ["v": ["value": "public"]])]])
            XCTAssertNil(written[0]["serverErrorCode"])
            let (readStatus, read) = try await Self.post(client, fixture.path("records/lookup", database: "public", user: nil), ["records": [["recordName": "p1"]]])
            XCTAssertEqual(readStatus, 200)
            XCTAssertEqual((read["records"] as? [Body])?.first?["recordName"] as? String, "p1")
            let (bobStatus, bobRead) = try await Self.post(client, fixture.path("records/lookup", database: "public", user: "_bob"), ["records": [["recordName": "p1"]]])
            XCTAssertEqual(bobStatus, 200, "every user reads the public database")
            XCTAssertEqual((bobRead["records"] as? [Body])?.first?["recordName"] as? String, "p1")
            try await ContainerStore(store: fixture.store).setAnonymousPublicReads(container: fixture.container, allowed: false, logger: TestSupport.logger)
            let (closedStatus, _) = try await Self.post(client, fixture.path("records/lookup", database: "public", user: nil), ["records": [["recordName": "p1"]]])
            XCTAssertEqual(closedStatus, 421)
        }
    }

    func testMalformedRequestsGetCloudKitErrorsNeverServerErrors() async throws {
        try await withFixture { fixture, client in
            try await Self.createZone(client, fixture, "Notes")
            let bodies: [String] = [
                "", "{", "[]", "null", #"{"operations":5}"#, #"{"operations":[]}"#, #"{"operations":[{}]}"#,
                #"{"operations":[{"operationType":"explode","record":{"recordName":"a"}}]}"#,
                #"{"operations":[{"operationType":"create","record":{"recordName":"a","recordType":"Bad Type"}}]}"#,
                #"{"operations":[{"operationType":"create","record":{"recordName":"a","recordType":"T","fields":{"bad name":{"value":1}}}}]}"#,
                #"{"operations":[{"operationType":"create","record":{"recordName":"a","recordType":"T","fields":{"f":5}}}]}"#,
                // (`{"value": null}` and `{}` remove a field: WireCompatibilityTests.)
                #"{"operations":[{"operationType":"create","record":{"recordName":"a","recordType":"T","fields":{"f":{"value":true}}}}]}"#,
                #"{"operations":[{"operationType":"create","record":{"recordName":"a","recordType":"T","fields":{"f":{"type":"STRING"}}}}]}"#,
                #"{"operations":[{"operationType":"create","record":{"recordName":"","recordType":"T"}}]}"#,
                #"{"operations":[{"operationType":"update","record":{"recordType":"T"}}]}"#,
                #"{"operations":[{"operationType":"create","record":{"recordName":"a","recordType":"T"}},{"operationType":"create","record":{"recordName":"a","recordType":"T"}}]}"#,
                #"{"zoneID":{"zoneName":"no/such"},"operations":[{"operationType":"create","record":{"recordName":"a","recordType":"T"}}]}"#,
                #"{"zoneID":{"zoneName":"Missing"},"operations":[{"operationType":"create","record":{"recordName":"a","recordType":"T"}}]}"#,
                #"{"zoneID":7,"operations":[]}"#,
            ]
            for body in bodies {
                let uri = fixture.path("records/modify")
                let (status, reply): (Int, String) = try await client.execute(uri: uri, method: .post, body: ByteBuffer(string: body)) {
                    (Int($0.status.code), String(buffer: $0.body))
                }
                XCTAssertTrue((400..<500).contains(status) || (status == 200 && reply.contains("serverErrorCode")), "\(body) → \(status) \(reply)")
                XCTAssertTrue(reply.contains("serverErrorCode"), "\(body) → \(reply)")
                XCTAssertFalse(reply.contains("INTERNAL_ERROR"), "\(body) → \(reply)")
            }
            let tooMany = ["operations": (0..<201).map { ["operationType": "create", "record": Self.note("r\($0)", [:])] }]
            let (status, body) = try await Self.post(client, fixture.path("records/modify"), tooMany)
            XCTAssertEqual(status, 400)
            XCTAssertEqual(body["serverErrorCode"] as? String, "LIMIT_EXCEEDED")
            let huge = String(repeating: "x", count: 1_100_000)
            let (_, records) = try await Self.modify(client, fixture, [["operationType": "create", "record": Self.note("huge", ["v": ["value": huge]])]])
            XCTAssertEqual(records[0]["serverErrorCode"] as? String, "LIMIT_EXCEEDED")
            let (bigStatus, bigBody) = try await Self.post(client, fixture.path("records/modify"), ["operations": [], "pad": String(repeating: "y", count: 11 * 1024 * 1024)])
            XCTAssertEqual(bigStatus, 400)
            XCTAssertEqual(bigBody["serverErrorCode"] as? String, "LIMIT_EXCEEDED")
            let events = try await EventLog(store: fixture.store).events(after: 0, limit: 10, logger: TestSupport.logger)
            XCTAssertEqual(events.map(\.type), [.zoneCreated], "rejected requests append nothing")
        }
    }

    /// 16 clients do read-modify-write with change tags on a few hot records for a fixed time: every
    /// acknowledged write is in the final values, losers get CONFLICT, and nobody gets a 5xx.
    func testConcurrentReadModifyWriteLosesNoUpdate() async throws {
        try await withFixture { fixture, client in
            try await Self.createZone(client, fixture, "Hot")
            let hot = ["h0", "h1", "h2"]
            _ = try await Self.modify(client, fixture, zone: "Hot", hot.map { ["operationType": "create", "record": Self.note($0, ["count": ["value": 0]])] })
            let deadline = ContinuousClock.now + .seconds(8)
            let tallies = try await withThrowingTaskGroup(of: (acked: [String: Int], conflicts: Int, serverErrors: Int).self) { group in
                for worker in 0..<16 {
                    group.addTask {
                        var acked: [String: Int] = [:], conflicts = 0, serverErrors = 0
                        var round = 0
                        while ContinuousClock.now < deadline {
                            let name = hot[(worker + round) % hot.count]
                            round += 1
                            let current = try await Self.lookup(client, fixture, zone: "Hot", [name])[0]
                            guard let tag = current["recordChangeTag"] as? String, let count = Self.fields(current)["count"]?["value"] as? Int else { serverErrors += 1; continue }
                            let (status, records) = try await Self.modify(client, fixture, zone: "Hot", [["operationType": "update", "record": Self.note(name, ["count": ["value": count + 1]], tag: tag)]])
                            if status >= 500 { serverErrors += 1; continue }
                            switch records[0]["serverErrorCode"] as? String {
                            case nil: acked[name, default: 0] += 1
                            case "CONFLICT": conflicts += 1
                            default: serverErrors += 1
                            }
                        }
                        return (acked, conflicts, serverErrors)
                    }
                }
                var total: (acked: [String: Int], conflicts: Int, serverErrors: Int) = ([:], 0, 0)
                for try await tally in group {
                    total.acked.merge(tally.acked, uniquingKeysWith: +)
                    total.conflicts += tally.conflicts
                    total.serverErrors += tally.serverErrors
                }
                return total
            }
            let final = try await Self.lookup(client, fixture, zone: "Hot", hot)
            for record in final {
                let name = record["recordName"] as? String ?? "?"
                XCTAssertEqual(Self.fields(record)["count"]?["value"] as? Int, tallies.acked[name, default: 0], "every acknowledged write of \(name) is in its value")
            }
            XCTAssertEqual(tallies.serverErrors, 0)
            XCTAssertGreaterThan(tallies.acked.values.reduce(0, +), 0)
            XCTAssertGreaterThan(tallies.conflicts, 0, "contention on three records must produce conflicts")
            print("read-modify-write: \(tallies.acked.values.reduce(0, +)) acknowledged, \(tallies.conflicts) conflicts in 8 s")
        }
    }
}
