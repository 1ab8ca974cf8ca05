import Foundation
import HummingbirdTesting
import StratusBlobStore
import StratusCore
import StratusPostgres
import StratusTesting
import StratusWorkers
import XCTest

/// `assets/rereference` (docs/assets.md): new receipts for assets records already hold, bound to
/// other record fields without uploading again; their bytes are shared, and stratus-gc's collector
/// deletes them only with the last asset that holds them. In an extension of `AssetTests`, so
/// `S3AssetTests` runs them against the S3 store too.
extension AssetTests {
    static func rereference(_ client: any TestClientProtocol, _ fixture: RecordAPITests.Fixture, zone: String = "Notes", user: String = "_alice",
                            _ fields: [(String, String)]) async throws -> (Int, [Body]) {
        let (status, answer) = try await RecordAPITests.post(client, fixture.path("assets/rereference", user: user), [
            "zoneID": ["zoneName": zone], "assets": fields.map { ["recordName": $0.0, "fieldName": $0.1] },
        ])
        return (status, answer["assets"] as? [Body] ?? [answer])
    }

    func testRereferencedAssetsBindToOtherRecordsWithoutUploadingAndShareTheirBytes() async throws {
        try await withStack { stack in
            let (client, fixture) = (stack.client, stack.fixture)
            try await RecordAPITests.createZone(client, fixture, "Notes")
            try await RecordAPITests.createZone(client, fixture, "Other")
            let bytes = Self.random(70_000)
            let image = try await Self.upload(client, fixture, record: "p1", field: "image", bytes)
            let album = [try await Self.upload(client, fixture, record: "p1", field: "album", [1, 2, 3]),
                         try await Self.upload(client, fixture, record: "p1", field: "album", [4, 5])]
            var (status, records) = try await RecordAPITests.modify(client, fixture, [["operationType": "create", "record": Self.photo("p1", [
                "image": ["value": image, "type": "ASSETID"], "album": ["value": album, "type": "ASSETID_LIST"], "title": ["value": "t"]])]])
            XCTAssertEqual(status, 200, "\(records)")

            // One answer per field, in order: new receipts, the upload's size and checksum.
            let (answered, assets) = try await Self.rereference(client, fixture, [("p1", "image"), ("p1", "album"), ("p1", "missing"), ("nope", "image"), ("p1", "title")])
            XCTAssertEqual(answered, 200, "\(assets)")
            XCTAssertEqual(assets.count, 5)
            let copy = try XCTUnwrap(assets[0]["value"] as? Body, "\(assets)")
            XCTAssertEqual(assets[0]["recordName"] as? String, "p1")
            XCTAssertEqual(assets[0]["fieldName"] as? String, "image")
            XCTAssertNotEqual(copy["receipt"] as? String, image["receipt"] as? String, "a new receipt")
            XCTAssertEqual(copy["size"] as? Int, bytes.count)
            XCTAssertEqual(copy["fileChecksum"] as? String, image["fileChecksum"] as? String)
            XCTAssertNotNil(copy["referenceChecksum"])
            let albumCopy = try XCTUnwrap(assets[1]["value"] as? [Body], "\(assets)")
            XCTAssertEqual(albumCopy.map { $0["size"] as? Int }, [3, 2])
            for entry in assets[2...] {
                XCTAssertEqual(entry["serverErrorCode"] as? String, "NOT_FOUND", "\(entry)")
                XCTAssertNotNil(entry["fieldName"] as? String)
            }

            // Bound to another record, in this zone and in another: served with the same bytes.
            (status, records) = try await RecordAPITests.modify(client, fixture, [
                ["operationType": "create", "record": Self.photo("p2", ["copy": ["value": copy, "type": "ASSETID"]])]])
            XCTAssertEqual(status, 200, "\(records)")
            (status, records) = try await RecordAPITests.modify(client, fixture, zone: "Other", [
                ["operationType": "create", "record": Self.photo("q1", ["album": ["value": albumCopy, "type": "ASSETID_LIST"]])]])
            XCTAssertEqual(status, 200, "\(records)")
            let p2 = try await RecordAPITests.lookup(client, fixture, ["p2"])[0]
            var (served, _, body) = try await Self.get(client, try XCTUnwrap(Self.downloadURL(p2, "copy")))
            XCTAssertEqual(served, 200)
            XCTAssertEqual(body, bytes)
            XCTAssertEqual((RecordAPITests.fields(p2)["copy"]?["value"] as? Body)?["receipt"] as? String, copy["receipt"] as? String)
            let q1 = try await RecordAPITests.lookup(client, fixture, zone: "Other", ["q1"])[0]
            let albumURLs = (RecordAPITests.fields(q1)["album"]?["value"] as? [Body] ?? []).compactMap { $0["downloadURL"] as? String }
            XCTAssertEqual(albumURLs.count, 2)
            (served, _, body) = try await Self.get(client, albumURLs[1])
            XCTAssertEqual(body, [4, 5])

            // A re-referenced receipt binds to one field only, like an upload's; another user's database knows none.
            (status, records) = try await RecordAPITests.modify(client, fixture, [
                ["operationType": "create", "record": Self.photo("p3", ["copy": ["value": copy, "type": "ASSETID"]])]])
            XCTAssertEqual(records.first?["serverErrorCode"] as? String, "BAD_REQUEST", "\(records)")
            let (_, spare) = try await Self.rereference(client, fixture, [("p1", "image")])
            let spareValue = try XCTUnwrap(spare.first?["value"] as? Body)
            try await RecordAPITests.createZone(client, fixture, "Notes", user: "_bob")
            (status, records) = try await RecordAPITests.modify(client, fixture, user: "_bob", [
                ["operationType": "create", "record": Self.photo("b1", ["copy": ["value": spareValue, "type": "ASSETID"]])]])
            XCTAssertEqual(records.first?["serverErrorCode"] as? String, "BAD_REQUEST", "\(records)")
            // Bob cannot re-reference Alice's assets: her records are not his to read, and the answer
            // is the one for a record that does not exist.
            let (bobStatus, bobAnswer) = try await Self.rereference(client, fixture, user: "_bob", [("p1", "image")])
            XCTAssertEqual(bobStatus, 200, "\(bobAnswer)")
            XCTAssertEqual(bobAnswer.first?["serverErrorCode"] as? String, "NOT_FOUND", "\(bobAnswer)")
            let unknownReason = try await Self.rereference(client, fixture, user: "_bob", [("nope", "image")]).1.first?["reason"] as? String
            XCTAssertEqual((bobAnswer.first?["reason"] as? String)?.replacingOccurrences(of: "p1", with: "nope"), unknownReason)
        }
    }

    func testBadRereferenceRequestsAreRefused() async throws {
        try await withStack { stack in
            let (client, fixture) = (stack.client, stack.fixture)
            try await RecordAPITests.createZone(client, fixture, "Notes")
            let cases: [(Any, String, String)] = [
                ([] as [Body], "BAD_REQUEST", "at least one"),
                ((0...200).map { ["recordName": "r\($0)", "fieldName": "image"] }, "LIMIT_EXCEEDED", "At most 200"),
                ([["recordName": "p1", "fieldName": "image"], ["recordName": "p1", "fieldName": "image"]], "BAD_REQUEST", "more than once"),
                ([["recordName": "", "fieldName": "image"]], "BAD_REQUEST", "assets[0]"),
                ([["recordName": "p1", "fieldName": String(repeating: "f", count: 300)]], "BAD_REQUEST", "assets[0]"),
                ([["recordName": "p1"]], "BAD_REQUEST", "fieldName"),
            ]
            for (assets, code, reason) in cases {
                let (status, answer) = try await RecordAPITests.post(client, fixture.path("assets/rereference"), ["zoneID": ["zoneName": "Notes"], "assets": assets])
                XCTAssertEqual(status, 400, "\(answer)")
                XCTAssertEqual(answer["serverErrorCode"] as? String, code, "\(answer)")
                XCTAssertTrue((answer["reason"] as? String ?? "").contains(reason), "\(answer)")
            }
            let (status, answer) = try await RecordAPITests.post(client, fixture.path("assets/rereference"), [
                "zoneID": ["zoneName": "Missing"], "assets": [["recordName": "p1", "fieldName": "image"]]])
            XCTAssertEqual(status, 404, "\(answer)")
            XCTAssertEqual(answer["serverErrorCode"] as? String, "ZONE_NOT_FOUND")
        }
    }

    func testSharedBytesAreCollectedOnlyWithTheLastAssetHoldingThem() async throws {
        try await withStack { stack in
            let (client, fixture, store) = (stack.client, stack.fixture, stack.fixture.store)
            try await RecordAPITests.createZone(client, fixture, "Notes")
            let original = try await Self.upload(client, fixture, record: "p1", field: "image", [9, 8, 7])
            var (status, records) = try await RecordAPITests.modify(client, fixture, [
                ["operationType": "create", "record": Self.photo("p1", ["image": ["value": original, "type": "ASSETID"]])]])
            XCTAssertEqual(status, 200, "\(records)")
            let (_, made) = try await Self.rereference(client, fixture, [("p1", "image")])
            let bound = try XCTUnwrap(made.first?["value"] as? Body)
            let (_, unused) = try await Self.rereference(client, fixture, [("p1", "image")])
            XCTAssertNotNil(unused.first?["value"] as? Body, "a second receipt, never bound")
            (status, records) = try await RecordAPITests.modify(client, fixture, [
                ["operationType": "create", "record": Self.photo("p2", ["image": ["value": bound, "type": "ASSETID"]])]])
            XCTAssertEqual(status, 200, "\(records)")
            let blob = try XCTUnwrap(original["receipt"] as? String)

            // The original's record lets it go; after the grace period the original and the unused
            // receipt are collected, but the bytes stay: p2 holds them through its own asset.
            (status, records) = try await RecordAPITests.modify(client, fixture, [["operationType": "forceDelete", "record": ["recordName": "p1"]]])
            XCTAssertEqual(status, 200, "\(records)")
            try await Self.applyGC(store)
            let collector = OrphanAssetCollector(store: store, blobs: stack.blobs, grace: .seconds(60), logger: TestSupport.logger)
            let within = try await collector.collectOnce()
            XCTAssertEqual(within, 0, "nothing within the grace period")
            var collected = try await collector.collectOnce(now: Date().addingTimeInterval(120))
            XCTAssertEqual(collected, 2, "the released original and the unused receipt")
            var present = try await Self.stored(stack.blobs, blob)
            XCTAssertTrue(present, "p2 still holds the bytes")
            let p2 = try await RecordAPITests.lookup(client, fixture, ["p2"])[0]
            let (served, _, body) = try await Self.get(client, try XCTUnwrap(Self.downloadURL(p2, "image")))
            XCTAssertEqual(served, 200)
            XCTAssertEqual(body, [9, 8, 7])
            // A replayed projection (its counts forgotten) changes nothing: the records decide.
            try await Applier(projection: AssetReferenceProjection(), store: store).reset(logger: TestSupport.logger)
            collected = try await collector.collectOnce(now: Date().addingTimeInterval(120))
            XCTAssertEqual(collected, 0)
            try await Self.applyGC(store)

            // With the last holder gone, the bytes go.
            (status, records) = try await RecordAPITests.modify(client, fixture, [["operationType": "forceDelete", "record": ["recordName": "p2"]]])
            XCTAssertEqual(status, 200, "\(records)")
            try await Self.applyGC(store)
            collected = try await collector.collectOnce(now: Date().addingTimeInterval(120))
            XCTAssertEqual(collected, 1)
            present = try await Self.stored(stack.blobs, blob)
            XCTAssertFalse(present, "the last asset took the bytes with it")
        }
    }

    func testPublicAssetsAreReReferencedByOtherReadersAndCountAgainstTheirUploader() async throws {
        try await withStack(quota: 1_000_000) { stack in
            let (client, fixture) = (stack.client, stack.fixture)
            let (asked, answer) = try await RecordAPITests.post(client, fixture.path("assets/upload", database: "public"), [
                "tokens": [["recordType": "Photo", "recordName": "pub1", "fieldName": "image"]]])
            XCTAssertEqual(asked, 200, "\(answer)")
            let url = try XCTUnwrap(URL(string: try XCTUnwrap((answer["tokens"] as? [Body])?.first?["url"] as? String)))
            let (sent, uploaded) = try await Self.send(client, url.path, [1, 2, 3, 4, 5])
            XCTAssertEqual(sent, 200, "\(uploaded)")
            let single = try XCTUnwrap(uploaded["singleFile"] as? Body)
            let uploaderBytes = try await Self.counted(stack.fixture.store, owner: "_alice")
            XCTAssertEqual(uploaderBytes, 5, "a public upload counts against its uploader")
            var (status, records) = try await RecordAPITests.modify(client, fixture, zone: nil, database: "public", [
                ["operationType": "create", "record": Self.photo("pub1", ["image": ["value": single, "type": "ASSETID"]])]])
            XCTAssertEqual(status, 200, "\(records)")

            // Bob may read Alice's public record: he re-references its asset and binds it to his own record.
            let (rereferenced, made) = try await RecordAPITests.post(client, fixture.path("assets/rereference", database: "public", user: "_bob"), [
                "assets": [["recordName": "pub1", "fieldName": "image"]]])
            XCTAssertEqual(rereferenced, 200, "\(made)")
            let value = try XCTUnwrap((made["assets"] as? [Body])?.first?["value"] as? Body, "\(made)")
            (status, records) = try await RecordAPITests.modify(client, fixture, zone: nil, user: "_bob", database: "public", [
                ["operationType": "create", "record": Self.photo("pub2", ["image": ["value": value, "type": "ASSETID"]])]])
            XCTAssertEqual(status, 200, "\(records)")
            let (served, _, body) = try await Self.get(client, try XCTUnwrap(Self.downloadURL(records[0], "image")))
            XCTAssertEqual(served, 200)
            XCTAssertEqual(body, [1, 2, 3, 4, 5])
            let bobBytes = try await Self.counted(stack.fixture.store, owner: "_bob")
            let bobRecords = try await Self.recordBytes(stack.fixture.store, owner: "_bob")
            XCTAssertEqual(bobBytes, bobRecords, "shared bytes count once, against their uploader")
        }
    }
}
