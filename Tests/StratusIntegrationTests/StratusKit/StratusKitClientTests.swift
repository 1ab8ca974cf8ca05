import Foundation
@testable import StratusKit
import StratusTesting
import XCTest

/// The typed client against the live API: zones, every save policy and its typed errors, lookups
/// with desired keys, deletes, changes, subscriptions and the courier, the caller, assets streamed
/// both ways, and the client's own bounds.
final class StratusKitClientTests: XCTestCase {
    func testTheTypedClientSpeaksEveryOperationItOffers() async throws {
        try await KitStack.with { fixture, port, _ in
            let database = KitStack.container(fixture, port: port, user: "_client").privateCloudDatabase
            let notes = ZoneID(zoneName: "Notes")
            let made = try await database.modifyZones(saving: [Zone(zoneID: notes)])
            XCTAssertEqual(try made[notes]?.get()?.zoneID, notes)
            let zones = try await database.allZones()
            XCTAssertEqual(Set(zones.map(\.zoneID)), [.default, notes])
            let looked = try await database.zones([notes, ZoneID(zoneName: "Missing")])
            XCTAssertEqual(Self.code(looked[ZoneID(zoneName: "Missing")]), .zoneNotFound)

            // Save policies: create, then a stale update is CONFLICT with the server's record.
            let id = RecordID(recordName: "n1", zoneID: notes)
            let created = try await database.save(Record(recordType: "Note", recordID: id, fields: ["title": "one", "stars": 3]))
            var stale = created
            var current = created
            current["title"] = "two"
            current = try await database.save(current)
            stale["title"] = "stale"
            do {
                _ = try await database.save(stale)
                XCTFail("a stale change tag saved")
            } catch let error as StratusKitError {
                XCTAssertEqual(error.code, .conflict)
                XCTAssertEqual(error.serverRecord?["title"], "two")
                XCTAssertEqual(error.serverRecord?.recordChangeTag, current.recordChangeTag)
            }
            do {
                _ = try await database.save(Record(recordType: "Note", recordID: id, fields: ["title": "again"]))
                XCTFail("a create of an existing record saved")
            } catch let error as StratusKitError {
                XCTAssertEqual(error.code, .exists)
            }
            // changedKeys keeps the fields not sent; allKeys drops them.
            _ = try await database.save(Record(recordType: "Note", recordID: id, fields: ["title": "forced"]), savePolicy: .changedKeys)
            let forced = try await database.record(for: id)
            XCTAssertEqual(forced.fields, ["title": "forced", "stars": 3])
            _ = try await database.save(Record(recordType: "Note", recordID: id, fields: ["title": "whole"]), savePolicy: .allKeys)
            let whole = try await database.record(for: id)
            XCTAssertEqual(whole.fields, ["title": "whole"])
            let onlyTitle = try await database.records(for: [id], desiredKeys: ["stars"])
            XCTAssertEqual(try onlyTitle[id]?.get().fields, [:])

            // Changes since a token; a delete shows as one.
            let first = try await database.recordZoneChanges(notes, since: nil)
            XCTAssertEqual(first.modified.map(\.recordID), [id])
            try await database.deleteRecord(id)
            let next = try await database.recordZoneChanges(notes, since: first.syncToken)
            XCTAssertEqual(next.deleted, [id])
            let missing = try await database.records(for: [id])
            XCTAssertEqual(Self.code(missing[id]), .notFound)

            // The caller, subscriptions, a courier token.
            let caller = try await database.callerIdentity()
            XCTAssertEqual(caller.userRecordName, "_client")
            let saved = try await database.modifySubscriptions(saving: [Subscription(subscriptionID: "all", kind: .database)])
            XCTAssertEqual(try saved.first?.get(), "all")
            let subscriptions = try await database.allSubscriptions()
            XCTAssertEqual(subscriptions.map(\.subscriptionID), ["all"])
            let courier = try await database.createCourierToken()
            XCTAssertTrue(courier.webcourierURL.contains("/courier/\(courier.token)"), courier.webcourierURL)

            // An asset uploaded from a file and downloaded to one, both streamed.
            let folder = FileManager.default.temporaryDirectory.appendingPathComponent("stratuskit-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: folder) }
            let bytes = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
            try bytes.write(to: folder.appendingPathComponent("in.bin"))
            let photoID = RecordID(recordName: "photo", zoneID: notes)
            let asset = try await database.uploadAsset(fileURL: folder.appendingPathComponent("in.bin"), recordType: "Photo", recordID: photoID, fieldName: "image")
            XCTAssertEqual(asset.size, Int64(bytes.count))
            _ = try await database.save(Record(recordType: "Photo", recordID: photoID, fields: ["image": .asset(asset)]))
            let photo = try await database.record(for: photoID)
            try await database.downloadAsset(try XCTUnwrap(photo["image"]?.assetValue), to: folder.appendingPathComponent("out.bin"))
            XCTAssertEqual(try Data(contentsOf: folder.appendingPathComponent("out.bin")), bytes)

            // The client's own bounds, before any request.
            do {
                _ = try await database.records(for: [])
                _ = try await database.modifyRecords(saving: (0..<201).map { Record(recordType: "Note", recordID: RecordID(recordName: "r\($0)", zoneID: notes)) }, zoneID: notes)
                XCTFail("201 operations were sent")
            } catch let error as StratusKitError {
                XCTAssertEqual(error.code, .invalidArgument)
            }
            // A server that cannot be reached is a network failure, which a policy may retry.
            do {
                _ = try await KitStack.offline(fixture, user: "_client").privateCloudDatabase.allZones()
                XCTFail("an unreachable server answered")
            } catch let error as StratusKitError {
                XCTAssertEqual(error.code, .networkFailure)
                XCTAssertTrue(error.isRetryable)
            }
        }
    }

    /// The error code of a failed result; nil for none or a success.
    static func code<T>(_ result: Result<T, StratusKitError>?) -> StratusKitError.Code? {
        guard case .failure(let error)? = result else { return nil }
        return error.code
    }
}
