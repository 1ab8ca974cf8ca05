import Foundation
import Hummingbird
import HummingbirdTesting
import StratusAPI
import StratusCore
import StratusPostgres
import StratusTesting
import XCTest

/// System fields (`parent`, `share`, `createShortGUID`), environments that never mix, the sync page
/// cap, and bad input to every read endpoint, over HTTP against the real PostgreSQL.
final class RecordSystemFieldTests: XCTestCase {
    typealias Body = RecordAPITests.Body

    func testParentShareAndShortGUIDAreStoredKeptAndCleared() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "Notes")
            var record = RecordAPITests.note("child", ["title": ["value": "a"]])
            record["parent"] = ["recordName": "folder"]
            record["share"] = ["recordName": "share-1"]
            record["createShortGUID"] = true
            var (_, records) = try await RecordAPITests.modify(client, fixture, [["operationType": "create", "record": record]])
            let created = try XCTUnwrap(records.first)
            XCTAssertEqual((created["parent"] as? Body)?["recordName"] as? String, "folder")
            XCTAssertEqual((created["share"] as? Body)?["recordName"] as? String, "share-1")
            let shortGUID = try XCTUnwrap(created["shortGUID"] as? String)
            XCTAssertFalse(shortGUID.isEmpty)
            let tag = try XCTUnwrap(created["recordChangeTag"] as? String)

            // An update that does not mention them keeps them; the short GUID never changes.
            (_, records) = try await RecordAPITests.modify(client, fixture, [["operationType": "update", "record": RecordAPITests.note("child", ["title": ["value": "b"]], tag: tag)]])
            XCTAssertEqual((records.first?["parent"] as? Body)?["recordName"] as? String, "folder")
            XCTAssertEqual((records.first?["share"] as? Body)?["recordName"] as? String, "share-1")
            XCTAssertEqual(records.first?["shortGUID"] as? String, shortGUID)
            let tag2 = try XCTUnwrap(records.first?["recordChangeTag"] as? String)

            // null clears a parent.
            var cleared = RecordAPITests.note("child", [:], tag: tag2)
            cleared["parent"] = NSNull()
            (_, records) = try await RecordAPITests.modify(client, fixture, [["operationType": "update", "record": cleared]])
            XCTAssertNil(records.first?["parent"], "\(records)")
            let looked = try await RecordAPITests.lookup(client, fixture, ["child"])
            XCTAssertNil(looked.first?["parent"])
            XCTAssertEqual((looked.first?["share"] as? Body)?["recordName"] as? String, "share-1")
            XCTAssertEqual(looked.first?["shortGUID"] as? String, shortGUID)

            // A parent must be {recordName}.
            var broken = RecordAPITests.note("orphan", [:])
            broken["parent"] = "folder"
            let (status, reply) = try await RecordAPITests.modify(client, fixture, [["operationType": "create", "record": broken]])
            XCTAssertEqual(status, 400)
            XCTAssertEqual(reply.first?["serverErrorCode"] as? String, "BAD_REQUEST")
        }
    }

    func testDevelopmentAndProductionNeverMix() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            let development = fixture.path("records/modify")
            let production = development.replacingOccurrences(of: "/development/", with: "/production/")
            let create: Body = ["operations": [["operationType": "create", "record": RecordAPITests.note("same", ["v": ["value": "dev"]])]]]
            var (status, _) = try await RecordAPITests.post(client, development, create)
            XCTAssertEqual(status, 200)
            // The same record name in production is another record.
            var prodCreate = create
            prodCreate["operations"] = [["operationType": "create", "record": RecordAPITests.note("same", ["v": ["value": "prod"]])]]
            let (prodStatus, prodReply) = try await RecordAPITests.post(client, production, prodCreate)
            XCTAssertEqual(prodStatus, 200)
            XCTAssertNil((prodReply["records"] as? [Body])?.first?["serverErrorCode"], "not EXISTS: production does not see development")
            let lookup: Body = ["records": [["recordName": "same"]]]
            var reply: Body
            (status, reply) = try await RecordAPITests.post(client, fixture.path("records/lookup"), lookup)
            XCTAssertEqual(RecordAPITests.fields((reply["records"] as? [Body])?.first ?? [:])["v"]?["value"] as? String, "dev")
            (status, reply) = try await RecordAPITests.post(client, fixture.path("records/lookup").replacingOccurrences(of: "/development/", with: "/production/"), lookup)
            XCTAssertEqual(RecordAPITests.fields((reply["records"] as? [Body])?.first ?? [:])["v"]?["value"] as? String, "prod")
            // Zones too.
            try await RecordAPITests.createZone(client, fixture, "DevOnly")
            (status, reply) = try await RecordAPITests.post(client, fixture.path("zones/lookup").replacingOccurrences(of: "/development/", with: "/production/"),
                                                            ["zones": [["zoneName": "DevOnly"]]])
            XCTAssertEqual((reply["zones"] as? [Body])?.first?["serverErrorCode"] as? String, "ZONE_NOT_FOUND")
        }
    }

    func testSyncPagesAreCappedByTheConfiguredMaximum() async throws {
        try await RecordAPITests.withAPI(maxResults: 3) { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "Z")
            let operations: [Body] = (0..<8).map { ["operationType": "create", "record": RecordAPITests.note("r\($0)", ["v": ["value": "\($0)"]])] }
            _ = try await RecordAPITests.modify(client, fixture, zone: "Z", operations)
            var token: String?
            var seen: [String] = []
            var pages = 0
            repeat {
                var body: Body = ["zoneID": ["zoneName": "Z"], "resultsLimit": 100, "desiredKeys": ["v"]]
                if let token { body["syncToken"] = token }
                let (status, reply) = try await RecordAPITests.post(client, fixture.path("records/changes"), body)
                XCTAssertEqual(status, 200)
                let records = reply["records"] as? [Body] ?? []
                XCTAssertLessThanOrEqual(records.count, 3, "resultsLimit is capped by the configured maximum")
                seen += records.compactMap { $0["recordName"] as? String }
                pages += 1
                token = reply["syncToken"] as? String
                if reply["moreComing"] as? Bool != true { break }
            } while pages < 10
            XCTAssertEqual(Set(seen), Set((0..<8).map { "r\($0)" }))
            XCTAssertEqual(pages, 3)
        }
    }

    func testReadEndpointsAnswerBadInputWithCloudKitErrorsNeverServerErrors() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "Z")
            let bodies: [String] = [
                "{", "[]", "\"text\"", "42", "{\"zoneID\": 5}", "{\"zoneID\": {\"zoneName\": \"\"}}", "{\"zoneID\": {\"zoneName\": \"no/slash\"}}",
                "{\"zoneID\": {\"zoneName\": \"Missing\"}}", "{\"records\": \"x\"}", "{\"records\": [{\"recordName\": 7}]}", "{\"records\": [{}]}",
                "{\"zoneID\": {\"zoneName\": \"Z\"}, \"resultsLimit\": -1}", "{\"zoneID\": {\"zoneName\": \"Z\"}, \"resultsLimit\": \"ten\"}",
                "{\"zoneID\": {\"zoneName\": \"Z\"}, \"syncToken\": 5}", "{\"zoneID\": {\"zoneName\": \"Z\"}, \"syncToken\": \"garbage\"}",
                "{\"zoneID\": {\"zoneName\": \"Z\"}, \"desiredKeys\": 5}", "{\"zones\": \"x\"}", "{\"zones\": [{\"zoneID\": 3}]}",
                "{\"query\": {}}", "{\"query\": {\"recordType\": \"T\", \"filterBy\": [{\"comparator\": \"EQUALS\"}]}}",
                "{\"query\": {\"recordType\": \"T\", \"filterBy\": [{\"fieldName\": \"f\", \"comparator\": \"NOPE\", \"fieldValue\": {\"value\": 1}}]}}",
                "{\"query\": {\"recordType\": \"T\", \"sortBy\": [{\"fieldName\": 5}]}}", "{\"query\": {\"recordType\": \"T\"}, \"continuationMarker\": \"x\"}",
            ]
            let operations = ["records/lookup", "records/changes", "changes/zone", "records/query", "zones/changes", "changes/database", "zones/lookup"]
            for operation in operations {
                for body in bodies {
                    let (status, reply) = try await client.execute(uri: fixture.path(operation), method: .post, body: ByteBuffer(string: body)) { response in
                        (Int(response.status.code), (try? JSONSerialization.jsonObject(with: Data(buffer: response.body))) as? Body ?? [:])
                    }
                    XCTAssertLessThan(status, 500, "\(operation) \(body): \(reply)")
                    if status != 200 {
                        XCTAssertNotNil(reply["serverErrorCode"] as? String, "\(operation) \(body): \(reply)")
                        XCTAssertFalse((reply["reason"] as? String ?? "").isEmpty, "\(operation) \(body)")
                    }
                    if body == "{" || body == "[]" {
                        XCTAssertEqual(status, 400, "\(operation): broken or non-object JSON")
                        XCTAssertEqual(reply["serverErrorCode"] as? String, "BAD_REQUEST", operation)
                    }
                }
            }
        }
    }
}
