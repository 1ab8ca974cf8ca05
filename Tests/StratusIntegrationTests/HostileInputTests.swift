import Crypto
import Foundation
import Hummingbird
import HummingbirdTesting
import StratusAPI
import StratusCore
import StratusPostgres
import StratusRuntime
import StratusTesting
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// One tenant must never hurt another: every bad input gets a CloudKit error naming what was wrong —
/// never a trap, a 500, a hang or lost data. Over HTTP against the real PostgreSQL.
final class HostileInputTests: XCTestCase {
    typealias Fixture = RecordAPITests.Fixture
    typealias Body = [String: Any]

    /// Posts a raw JSON text (so NULs, exact code points and huge lists reach the server as written).
    static func send(_ client: any TestClientProtocol, _ uri: String, _ body: String) async throws -> (Int, Body) {
        try await client.execute(uri: uri, method: .post, body: ByteBuffer(string: body)) { response in
            let object = try? JSONSerialization.jsonObject(with: Data(buffer: response.body), options: [.fragmentsAllowed]) as? Body
            return (Int(response.status.code), object ?? ["raw": String(buffer: response.body)])
        }
    }

    /// Asserts a CloudKit error with `code` whose reason names `place`.
    static func expect(
        _ reply: (Int, Body), _ code: String, naming place: String, _ what: String, file: StaticString = #filePath, line: UInt = #line
    ) {
        XCTAssertEqual(reply.0, 400, "\(what): \(reply.1)", file: file, line: line)
        XCTAssertEqual(reply.1["serverErrorCode"] as? String, code, "\(what): \(reply.1)", file: file, line: line)
        let reason = reply.1["reason"] as? String ?? ""
        XCTAssertTrue(reason.contains(place), "\(what): the reason names \(place): \(reason)", file: file, line: line)
    }

    static func eventCount(_ store: PostgresStore) async throws -> Int {
        try await EventLog(store: store).events(after: 0, limit: 100_000, logger: TestSupport.logger).count
    }

    static func createZone(_ client: any TestClientProtocol, _ fixture: Fixture, _ name: String) async throws {
        try await RecordAPITests.createZone(client, fixture, name)
    }

    // MARK: 1. numeric conversions

    func testLocationTimestampsBeyond64BitsAreBadRequestsEverywhere() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            try await Self.createZone(client, fixture, "Z")
            for timestamp in ["9223372036854775808", "1e19", "-1e300", "18446744073709551616.5"] {
                let location = #"{"latitude": 1, "longitude": 2, "timestamp": \#(timestamp)}"#
                let saved = try await Self.send(client, fixture.path("records/modify"), #"""
                    {"zoneID": {"zoneName": "Z"}, "operations": [{"operationType": "create",
                     "record": {"recordName": "r", "recordType": "Place", "fields": {"where": {"value": \#(location), "type": "LOCATION"}}}}]}
                    """#)
                Self.expect(saved, "BAD_REQUEST", naming: "where", "a saved LOCATION with timestamp \(timestamp)")
                let near = try await Self.send(client, fixture.path("records/query"), #"""
                    {"zoneID": {"zoneName": "Z"}, "query": {"recordType": "Place",
                     "filterBy": [{"comparator": "NEAR", "fieldName": "where", "fieldValue": {"value": \#(location)}, "distance": 1000}]}}
                    """#)
                Self.expect(near, "BAD_REQUEST", naming: "where", "a NEAR filter with timestamp \(timestamp)")
                let sorted = try await Self.send(client, fixture.path("records/query"), #"""
                    {"zoneID": {"zoneName": "Z"}, "query": {"recordType": "Place", "sortBy": [{"fieldName": "where", "relativeLocation": {"value": \#(location)}}]}}
                    """#)
                Self.expect(sorted, "BAD_REQUEST", naming: "relativeLocation", "a relativeLocation with timestamp \(timestamp)")
            }
            // The server is still there, and nothing was stored.
            let looked = try await RecordAPITests.lookup(client, fixture, zone: "Z", ["r"])
            XCTAssertEqual(looked.first?["serverErrorCode"] as? String, "NOT_FOUND")
        }
    }

    /// A signing date with 19 or more fraction digits is a valid ISO 8601 time (it used to overflow).
    func testSignedRequestsWithLongDateFractionsVerify() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            let privateKey = P256.Signing.PrivateKey()
            let key = try await ServerKeyStore(store: fixture.store).register(
                container: fixture.container, publicKey: try ServerPublicKey(text: privateKey.publicKey.pemRepresentation), label: "test", logger: TestSupport.logger)
            let subpath = "/database/1/\(fixture.container)/development/public/users/caller"
            for digits in [19, 20, 64] {
                let date = ISO8601Time.text(Int64(Date().timeIntervalSince1970)).dropLast() + "." + String(repeating: "9", count: digits) + "Z"
                var headers = HTTPFields()
                headers[.init(ServerSignature.keyIDHeader)!] = key.keyID
                headers[.init(ServerSignature.dateHeader)!] = String(date)
                headers[.init(ServerSignature.signatureHeader)!] = try ServerSignature.sign(date: String(date), body: Data(), subpath: subpath, privateKey: privateKey)
                let (status, body) = try await client.execute(uri: subpath, method: .get, headers: headers) { response in
                    (Int(response.status.code), String(buffer: response.body))
                }
                XCTAssertEqual(status, 200, "\(digits) fraction digits: \(body)")
            }
        }
    }

    // MARK: 2. NUL

    func testNULIsRefusedNamingTheFieldWhereverAClientStringReachesSQL() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            try await Self.createZone(client, fixture, "Z")
            let before = try await Self.eventCount(fixture.store)
            func record(_ fields: String, extra: String = "") -> String {
                #"{"zoneID": {"zoneName": "Z"}, "operations": [{"operationType": "create", "record": {"recordName": "r", "recordType": "Note", "fields": {\#(fields)}\#(extra)}}]}"#
            }
            func query(_ filter: String, extra: String = "") -> String {
                #"{"zoneID": {"zoneName": "Z"}, "query": {"recordType": "Note", "filterBy": [\#(filter)]}\#(extra)}"#
            }
            let cases: [(String, String, String)] = [
                ("records/modify", #"{"zoneID": {"zoneName": "Z"}, "operations": [{"operationType": "create", "record": {"recordName": "a\u0000b", "recordType": "Note"}}]}"#, "recordName"),
                ("records/modify", #"{"zoneID": {"zoneName": "Z"}, "operations": [{"operationType": "create", "record": {"recordName": "r", "recordType": "No\u0000te"}}]}"#, "recordType"),
                ("records/modify", record(#""title": {"value": "a\u0000b"}"#), "Field 'title'"),
                ("records/modify", record(#""tags": {"value": ["ok", "a\u0000b"], "type": "STRING_LIST"}"#), "Field 'tags'"),
                ("records/modify", record(#""owner": {"value": {"recordName": "a\u0000b"}, "type": "REFERENCE"}"#), "Field 'owner'"),
                ("records/modify", record(#""photo": {"value": {"fileChecksum": "x", "meta": {"k": "\u0000"}}, "type": "ASSETID"}"#), "Field 'photo'"),
                ("records/modify", record(#""photo": {"value": {"fileChecksum": "x", "k\u0000": 1}, "type": "ASSETID"}"#), "Field 'photo'"),
                ("records/modify", record("", extra: #", "parent": {"recordName": "p\u0000"}"#), "record.parent"),
                ("records/modify", record("", extra: #", "share": {"recordName": "s\u0000"}"#), "record.share"),
                ("records/modify", #"{"zoneID": {"zoneName": "Z"}, "desiredKeys": ["\u0000"], "operations": [{"operationType": "create", "record": {"recordName": "r", "recordType": "Note"}}]}"#, "desiredKeys[0]"),
                ("records/modify", #"{"zoneID": {"zoneName": "Z"}, "operations": [{"operationType": "create", "desiredKeys": ["a", "\u0000"], "record": {"recordName": "r", "recordType": "Note"}}]}"#, "operations[0].desiredKeys[1]"),
                ("records/lookup", #"{"zoneID": {"zoneName": "Z"}, "records": [{"recordName": "ok"}, {"recordName": "a\u0000"}]}"#, "records[1].recordName"),
                ("records/lookup", #"{"zoneID": {"zoneName": "Z"}, "records": [{"recordName": "ok", "desiredKeys": ["\u0000"]}]}"#, "records[0].desiredKeys[0]"),
                ("records/lookup", #"{"zoneID": {"zoneName": "Z"}, "records": [{"recordName": "ok"}], "desiredKeys": ["\u0000"]}"#, "desiredKeys[0]"),
                ("records/changes", #"{"zoneID": {"zoneName": "Z"}, "desiredRecordTypes": ["Note", "No\u0000te"]}"#, "desiredRecordTypes[1]"),
                ("records/changes", #"{"zoneID": {"zoneName": "Z"}, "desiredKeys": ["\u0000"]}"#, "desiredKeys[0]"),
                ("records/changes", #"{"zoneID": {"zoneName": "Z"}, "syncToken": "a\u0000.b"}"#, "syncToken"),
                ("records/changes", #"{"zoneID": {"zoneName": "Z\u0000"}}"#, "zoneName"),
                ("records/query", query(#"{"comparator": "EQUALS", "fieldName": "title", "fieldValue": {"value": "a\u0000"}}"#), "Field 'title'"),
                ("records/query", query(#"{"comparator": "BEGINS_WITH", "fieldName": "title", "fieldValue": {"value": "\u0000"}}"#), "Field 'title'"),
                ("records/query", query(#"{"comparator": "IN", "fieldName": "title", "fieldValue": {"value": ["x", "\u0000"]}}"#), "Field 'title'"),
                ("records/query", query(#"{"comparator": "EQUALS", "fieldName": "___recordID", "fieldValue": {"value": "a\u0000"}}"#), "___recordID"),
                ("records/query", query(#"{"comparator": "CONTAINS_ANY_TOKENS", "fieldName": "___all", "fieldValue": {"value": "a\u0000b"}}"#), "___all"),
                ("records/query", query(#"{"comparator": "EQUALS", "fieldName": "owner", "fieldValue": {"value": {"recordName": "\u0000"}, "type": "REFERENCE"}}"#), "Field 'owner'"),
                ("records/query", query("", extra: #", "desiredKeys": ["\u0000"]"#), "desiredKeys[0]"),
                ("records/query", query("", extra: #", "continuationMarker": "\u0000""#), "continuationMarker"),
                ("zones/lookup", #"{"zones": [{"zoneName": "Z"}, {"zoneName": "Z\u0000"}]}"#, "zones[1]"),
                ("zones/modify", #"{"operations": [{"operationType": "create", "zone": {"zoneID": {"zoneName": "Y\u0000"}}}]}"#, "zoneName"),
            ]
            for (operation, body, place) in cases {
                Self.expect(try await Self.send(client, fixture.path(operation), body), "BAD_REQUEST", naming: place, "\(operation) \(body)")
            }
            // changes/zone answers per zone: the bad zone gets the error, the good one its changes.
            let (status, reply) = try await Self.send(client, fixture.path("changes/zone"),
                #"{"zones": [{"zoneID": {"zoneName": "Z"}}, {"zoneID": {"zoneName": "Z\u0000"}}, {"zoneID": {"zoneName": "Z"}, "desiredRecordTypes": ["\u0000"]}]}"#)
            XCTAssertEqual(status, 400, "the repeated zone is refused first: \(reply)")
            let (perZoneStatus, perZone) = try await Self.send(client, fixture.path("changes/zone"),
                #"{"zones": [{"zoneID": {"zoneName": "Z"}}, {"zoneID": {"zoneName": "Q"}, "desiredRecordTypes": ["\u0000"]}]}"#)
            XCTAssertEqual(perZoneStatus, 200, "\(perZone)")
            let zones = perZone["zones"] as? [Body] ?? []
            XCTAssertEqual(zones.count, 2)
            XCTAssertNotNil(zones.first?["syncToken"])
            XCTAssertEqual(zones.last?["serverErrorCode"] as? String, "BAD_REQUEST")
            XCTAssertTrue((zones.last?["reason"] as? String ?? "").contains("desiredRecordTypes[0]"), "\(zones)")
            // The sign-in endpoint checks the login the same way.
            let signIn = try await Self.send(client, "/auth/1/\(fixture.container)/signin?ckAPIToken=\(fixture.apiToken)", #"{"login": "a\u0000@example.com", "password": "p"}"#)
            Self.expect(signIn, "BAD_REQUEST", naming: "login", "sign-in")
            let after = try await Self.eventCount(fixture.store)
            XCTAssertEqual(after, before, "nothing of a refused request is stored")
        }
    }

    // MARK: 3. reference targets

    func testReferenceTargetsParentsAndSharesAreCheckedLikeRecordNames() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            try await Self.createZone(client, fixture, "Z")
            let long = String(repeating: "x", count: 2_800)
            func create(_ fields: String, extra: String = "") -> String {
                #"{"zoneID": {"zoneName": "Z"}, "operations": [{"operationType": "create", "record": {"recordName": "r", "recordType": "Note", "fields": {\#(fields)}\#(extra)}}]}"#
            }
            let cases: [(String, String)] = [
                (create(#""owner": {"value": {"recordName": "\#(long)", "action": "DELETE_SELF"}, "type": "REFERENCE"}"#), "Field 'owner'"),
                (create(#""owner": {"value": {"recordName": "\#(long)", "action": "VALIDATE"}, "type": "REFERENCE"}"#), "Field 'owner'"),
                (create(#""owner": {"value": {"recordName": "\#(long)"}}"#), "Field 'owner'"),
                (create(#""owners": {"value": [{"recordName": "ok"}, {"recordName": "\#(long)", "action": "DELETE_SELF"}], "type": "REFERENCE_LIST"}"#), "Field 'owners'"),
                (create(#""owner": {"value": {"recordName": "line\nbreak"}, "type": "REFERENCE"}"#), "Field 'owner'"),
                (create("", extra: #", "parent": {"recordName": "\#(long)"}"#), "record.parent"),
                (create("", extra: #", "share": {"recordName": "\#(long)"}"#), "record.share"),
            ]
            for (body, place) in cases {
                Self.expect(try await Self.send(client, fixture.path("records/modify"), body), "BAD_REQUEST", naming: place, place)
            }
            // 255 bytes is a record name, so it is a reference target too.
            let longest = String(repeating: "y", count: 255)
            let (status, reply) = try await Self.send(client, fixture.path("records/modify"), #"""
                {"zoneID": {"zoneName": "Z"}, "operations": [
                 {"operationType": "create", "record": {"recordName": "\#(longest)", "recordType": "Note"}},
                 {"operationType": "create", "record": {"recordName": "r", "recordType": "Note", "parent": {"recordName": "\#(longest)"},
                  "fields": {"owner": {"value": {"recordName": "\#(longest)", "action": "DELETE_SELF"}, "type": "REFERENCE"}}}}]}
                """#)
            XCTAssertEqual(status, 200, "\(reply)")
            XCTAssertEqual((reply["records"] as? [Body])?.compactMap { $0["serverErrorCode"] }.count, 0, "\(reply)")
        }
    }

    // MARK: 4. query limits

    func testQueriesAreBoundedInFiltersSortsListValuesAndTokens() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            try await Self.createZone(client, fixture, "Z")
            func query(filters: [String] = [], sorts: Int = 0) -> String {
                let sortBy = (0..<sorts).map { #"{"fieldName": "f\#($0)"}"# }.joined(separator: ",")
                return #"{"zoneID": {"zoneName": "Z"}, "query": {"recordType": "Note", "filterBy": [\#(filters.joined(separator: ","))], "sortBy": [\#(sortBy)]}}"#
            }
            func list(_ count: Int, _ comparator: String = "IN") -> String {
                #"{"comparator": "\#(comparator)", "fieldName": "n", "fieldValue": {"value": [\#((0..<count).map(String.init).joined(separator: ","))]}}"#
            }
            func tokens(_ text: String) -> String {
                #"{"comparator": "CONTAINS_ALL_TOKENS", "fieldName": "___all", "fieldValue": {"value": "\#(text)"}}"#
            }
            let equals = #"{"comparator": "EQUALS", "fieldName": "n", "fieldValue": {"value": 1}}"#
            let path = fixture.path("records/query")
            // At the limits, the query runs.
            for body in [query(filters: Array(repeating: equals, count: 32), sorts: 8), query(filters: [list(1_000), list(1_000, "NOT_IN")]),
                         query(filters: [tokens((0..<32).map { "w\($0)" }.joined(separator: " "))])] {
                let (status, reply) = try await Self.send(client, path, body)
                XCTAssertEqual(status, 200, "\(reply)")
            }
            // Beyond them: LIMIT_EXCEEDED naming the limit, at once.
            let started = ContinuousClock.now
            let cases: [(String, String)] = [
                (query(sorts: 9), "at most 8 sorts"),
                (query(sorts: 99), "at most 8 sorts"),
                (query(filters: Array(repeating: equals, count: 33)), "at most 32 filters"),
                (query(filters: [list(1_001)]), "at most 1000 values"),
                (query(filters: [list(65_536)]), "at most 1000 values"),
                (query(filters: [list(65_536, "LIST_CONTAINS_ANY")]), "at most 1000 values"),
                (query(filters: [tokens((0..<33).map { "w\($0)" }.joined(separator: " "))]), "at most 32 tokens"),
                (query(filters: [tokens((0..<170_000).map { "w\($0 % 10)" }.joined(separator: " "))]), "at most 1024 bytes"),
                (query(filters: [tokens(String(repeating: "a", count: 5_000))]), "at most 1024 bytes"),
            ]
            for (body, limit) in cases {
                Self.expect(try await Self.send(client, path, body), "LIMIT_EXCEEDED", naming: limit, limit)
            }
            XCTAssertLessThan(ContinuousClock.now - started, .seconds(30), "refusing is cheap")
        }
    }

    // MARK: 5. types decide, not shapes

    func testAnAssetShapedLikeALocationDoesNotPoisonDistanceQueries() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            try await Self.createZone(client, fixture, "Q")
            let here = (47.3769, 8.5417)
            func place(_ name: String, _ value: String, _ type: String) -> String {
                #"{"operationType": "create", "record": {"recordName": "\#(name)", "recordType": "Spot", "fields": {"place": {"value": \#(value), "type": "\#(type)"}}}}"#
            }
            let operations = [
                place("here", #"{"latitude": \#(here.0), "longitude": \#(here.1)}"#, "LOCATION"),
                place("bern", #"{"latitude": 46.948, "longitude": 7.4474}"#, "LOCATION"),
                place("antipode", #"{"latitude": \#(-here.0), "longitude": \#(here.1 - 180)}"#, "LOCATION"),
            ]
            let (status, reply) = try await Self.send(
                client, fixture.path("records/modify"), #"{"zoneID": {"zoneName": "Q"}, "operations": [\#(operations.joined(separator: ","))]}"#)
            XCTAssertEqual(status, 200, "\(reply)")
            // A text in the same field: as a record written under an earlier development schema holds it.
            try await SchemaTests.resetDevelopmentSchema(fixture)
            let (noteStatus, noteReply) = try await Self.send(
                client, fixture.path("records/modify"), #"{"zoneID": {"zoneName": "Q"}, "operations": [\#(place("note", #""a string""#, "STRING"))]}"#)
            XCTAssertEqual(noteStatus, 200, "\(noteReply)")
            XCTAssertFalse("\(noteReply)".contains("serverErrorCode"), "\(noteReply)")
            // An asset shaped like a location is no asset: an ASSETID needs an upload's receipt.
            let photoOperation = place("photo", #"{"fileChecksum": "abc", "latitude": "north", "longitude": "east"}"#, "ASSETID")
            let photo = try await Self.send(client, fixture.path("records/modify"), #"{"zoneID": {"zoneName": "Q"}, "operations": [\#(photoOperation)]}"#)
            Self.expect(photo, "BAD_REQUEST", naming: "receipt", "an asset without a receipt")
            // Without a type, a dictionary that could be either is refused.
            let untyped = try await Self.send(client, fixture.path("records/modify"), #"""
                {"zoneID": {"zoneName": "Q"}, "operations": [{"operationType": "create", "record": {"recordName": "odd", "recordType": "Spot",
                 "fields": {"place": {"value": {"fileChecksum": "abc", "latitude": 1, "longitude": 2}}}}}]}
                """#)
            Self.expect(untyped, "BAD_REQUEST", naming: "send 'type'", "an untyped asset with a latitude")
            try await QueryTests.applyEventLog(fixture.store)

            let point = #"{"value": {"latitude": \#(here.0), "longitude": \#(here.1)}}"#
            for ascending in [true, false] {
                let (sortStatus, sorted) = try await Self.send(client, fixture.path("records/query"), #"""
                    {"zoneID": {"zoneName": "Q"}, "query": {"recordType": "Spot", "sortBy": [{"fieldName": "place", "ascending": \#(ascending), "relativeLocation": \#(point)}]}}
                    """#)
                XCTAssertEqual(sortStatus, 200, "a distance sort over a type whose asset has a latitude: \(sorted)")
                let names = QueryTests.names(sorted)
                XCTAssertEqual(Set(names), ["here", "bern", "antipode", "note"])
                let locations = names.filter { ["here", "bern", "antipode"].contains($0) }
                XCTAssertEqual(locations, ascending ? ["here", "bern", "antipode"] : ["antipode", "bern", "here"])
            }
            let (nearStatus, near) = try await Self.send(client, fixture.path("records/query"), #"""
                {"zoneID": {"zoneName": "Q"}, "query": {"recordType": "Spot",
                 "filterBy": [{"comparator": "NEAR", "fieldName": "place", "fieldValue": \#(point), "distance": 150000}]}}
                """#)
            XCTAssertEqual(nearStatus, 200, "\(near)")
            XCTAssertEqual(Set(QueryTests.names(near)), ["here", "bern"])
            let (everywhereStatus, everywhere) = try await Self.send(client, fixture.path("records/query"), #"""
                {"zoneID": {"zoneName": "Q"}, "query": {"recordType": "Spot",
                 "filterBy": [{"comparator": "NEAR", "fieldName": "place", "fieldValue": \#(point), "distance": 30000000}]}}
                """#)
            XCTAssertEqual(everywhereStatus, 200, "\(everywhere)")
            XCTAssertEqual(Set(QueryTests.names(everywhere)), ["here", "bern", "antipode"], "the antipode is within any distance beyond half the globe")
        }
    }

    // MARK: 6. repeated and unbounded lists

    func testRepeatedNamesAreRefusedAndEveryListIsBounded() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            try await Self.createZone(client, fixture, "Z")
            _ = try await RecordAPITests.modify(client, fixture, zone: "Z", [["operationType": "create", "record": RecordAPITests.note("a", ["big": ["value": String(repeating: "x", count: 7_000)]])]])
            let repeatedRecords = #"{"zoneID": {"zoneName": "Z"}, "records": [\#(Array(repeating: #"{"recordName": "a"}"#, count: 200).joined(separator: ","))]}"#
            Self.expect(try await Self.send(client, fixture.path("records/lookup"), repeatedRecords), "BAD_REQUEST", naming: "more than once", "a record looked up 200 times")
            let repeatedZones = #"{"zones": [\#(Array(repeating: #"{"zoneID": {"zoneName": "Z"}}"#, count: 200).joined(separator: ","))]}"#
            Self.expect(try await Self.send(client, fixture.path("changes/zone"), repeatedZones), "BAD_REQUEST", naming: "more than once", "a zone synced 200 times")
            Self.expect(try await Self.send(client, fixture.path("zones/lookup"), #"{"zones": [{"zoneName": "Z"}, {"zoneName": "Z"}]}"#),
                        "BAD_REQUEST", naming: "more than once", "a zone looked up twice")
            Self.expect(try await Self.send(client, fixture.path("records/modify"), #"""
                {"zoneID": {"zoneName": "Z"}, "operations": [{"operationType": "forceDelete", "record": {"recordName": "a"}},
                 {"operationType": "forceDelete", "record": {"recordName": "a"}}]}
                """#), "BAD_REQUEST", naming: "more than one operation", "a record deleted twice")

            let manyZones = #"{"zones": [\#((0..<201).map { #"{"zoneID": {"zoneName": "Z\#($0)"}}"# }.joined(separator: ","))]}"#
            Self.expect(try await Self.send(client, fixture.path("changes/zone"), manyZones), "LIMIT_EXCEEDED", naming: "at most 200", "201 zones")
            let manyLookups = #"{"zones": [\#((0..<201).map { #"{"zoneName": "Z\#($0)"}"# }.joined(separator: ","))]}"#
            Self.expect(try await Self.send(client, fixture.path("zones/lookup"), manyLookups), "LIMIT_EXCEEDED", naming: "200", "201 zone lookups")
            let keys = "[" + (0..<1_001).map { "\"k\($0)\"" }.joined(separator: ",") + "]"
            let bounded: [(String, String, String)] = [
                ("records/lookup", #"{"zoneID": {"zoneName": "Z"}, "records": [{"recordName": "a"}], "desiredKeys": \#(keys)}"#, "desiredKeys"),
                ("records/lookup", #"{"zoneID": {"zoneName": "Z"}, "records": [{"recordName": "a", "desiredKeys": \#(keys)}]}"#, "records[0].desiredKeys"),
                ("records/changes", #"{"zoneID": {"zoneName": "Z"}, "desiredKeys": \#(keys)}"#, "desiredKeys"),
                ("records/changes", #"{"zoneID": {"zoneName": "Z"}, "desiredRecordTypes": \#(keys)}"#, "desiredRecordTypes"),
                ("records/query", #"{"zoneID": {"zoneName": "Z"}, "query": {"recordType": "Note"}, "desiredKeys": \#(keys)}"#, "desiredKeys"),
                ("records/modify", #"{"zoneID": {"zoneName": "Z"}, "desiredKeys": \#(keys), "operations": [{"operationType": "forceDelete", "record": {"recordName": "a"}}]}"#, "desiredKeys"),
            ]
            for (operation, body, place) in bounded {
                Self.expect(try await Self.send(client, fixture.path(operation), body), "LIMIT_EXCEEDED", naming: place, "\(operation) \(place)")
            }
            // The record is still there: none of the refused requests touched it.
            let looked = try await RecordAPITests.lookup(client, fixture, zone: "Z", ["a"])
            XCTAssertEqual(looked.first?["recordName"] as? String, "a")
        }
    }

    /// A record whose fields as sent cannot fit the record limit (1 MB) is refused with
    /// LIMIT_EXCEEDED in its operation's place before its values are decoded: a list of 600,000
    /// integers ending in a string, which decoding would refuse as BAD_REQUEST, is refused for its
    /// size. The other record of the request is saved; in an atomic request nothing is; no refused
    /// record is stored or makes an event.
    func testARecordOverItsLimitIsRefusedBeforeItsValuesAreDecoded() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            try await Self.createZone(client, fixture, "Z")
            let eventsBefore = try await Self.eventCount(fixture.store)
            let huge = #"{"operationType": "create", "record": {"recordName": "huge", "recordType": "Note", "fields": {"#
                + #""n": {"type": "INT64_LIST", "value": [1"# + String(repeating: ",1", count: 600_000) + #", "x"]}}}}"#
            let small = #"{"operationType": "create", "record": {"recordName": "small", "recordType": "Note", "fields": {"n": {"value": 1}}}}"#
            let (status, reply) = try await Self.send(client, fixture.path("records/modify"), #"""
                {"zoneID": {"zoneName": "Z"}, "atomic": false, "operations": [\#(huge), \#(small)]}
                """#)
            XCTAssertEqual(status, 200, "\(reply)")
            let records = reply["records"] as? [Body] ?? []
            XCTAssertEqual(records.count, 2)
            XCTAssertEqual(records.first?["serverErrorCode"] as? String, "LIMIT_EXCEEDED", "\(records.first ?? [:])")
            XCTAssertEqual(records.first?["recordName"] as? String, "huge")
            let reason = records.first?["reason"] as? String ?? ""
            XCTAssertTrue(reason.contains("'huge' is at least") && reason.contains("the limit is 1000000"), reason)
            XCTAssertEqual(records.last?["recordName"] as? String, "small")
            XCTAssertNil(records.last?["serverErrorCode"])

            let (atomicStatus, atomicReply) = try await Self.send(client, fixture.path("records/modify"), #"""
                {"zoneID": {"zoneName": "Z"}, "atomic": true, "operations": [\#(small.replacingOccurrences(of: "small", with: "other")), \#(huge)]}
                """#)
            XCTAssertEqual(atomicStatus, 200, "\(atomicReply)")
            let atomic = atomicReply["records"] as? [Body] ?? []
            XCTAssertEqual(atomic.map { $0["serverErrorCode"] as? String }, ["ATOMIC_ERROR", "LIMIT_EXCEEDED"], "\(atomic)")

            let looked = try await RecordAPITests.lookup(client, fixture, zone: "Z", ["huge", "other", "small"])
            XCTAssertEqual(looked.map { $0["serverErrorCode"] as? String }, ["NOT_FOUND", "NOT_FOUND", nil], "\(looked)")
            let events = try await EventLog(store: fixture.store).events(after: 0, limit: 100_000, logger: TestSupport.logger).dropFirst(eventsBefore)
            XCTAssertTrue(events.contains { $0.payloadMentions(Data(#""small""#.utf8)) }, "the small record made its event")
            XCTAssertFalse(events.contains { $0.payloadMentions(Data(#""huge""#.utf8)) || $0.payloadMentions(Data(#""other""#.utf8)) },
                           "no refused record made an event")
        }
    }

    // MARK: 7. exact names

    /// Canonically equivalent names (NFC "é" and NFD "e" + U+0301, "K" and the Kelvin sign) are equal
    /// Swift strings but distinct records: each keeps its own fields through writes, lookups and sync.
    func testCanonicallyEquivalentNamesAreDistinctRecords() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            try await Self.createZone(client, fixture, "U")
            let names: [(json: String, swift: String, value: String)] = [
                (#"\u00e9"#, "\u{E9}", "composed"), (#"e\u0301"#, "e\u{301}", "decomposed"), ("K", "K", "latin"), (#"\u212a"#, "\u{212A}", "kelvin"),
            ]
            func operation(_ name: String, _ value: String) -> String {
                #"{"operationType": "create", "record": {"recordName": "\#(name)", "recordType": "Note", "fields": {"v": {"value": "\#(value)"}}}}"#
            }
            let (status, created) = try await Self.send(client, fixture.path("records/modify"),
                #"{"zoneID": {"zoneName": "U"}, "operations": [\#(names.map { operation($0.json, $0.value) }.joined(separator: ","))]}"#)
            XCTAssertEqual(status, 200, "one request may create all four: \(created)")
            XCTAssertEqual((created["records"] as? [Body])?.compactMap { $0["serverErrorCode"] }.count, 0, "\(created)")

            func valuesByExactName(_ records: [Body]) -> [ExactName: String] {
                var values: [ExactName: String] = [:]
                for record in records {
                    guard let name = record["recordName"] as? String else { continue }
                    let fields = record["fields"] as? [String: Body]
                    values[ExactName(name)] = fields?["v"]?["value"] as? String ?? record["serverErrorCode"] as? String ?? "?"
                }
                return values
            }
            let expected = Dictionary(uniqueKeysWithValues: names.map { (ExactName($0.swift), $0.value) })
            // A lookup of all four in one request answers each with its own record, in request order.
            let (lookupStatus, looked) = try await Self.send(client, fixture.path("records/lookup"),
                #"{"zoneID": {"zoneName": "U"}, "records": [\#(names.map { #"{"recordName": "\#($0.json)"}"# }.joined(separator: ","))]}"#)
            XCTAssertEqual(lookupStatus, 200, "\(looked)")
            let lookedRecords = looked["records"] as? [Body] ?? []
            XCTAssertEqual(lookedRecords.compactMap { ($0["recordName"] as? String).map { Array($0.utf8) } }, names.map { Array($0.swift.utf8) })
            XCTAssertEqual(valuesByExactName(lookedRecords), expected)
            // Sync delivers four records, each with its own fields.
            let (syncStatus, synced) = try await Self.send(client, fixture.path("records/changes"), #"{"zoneID": {"zoneName": "U"}}"#)
            XCTAssertEqual(syncStatus, 200, "\(synced)")
            XCTAssertEqual(valuesByExactName(synced["records"] as? [Body] ?? []), expected)
            // Updating one leaves its twin alone.
            let tag = lookedRecords[1]["recordChangeTag"] as? String ?? ""
            let (updateStatus, updated) = try await Self.send(client, fixture.path("records/modify"), #"""
                {"zoneID": {"zoneName": "U"}, "operations": [{"operationType": "update",
                 "record": {"recordName": "e\u0301", "recordChangeTag": "\#(tag)", "fields": {"v": {"value": "changed"}}}}]}
                """#)
            XCTAssertEqual(updateStatus, 200, "\(updated)")
            XCTAssertNil((updated["records"] as? [Body])?.first?["serverErrorCode"], "\(updated)")
            var changed = expected
            changed[ExactName("e\u{301}")] = "changed"
            let (_, relooked) = try await Self.send(client, fixture.path("records/lookup"),
                #"{"zoneID": {"zoneName": "U"}, "records": [\#(names.map { #"{"recordName": "\#($0.json)"}"# }.joined(separator: ","))]}"#)
            XCTAssertEqual(valuesByExactName(relooked["records"] as? [Body] ?? []), changed)
        }
    }

    // MARK: 8. authentication before the body

    /// A caller that cannot authenticate is answered while it is still sending: the server never
    /// reads (or buffers) its body. A real connection, with 1 KB sent of a declared 9 MB.
    func testAnUnauthenticatedLargeBodyIsRefusedBeforeItIsRead() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let container = "iCloud.com.example.notes"
            let apiToken = try await ContainerStore(store: store).create(container: container, label: "test", logger: TestSupport.logger)
            let privateKey = P256.Signing.PrivateKey()
            let key = try await ServerKeyStore(store: store).register(
                container: container, publicKey: try ServerPublicKey(text: privateKey.publicKey.pemRepresentation), label: "test", logger: TestSupport.logger)
            var configuration = APIConfiguration(secretKey: SecretKey.generate())
            configuration.port = 0
            let app = buildApplication(APIDependencies(store: store, readiness: [], metrics: { "" }), configuration: configuration, services: [], logger: TestSupport.logger)
            try await app.test(.live) { client in
                let port = try XCTUnwrap(client.port)
                let now = ISO8601Time.text(Int64(Date().timeIntervalSince1970))
                let stale = ISO8601Time.text(Int64(Date().timeIntervalSince1970) - 3_600)
                let privatePath = "/database/1/\(container)/development/private/records/modify"
                let publicPath = "/database/1/\(container)/development/public/records/modify"
                let cases: [(String, String, String)] = [
                    ("an unknown API token", privatePath + "?ckAPIToken=wrong", ""),
                    ("no credentials", privatePath, ""),
                    ("a forged web auth token", privatePath + "?ckAPIToken=\(apiToken)&ckWebAuthToken=forged", ""),
                    ("an unknown server key", publicPath, "\(ServerSignature.keyIDHeader): \(String(repeating: "ab", count: 32))\r\n\(ServerSignature.dateHeader): \(now)\r\n\(ServerSignature.signatureHeader): AAAA\r\n"),
                    ("a malformed server key id", publicPath, "\(ServerSignature.keyIDHeader): not-a-key\r\n\(ServerSignature.dateHeader): \(now)\r\n\(ServerSignature.signatureHeader): AAAA\r\n"),
                    ("a stale signing date", publicPath, "\(ServerSignature.keyIDHeader): \(key.keyID)\r\n\(ServerSignature.dateHeader): \(stale)\r\n\(ServerSignature.signatureHeader): AAAA\r\n"),
                ]
                for (what, target, headers) in cases {
                    let connection = try RawConnection(port: port, receiveTimeout: 10)
                    let head = "POST \(target) HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 9000000\r\n\(headers)\r\n"
                    let reply = await RawConnection.offThePool {
                        guard connection.send(Array(head.utf8) + Array(repeating: UInt8(ascii: " "), count: 1_024)) else { return (bytes: [UInt8](), closed: true) }
                        return connection.receive { String(decoding: $0, as: UTF8.self).contains("\"}") }
                    }
                    let text = String(decoding: reply.bytes, as: UTF8.self)
                    XCTAssertTrue(text.hasPrefix("HTTP/1.1 401"), "\(what): answered before the body was sent: \(text.prefix(400))")
                    XCTAssertTrue(text.contains("AUTHENTICATION_FAILED"), "\(what): \(text.prefix(400))")
                }
            }
        }
    }

    // MARK: 9. idle connections

    func testIdleConnectionsAreClosedByTheServer() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            var configuration = APIConfiguration(secretKey: SecretKey.generate())
            configuration.port = 0
            configuration.idleTimeout = .seconds(1)
            let app = buildApplication(APIDependencies(store: store, readiness: [], metrics: { "" }), configuration: configuration, services: [], logger: TestSupport.logger)
            try await app.test(.live) { client in
                let port = try XCTUnwrap(client.port)
                let cases: [(String, String)] = [
                    ("a connection that sends nothing", ""),
                    ("a connection left open after its answer", "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
                    ("a request head that stops half-way", "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"),
                ]
                for (what, sent) in cases {
                    let connection = try RawConnection(port: port, receiveTimeout: 12)
                    let started = ContinuousClock.now
                    let reply = await RawConnection.offThePool {
                        if !sent.isEmpty, !connection.send(Array(sent.utf8)) { return (bytes: [UInt8](), closed: true) }
                        return connection.receive()
                    }
                    let elapsed = ContinuousClock.now - started
                    XCTAssertTrue(reply.closed, "\(what): the server closes it")
                    XCTAssertLessThan(elapsed, .seconds(10), what)
                    XCTAssertGreaterThanOrEqual(elapsed, .milliseconds(900), "\(what): not before the idle timeout")
                    if sent.hasSuffix("\r\n\r\n") {
                        XCTAssertTrue(String(decoding: reply.bytes, as: UTF8.self).hasPrefix("HTTP/1.1 200"), what)
                    }
                }
            }
        }
    }

    func testTheIdleTimeoutComesFromTheEnvironment() throws {
        let key = SecretKey.generate().hex
        func configuration(_ value: String?) throws -> StratusConfiguration {
            var environment = ["STRATUS_SECRET_KEY": key]
            environment["STRATUS_HTTP_IDLE_TIMEOUT_SECONDS"] = value
            return try StratusConfiguration.fromEnvironment(environment)
        }
        XCTAssertEqual(try configuration(nil).api.idleTimeout, .seconds(60))
        XCTAssertEqual(try configuration("5").api.idleTimeout, .seconds(5))
        XCTAssertNil(try configuration("0").api.idleTimeout)
        for bad in ["-1", "86401", "soon"] { XCTAssertThrowsError(try configuration(bad), bad) }
    }
}

/// A bare TCP connection to a local server, for tests that must control what is sent and when.
final class RawConnection: @unchecked Sendable {
    private let descriptor: Int32

    /// Connects to 127.0.0.1:`port`; a read waits at most `receiveTimeout` seconds.
    init(port: Int, receiveTimeout: Int) throws {
        descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw TestSupport.MissingServer(description: "no socket") }
        var timeout = timeval(tv_sec: receiveTimeout, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        let descriptor = descriptor
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        guard connected else {
            close(descriptor)
            throw TestSupport.MissingServer(description: "cannot connect to port \(port)")
        }
    }

    deinit { close(descriptor) }

    /// Sends all of `bytes`; false once the server has closed the connection (never raises SIGPIPE).
    func send(_ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard sent > 0 else { return false }
            offset += sent
        }
        return true
    }

    /// Reads until `done` holds for what arrived, the server closes the connection, or a read times out.
    func receive(until done: ([UInt8]) -> Bool = { _ in false }) -> (bytes: [UInt8], closed: Bool) {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while !done(received) {
            let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            if count == 0 { return (received, true) }
            if count < 0 {
                if errno == EINTR { continue }
                return (received, errno == ECONNRESET)
            }
            received += buffer[0..<count]
        }
        return (received, false)
    }

    /// Runs blocking socket work on a thread of its own, not on the concurrency pool the server needs.
    static func offThePool<T: Sendable>(_ work: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: work()) }.start()
        }
    }
}
