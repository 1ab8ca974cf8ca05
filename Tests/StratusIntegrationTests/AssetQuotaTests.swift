import Foundation
import HummingbirdTesting
import StratusBlobStore
import StratusCore
@testable import StratusPostgres
import StratusTesting
import StratusWorkers
import XCTest

/// Asset bytes count toward the per-user storage quota (docs/configuration.md): from the moment an
/// upload is stored until the last asset holding the bytes is collected. In an extension of
/// `AssetTests`, so `S3AssetTests` runs it against the S3 store too.
extension AssetTests {
    /// The bytes storage_usage counts for a user.
    static func counted(_ store: PostgresStore, owner: String = "_alice") async throws -> Int64 {
        try await store.withConnection { connection in
            try await StorageUsage.total(container: "iCloud.com.example.notes", environment: "development", owner: owner, on: connection, logger: TestSupport.logger)
        }
    }

    /// The bytes of a user's records' fields as stored.
    static func recordBytes(_ store: PostgresStore, owner: String = "_alice") async throws -> Int64 {
        try await QuotaTests.usage(store, owner: owner).actual
    }

    func testAssetBytesCountTowardTheStorageQuotaUntilTheyAreCollected() async throws {
        try await withStack(quota: 10_000) { stack in
            let (client, fixture, store) = (stack.client, stack.fixture, stack.fixture.store)
            try await RecordAPITests.createZone(client, fixture, "Notes")
            // An upload counts as soon as it is stored, bound or not.
            let first = try await Self.upload(client, fixture, record: "p1", field: "image", Self.random(4_000))
            var counted = try await Self.counted(store)
            XCTAssertEqual(counted, 4_000)

            // An upload that would pass the quota is refused, and nothing of it is kept or counted.
            let path = try await Self.uploadPath(client, fixture, record: "p2", field: "image")
            var (status, answer) = try await Self.send(client, path, Self.random(7_000))
            XCTAssertEqual(status, 413, "\(answer)")
            XCTAssertEqual(answer["serverErrorCode"] as? String, "QUOTA_EXCEEDED", "\(answer)")
            XCTAssertTrue((answer["reason"] as? String ?? "").contains("10000 bytes"), "\(answer)")
            counted = try await Self.counted(store)
            XCTAssertEqual(counted, 4_000)
            let uploads = try await store.withConnection { connection in
                try await RecordExpirationTests.scalarNames(connection, "SELECT record_name FROM assets ORDER BY record_name")
            }
            XCTAssertEqual(uploads, ["p1"], "the refused upload left no asset")
            // A stream without a declared length is checked once stored: the same refusal, in the
            // transaction that completes the upload.
            let grant = AssetUploadGrant(
                assetID: UUID(), database: DatabaseID(container: fixture.container, environment: .development, scope: .private, owner: "_alice"),
                zoneName: "Notes", recordName: "p3", recordType: "Photo", fieldName: "image", expiresAt: Int64.max)
            let assets = AssetStore(store: store)
            let begun = try await assets.beginUpload(grant, logger: TestSupport.logger)
            XCTAssertTrue(begun)
            do {
                try await assets.finishUpload(grant.assetID, size: 7_000, fileChecksum: "x", usageOwner: "_alice", quota: 10_000, logger: TestSupport.logger)
                XCTFail("an upload past the quota must be refused")
            } catch let error as StratusError {
                XCTAssertEqual(error.code, .quotaExceeded)
            }
            let state = try await assets.find([grant.assetID], logger: TestSupport.logger)[grant.assetID]?.state
            XCTAssertEqual(state, "uploading", "the refused completion changed nothing")
            try await assets.abandonUpload(grant.assetID, logger: TestSupport.logger)
            counted = try await Self.counted(store)
            XCTAssertEqual(counted, 4_000)

            // Records and assets share the quota: the bound asset's record adds its fields, and a
            // record that would pass the quota with the asset's bytes is refused.
            var records: [Body]
            (status, records) = try await RecordAPITests.modify(client, fixture, [
                ["operationType": "create", "record": Self.photo("p1", ["image": ["value": first, "type": "ASSETID"]])]])
            XCTAssertEqual(status, 200, "\(records)")
            let withRecord = try await Self.recordBytes(store)
            counted = try await Self.counted(store)
            XCTAssertEqual(counted, 4_000 + withRecord)
            (status, records) = try await RecordAPITests.modify(client, fixture, [
                ["operationType": "create", "record": RecordAPITests.note("big", ["text": ["value": String(repeating: "x", count: 6_500)]])]])
            XCTAssertEqual(records.first?["serverErrorCode"] as? String, "QUOTA_EXCEEDED", "\(records)")

            // A re-referenced asset shares the bytes: they count once.
            let (_, made) = try await Self.rereference(client, fixture, [("p1", "image")])
            XCTAssertNotNil(made.first?["value"] as? Body, "\(made)")
            counted = try await Self.counted(store)
            XCTAssertEqual(counted, 4_000 + withRecord)

            // Deleting the record gives its fields back at once, the asset's bytes once stratus-gc
            // has collected the asset (and the unused re-referenced one) after the grace period.
            (status, records) = try await RecordAPITests.modify(client, fixture, [["operationType": "forceDelete", "record": ["recordName": "p1"]]])
            XCTAssertEqual(status, 200, "\(records)")
            counted = try await Self.counted(store)
            XCTAssertEqual(counted, 4_000)
            try await Self.applyGC(store)
            let collector = OrphanAssetCollector(store: store, blobs: stack.blobs, grace: .seconds(60), logger: TestSupport.logger)
            let collected = try await collector.collectOnce(now: Date().addingTimeInterval(120))
            XCTAssertEqual(collected, 2)
            counted = try await Self.counted(store)
            XCTAssertEqual(counted, 0, "collected bytes are given back, once")
            // Room again for the upload refused before.
            (status, answer) = try await Self.send(client, try await Self.uploadPath(client, fixture, record: "p2", field: "image"), Self.random(7_000))
            XCTAssertEqual(status, 200, "\(answer)")
        }
    }
}
