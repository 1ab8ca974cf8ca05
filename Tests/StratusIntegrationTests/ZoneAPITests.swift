import Foundation
import Hummingbird
import HummingbirdTesting
import StratusAPI
import StratusCore
import StratusPostgres
import StratusTesting
import XCTest

/// zones/modify, zones/list and zones/lookup over HTTP, against the real PostgreSQL.
final class ZoneAPITests: XCTestCase {
    struct Fixture: Sendable {
        let store: PostgresStore
        let configuration: APIConfiguration
        let apiToken: String
        let container = "iCloud.com.example.notes"

        func webAuthToken(_ user: String) -> String {
            WebAuthToken(userRecordName: user, container: container, expiresAt: Int64(Date().timeIntervalSince1970) + 3600)
                .signed(with: configuration.secretKey)
        }

        func path(_ operation: String, database: String = "private", user: String? = "_alice", token: String? = nil) -> String {
            var query = "ckAPIToken=\(token ?? apiToken)"
            if let user { query += "&ckWebAuthToken=\(webAuthToken(user))" }
            return "/database/1/\(container)/development/\(database)/\(operation)?\(query)"
        }

        var router: Router<APIRequestContext> {
            buildRouter(APIDependencies(store: store, readiness: [ReadinessCheck(name: "database") { try await store.ping(logger: TestSupport.logger) }], metrics: { "stratus_test 1\n" }),
                        configuration: configuration)
        }
    }

    func withFixture(_ body: @Sendable (Fixture, any TestClientProtocol) async throws -> Void) async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let token = try await ContainerStore(store: store).create(container: "iCloud.com.example.notes", label: "test", logger: TestSupport.logger)
            let fixture = Fixture(store: store, configuration: APIConfiguration(secretKey: SecretKey.generate()), apiToken: token)
            let app = Application(router: fixture.router, logger: TestSupport.logger)
            try await app.test(.router) { client in try await body(fixture, client) }
        }
    }

    static func json(_ response: TestResponse) throws -> [String: Any] {
        try XCTUnwrap(JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [String: Any])
    }

    static func body(_ text: String) -> ByteBuffer { ByteBuffer(string: text) }

    func testCreateListLookupAndDeleteZones() async throws {
        try await withFixture { fixture, client in
            let create = #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Notes"}}},{"operationType":"create","zone":{"zoneID":{"zoneName":"Tasks"}}}]}"#
            try await client.execute(uri: fixture.path("zones/modify"), method: .post, body: Self.body(create)) { response in
                XCTAssertEqual(response.status, .ok)
                XCTAssertNotNil(response.headers[.init("X-Request-ID")!])
                let zones = try XCTUnwrap(Self.json(response)["zones"] as? [[String: Any]])
                XCTAssertEqual(zones.compactMap { ($0["zoneID"] as? [String: Any])?["zoneName"] as? String }, ["Notes", "Tasks"])
                XCTAssertEqual(zones.compactMap { ($0["zoneID"] as? [String: Any])?["ownerRecordName"] as? String }, ["_alice", "_alice"])
            }
            try await client.execute(uri: fixture.path("zones/list"), method: .get) { response in
                XCTAssertEqual(response.status, .ok)
                let zones = try XCTUnwrap(Self.json(response)["zones"] as? [[String: Any]])
                XCTAssertEqual(zones.compactMap { ($0["zoneID"] as? [String: Any])?["zoneName"] as? String }, ["_defaultZone", "Notes", "Tasks"])
            }
            // Another user sees only their own zones.
            try await client.execute(uri: fixture.path("zones/list", user: "_bob"), method: .post, body: Self.body("{}")) { response in
                let zones = try XCTUnwrap(Self.json(response)["zones"] as? [[String: Any]])
                XCTAssertEqual(zones.compactMap { ($0["zoneID"] as? [String: Any])?["zoneName"] as? String }, ["_defaultZone"])
            }
            try await client.execute(uri: fixture.path("zones/lookup"), method: .post, body: Self.body(#"{"zones":[{"zoneName":"Notes"},{"zoneName":"Gone"}]}"#)) { response in
                let zones = try XCTUnwrap(Self.json(response)["zones"] as? [[String: Any]])
                XCTAssertEqual(zones.count, 2)
                XCTAssertNil(zones[0]["serverErrorCode"])
                XCTAssertEqual(zones[1]["serverErrorCode"] as? String, "ZONE_NOT_FOUND")
            }
            let delete = #"{"operations":[{"operationType":"delete","zone":{"zoneID":{"zoneName":"Notes","ownerRecordName":"_alice"}}}]}"#
            try await client.execute(uri: fixture.path("zones/modify"), method: .post, body: Self.body(delete)) { response in
                XCTAssertEqual(response.status, .ok)
                let zones = try XCTUnwrap(Self.json(response)["zones"] as? [[String: Any]])
                XCTAssertEqual(zones.first?["deleted"] as? Bool, true)
            }
            try await client.execute(uri: fixture.path("zones/modify"), method: .post, body: Self.body(delete)) { response in
                let zones = try XCTUnwrap(Self.json(response)["zones"] as? [[String: Any]])
                XCTAssertEqual(zones.first?["serverErrorCode"] as? String, "ZONE_NOT_FOUND")
                XCTAssertEqual((zones.first?["zoneID"] as? [String: Any])?["zoneName"] as? String, "Notes")
            }
            let events = try await EventLog(store: fixture.store).events(after: 0, limit: 10, logger: TestSupport.logger)
            XCTAssertEqual(events.map(\.type), [.zoneCreated, .zoneCreated, .zoneDeleted])
            XCTAssertEqual(events.first?.causation.userRecordName, "_alice")
        }
    }

    func testAuthenticationErrors() async throws {
        try await withFixture { fixture, client in
            let create = #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Notes"}}}]}"#
            let base = "/database/1/\(fixture.container)/development/private/zones/modify"
            try await client.execute(uri: base, method: .post, body: Self.body(create)) { response in
                XCTAssertEqual(response.status.code, 401)
                XCTAssertEqual(try Self.json(response)["serverErrorCode"] as? String, "AUTHENTICATION_FAILED")
            }
            try await client.execute(uri: fixture.path("zones/modify", token: "nottherighttoken"), method: .post, body: Self.body(create)) { response in
                XCTAssertEqual(response.status.code, 401)
            }
            try await client.execute(uri: fixture.path("zones/modify", user: nil), method: .post, body: Self.body(create)) { response in
                XCTAssertEqual(response.status.code, 421)
                let body = try Self.json(response)
                XCTAssertEqual(body["serverErrorCode"] as? String, "AUTHENTICATION_REQUIRED")
                XCTAssertNotNil(body["redirectURL"] as? String)
                XCTAssertNotNil(body["uuid"] as? String)
            }
            let forged = fixture.path("zones/modify", user: nil) + "&ckWebAuthToken=" + fixture.webAuthToken("_alice").dropLast(3) + "abc"
            try await client.execute(uri: forged, method: .post, body: Self.body(create)) { response in
                XCTAssertEqual(response.status.code, 401)
            }
            // The token belongs to another container.
            let other = "/database/1/iCloud.other/development/private/zones/list?ckAPIToken=\(fixture.apiToken)"
            try await client.execute(uri: other, method: .get) { response in
                XCTAssertEqual(response.status.code, 401)
            }
        }
    }

    func testMalformedInputGetsCloudKitErrorsNeverServerErrors() async throws {
        try await withFixture { fixture, client in
            let cases: [(String, String, String)] = [
                ("not json", "zones/modify", "BAD_REQUEST"),
                ("", "zones/modify", "BAD_REQUEST"),
                (#"{"operations":"x"}"#, "zones/modify", "BAD_REQUEST"),
                (#"{"operations":[]}"#, "zones/modify", "BAD_REQUEST"),
                (#"{"operations":[{"operationType":"explode","zone":{"zoneID":{"zoneName":"A"}}}]}"#, "zones/modify", "BAD_REQUEST"),
                (#"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"bad/name"}}}]}"#, "zones/modify", "BAD_REQUEST"),
                (#"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":""}}}]}"#, "zones/modify", "BAD_REQUEST"),
                (#"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"_defaultZone"}}}]}"#, "zones/modify", "BAD_REQUEST"),
                (#"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"A"}}},{"operationType":"delete","zone":{"zoneID":{"zoneName":"A"}}}]}"#, "zones/modify", "BAD_REQUEST"),
                (#"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"A","ownerRecordName":"_bob"}}}]}"#, "zones/modify", "ACCESS_DENIED"),
                (#"{"zones":5}"#, "zones/lookup", "BAD_REQUEST"),
            ]
            for (body, operation, code) in cases {
                try await client.execute(uri: fixture.path(operation), method: .post, body: Self.body(body)) { response in
                    XCTAssertLessThan(response.status.code, 500, "\(body)")
                    XCTAssertEqual(try Self.json(response)["serverErrorCode"] as? String, code, "\(body)")
                    XCTAssertNotNil(try Self.json(response)["reason"] as? String)
                }
            }
            let tooMany = #"{"operations":["# + (0..<201).map { #"{"operationType":"create","zone":{"zoneID":{"zoneName":"Z\#($0)"}}}"# }.joined(separator: ",") + "]}"
            try await client.execute(uri: fixture.path("zones/modify"), method: .post, body: Self.body(tooMany)) { response in
                XCTAssertEqual(try Self.json(response)["serverErrorCode"] as? String, "LIMIT_EXCEEDED")
            }
            for badPath in ["/database/1/\(fixture.container)/staging/private/zones/list", "/database/1/\(fixture.container)/development/secret/zones/list"] {
                try await client.execute(uri: badPath + "?ckAPIToken=\(fixture.apiToken)", method: .get) { response in
                    XCTAssertEqual(response.status.code, 400)
                    XCTAssertEqual(try Self.json(response)["serverErrorCode"] as? String, "BAD_REQUEST")
                }
            }
            // Public databases have only the default zone, and no zone creation.
            try await client.execute(uri: fixture.path("zones/list", database: "public"), method: .get) { response in
                let zones = try XCTUnwrap(Self.json(response)["zones"] as? [[String: Any]])
                XCTAssertEqual(zones.compactMap { ($0["zoneID"] as? [String: Any])?["zoneName"] as? String }, ["_defaultZone"])
            }
            try await client.execute(uri: fixture.path("zones/modify", database: "public"), method: .post,
                                     body: Self.body(#"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"A"}}}]}"#)) { response in
                XCTAssertEqual(response.status.code, 400)
            }
            let events = try await EventLog(store: fixture.store).events(after: 0, limit: 10, logger: TestSupport.logger)
            XCTAssertEqual(events, [], "rejected requests append nothing")
        }
    }

    func testHealthReadyAndMetrics() async throws {
        try await withFixture { _, client in
            try await client.execute(uri: "/health", method: .get) { response in
                XCTAssertEqual(response.status, .ok)
            }
            try await client.execute(uri: "/ready", method: .get) { response in
                XCTAssertEqual(response.status, .ok)
                XCTAssertEqual((try Self.json(response)["checks"] as? [String: String])?["database"], "ok")
            }
            try await client.execute(uri: "/metrics", method: .get) { response in
                XCTAssertEqual(String(buffer: response.body), "stratus_test 1\n")
            }
        }
    }
}
