import Foundation
import HummingbirdTesting
import PostgresNIO
import StratusAPI
import StratusBlobStore
import StratusCore
@testable import StratusPostgres
import StratusTesting
import XCTest

/// A container's quotas over all its users (`ContainerQuota`, migration 0047's `container_usage`):
/// records, zones and stored bytes refused past them whichever of two API applications receives the
/// write and whichever user sends it; writes that free space pass; asset bytes refused at the upload;
/// the counts agree with the tables; the CLI sets and shows them.
final class ContainerWideQuotaTests: XCTestCase {
    typealias Body = [String: Any]
    typealias Fixture = RecordAPITests.Fixture

    static func modify(
        _ client: any TestClientProtocol, _ fixture: Fixture, user: String = "_alice", atomic: Bool? = nil, zone: String? = nil, _ operations: [Body]
    ) async throws -> [Body] {
        let (status, records) = try await QuotaTests.modify(client, fixture, zone: zone, user: user, atomic: atomic, operations)
        XCTAssertEqual(status, 200, "\(records)")
        return records
    }

    static func code(_ records: [Body]) -> [String?] { records.map { $0["serverErrorCode"] as? String } }

    /// The container's counts, and what the tables hold.
    static func counts(_ store: PostgresStore) async throws -> (counted: ContainerTotals, records: Int64, zones: Int64) {
        let container = ContainerLimitsTests.container
        let counted = try await store.withConnection { connection in
            try await ContainerCounts.totals(container: container, on: connection, logger: TestSupport.logger)
        }
        let records = try await TestSupport.count(store, "SELECT count(*) FROM records WHERE container = \(container)")
        let zones = try await TestSupport.count(store, "SELECT count(*) FROM zones WHERE container = \(container) AND NOT deleted")
        return (counted, records, zones)
    }

    func testTheRecordsQuotaHoldsAcrossProcessesAndUsersAndFreeingPasses() async throws {
        try await ContainerLimitsTests.withTwoAPIs(ContainerLimits(maxRecords: 4)) { fixture, first, second in
            do { let codes = Self.code(try await Self.modify(first, fixture, [QuotaTests.save("a0", bytes: 10), QuotaTests.save("a1", bytes: 10)])); XCTAssertEqual(codes, [nil, nil]) }
            do { let codes = Self.code(try await Self.modify(second, fixture, user: "_bob", [QuotaTests.save("b0", bytes: 10)])); XCTAssertEqual(codes, [nil]) }
            do { let codes = Self.code(try await Self.modify(second, fixture, [QuotaTests.save("a2", bytes: 10)])); XCTAssertEqual(codes, [nil]) }
            for (client, user) in [(first, "_bob"), (second, "_alice")] {
                let refused = try await Self.modify(client, fixture, user: user, [QuotaTests.save("x", bytes: 10)])
                XCTAssertEqual(Self.code(refused), ["QUOTA_EXCEEDED"], "\(refused)")
                XCTAssertTrue((refused[0]["reason"] as? String ?? "").contains("quota is 4 records"), "\(refused)")
            }
            // A change of a record adds none: it passes at the quota.
            do { let codes = Self.code(try await Self.modify(first, fixture, [QuotaTests.save("a0", bytes: 500, type: "forceReplace")])); XCTAssertEqual(codes, [nil]) }
            // A delete frees one; an atomic batch of two does not fit and stores nothing.
            do { let codes = Self.code(try await Self.modify(second, fixture, [["operationType": "forceDelete", "record": ["recordName": "a1"]]])); XCTAssertEqual(codes, [nil]) }
            try await QuotaTests.createZone(first, fixture, "Notes")
            let batch = try await Self.modify(first, fixture, atomic: true, zone: "Notes",
                                              [QuotaTests.save("b1", bytes: 10), QuotaTests.save("b2", bytes: 10)])
            XCTAssertEqual(Self.code(batch), ["ATOMIC_ERROR", "QUOTA_EXCEEDED"], "\(batch)")
            do { let codes = Self.code(try await Self.modify(first, fixture, user: "_bob", [QuotaTests.save("b1", bytes: 10)])); XCTAssertEqual(codes, [nil]) }
            let counts = try await Self.counts(fixture.store)
            XCTAssertEqual(counts.counted.records, 4)
            XCTAssertEqual(counts.records, 4)
        }
    }

    func testTheBytesAndZonesQuotasHoldAcrossProcessesAndDeletingAZoneFrees() async throws {
        try await ContainerLimitsTests.withTwoAPIs(ContainerLimits(maxZones: 2, quotaBytes: 6_000)) { fixture, first, second in
            func zones(_ client: any TestClientProtocol, user: String, _ operations: [(String, String)]) async throws -> [String?] {
                let (status, _, body) = try await RateLimitTests.send(client, fixture.path("zones/modify", user: user), [
                    "operations": operations.map { ["operationType": $0.0, "zone": ["zoneID": ["zoneName": $0.1]]] },
                ])
                XCTAssertEqual(status, 200, "\(body)")
                return (body["zones"] as? [Body] ?? []).map { $0["serverErrorCode"] as? String }
            }
            do { let codes = try await zones(first, user: "_alice", [("create", "A")]); XCTAssertEqual(codes, [nil]) }
            do { let codes = try await zones(second, user: "_bob", [("create", "B"), ("create", "C")]); XCTAssertEqual(codes, [nil, "QUOTA_EXCEEDED"]) }
            do { let codes = try await zones(first, user: "_carol", [("create", "C")]); XCTAssertEqual(codes, ["QUOTA_EXCEEDED"]) }

            do { let codes = Self.code(try await Self.modify(first, fixture, zone: "A", [QuotaTests.save("a0", bytes: 2_300)])); XCTAssertEqual(codes, [nil]) }
            do { let codes = Self.code(try await Self.modify(second, fixture, user: "_bob", [QuotaTests.save("b0", bytes: 2_300)])); XCTAssertEqual(codes, [nil]) }
            for (client, user) in [(second, "_alice"), (first, "_bob")] {
                let refused = try await Self.modify(client, fixture, user: user, [QuotaTests.save("x", bytes: 2_300)])
                XCTAssertEqual(Self.code(refused), ["QUOTA_EXCEEDED"], "\(refused)")
                XCTAssertTrue((refused[0]["reason"] as? String ?? "").contains("quota is 6000 bytes"), "\(refused)")
            }
            // Deleting alice's zone frees its records' bytes and the zone: both writes pass again.
            do { let codes = try await zones(second, user: "_alice", [("delete", "A")]); XCTAssertEqual(codes, [nil]) }
            do { let codes = try await zones(first, user: "_carol", [("create", "C")]); XCTAssertEqual(codes, [nil]) }
            do { let codes = Self.code(try await Self.modify(second, fixture, user: "_carol", [QuotaTests.save("c0", bytes: 2_300)])); XCTAssertEqual(codes, [nil]) }
            let counts = try await Self.counts(fixture.store)
            XCTAssertEqual(counts.counted.zones, 2)
            XCTAssertEqual(counts.zones, 2)
            XCTAssertEqual(counts.counted.records, counts.records)
            let stored = try await TestSupport.count(fixture.store, "SELECT coalesce(sum(bytes), 0)::int8 FROM storage_usage")
            XCTAssertEqual(counts.counted.bytes, stored, "the container's bytes are its users' bytes")
        }
    }

    func testTheAssetQuotaRefusesTheUploadThatPassesIt() async throws {
        let directory = NSTemporaryDirectory() + "stratus-asset-quota-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try await AssetTests.withStack(
            blobs: FileSystemBlobStore(directory: directory), blobSettings: ["STRATUS_ASSET_STORE": "filesystem", "STRATUS_ASSET_DIR": directory]
        ) { stack in
            let (client, fixture, store) = (stack.client, stack.fixture, stack.fixture.store)
            let set = try await ContainerStore(store: store).setLimits(
                of: fixture.container, ContainerLimits(assetQuotaBytes: 5_000), logger: TestSupport.logger)
            XCTAssertTrue(set)
            try await RecordAPITests.createZone(client, fixture, "Notes")
            try await RecordAPITests.createZone(client, fixture, "Notes", user: "_bob")
            _ = try await AssetTests.upload(client, fixture, record: "p1", field: "image", AssetTests.random(3_000))
            _ = try await AssetTests.upload(client, fixture, record: "p2", field: "image", AssetTests.random(1_500), user: "_bob")
            let path = try await AssetTests.uploadPath(client, fixture, record: "p3", field: "image")
            let (status, answer) = try await AssetTests.send(client, path, AssetTests.random(1_000))
            XCTAssertEqual(status, 413, "\(answer)")
            XCTAssertEqual(answer["serverErrorCode"] as? String, "QUOTA_EXCEEDED", "\(answer)")
            XCTAssertTrue((answer["reason"] as? String ?? "").contains("asset quota is 5000 bytes"), "\(answer)")
            let counted = try await store.withConnection { connection in
                try await ContainerCounts.totals(container: fixture.container, on: connection, logger: TestSupport.logger)
            }
            XCTAssertEqual(counted.assetBytes, 4_500, "the refused upload is not counted")
            let small = try await AssetTests.uploadPath(client, fixture, record: "p4", field: "image")
            let (fits, _) = try await AssetTests.send(client, small, AssetTests.random(500))
            XCTAssertEqual(fits, 200)
        }
    }

    /// Migration 0047 counts what containers already held: live records and zones, the users'
    /// stored bytes, and asset bytes shared by a re-referenced asset once.
    func testTheMigrationCountsWhatContainersAlreadyHeld() async throws {
        let url = try await TestSupport.createDatabase()
        let migrations = try TestSupport.migrations()
        try await TestSupport.withStore(url: url) { store in
            try await Migrator(store: store, migrations: migrations.filter { $0.version < 47 }).migrate(logger: TestSupport.logger)
            try await store.withConnection { connection in
                try await connection.query("INSERT INTO containers (container) VALUES ('c'), ('other')", logger: TestSupport.logger)
                for (zone, deleted) in [("Z1", false), ("Z2", false), ("Gone", true)] {
                    try await connection.query("""
                        INSERT INTO zones (container, environment, scope, owner, zone_name, incarnation, change_counter, deleted)
                        VALUES ('c', 'development', 'private', '_alice', \(zone), \(UUID()), 1, \(deleted))
                        """, logger: TestSupport.logger)
                }
                for name in ["r1", "r2", "r3"] {
                    try await connection.query("""
                        INSERT INTO records (container, environment, scope, owner, zone_name, record_name, record_type, fields, change_tag,
                            created_at, created_by, modified_at, modified_by)
                        VALUES ('c', 'development', 'private', '_alice', 'Z1', \(name), 'Note', '{"text": {"value": "hello"}}'::jsonb, 't', 0, '_alice', 0, '_alice')
                        """, logger: TestSupport.logger)
                }
                try await connection.query("""
                    INSERT INTO storage_usage (container, environment, owner, shard, bytes)
                    VALUES ('c', 'development', '_alice', 0, 700), ('c', 'production', '_bob', 3, 50), ('other', 'development', '_carol', 0, 9)
                    """, logger: TestSupport.logger)
                let source = UUID()
                for (asset, blob, size, owner) in [(source, nil, 100, "_alice"), (UUID(), source, 100, "_alice"), (UUID(), nil, nil, nil)] as [(UUID, UUID?, Int64?, String?)] {
                    try await connection.query("""
                        INSERT INTO assets (asset_id, container, environment, scope, owner, zone_name, record_name, record_type, field_name, state,
                            size, blob_id, usage_owner)
                        VALUES (\(asset), 'c', 'development', 'private', '_alice', 'Z1', 'r1', 'Photo', 'image',
                                \(size == nil ? "uploading" : "uploaded"), \(size), \(blob), \(owner))
                        """, logger: TestSupport.logger)
                }
            }
            try await Migrator(store: store, migrations: migrations).migrate(logger: TestSupport.logger)
            let counted = try await store.withConnection { connection in
                try await ContainerCounts.totals(container: "c", on: connection, logger: TestSupport.logger)
            }
            XCTAssertEqual(counted, ContainerTotals(records: 3, zones: 2, bytes: 750, assetBytes: 100))
            let other = try await store.withConnection { connection in
                try await ContainerCounts.totals(container: "other", on: connection, logger: TestSupport.logger)
            }
            XCTAssertEqual(other, ContainerTotals(bytes: 9))
        }
    }

    func testTheCLISetsAndShowsTheQuotasAndTheUsage() async throws {
        try await ContainerLimitsTests.withTwoAPIs(ContainerLimits()) { fixture, first, _ in
            _ = try await Self.modify(first, fixture, [QuotaTests.save("a0", bytes: 100), QuotaTests.save("a1", bytes: 100)])
            let settings = ["STRATUS_DATABASE_URL": fixture.databaseURL]
            let set = try await StratusExecutable.run(
                "stratus", ["container", "set", ContainerLimitsTests.container, "--max-records", "2", "--quota-bytes", "100000"], settings: settings)
            XCTAssertEqual(set.status, 0, set.output)
            let show = try await StratusExecutable.run("stratus", ["container", "show", ContainerLimitsTests.container], settings: settings)
            for line in ["max-records: 2", "quota-bytes: 100000", "max-zones: default", "asset-quota-bytes: default", "records: 2"] {
                XCTAssertTrue(show.output.contains(line), "\(line): \(show.output)")
            }
            let audited = try await AuditLog(store: fixture.store).entries(
                AuditLog.Filter(action: AuditAction.containerSettings.rawValue), limit: 1, logger: TestSupport.logger)
            XCTAssertTrue(audited.first?.details.contains("max-records") ?? false, "\(audited)")
            let bad = try await StratusExecutable.run("stratus", ["container", "set", ContainerLimitsTests.container, "--max-zones", "1.5"], settings: settings)
            XCTAssertNotEqual(bad.status, 0)
            XCTAssertTrue(bad.output.contains("max-zones"), bad.output)
        }
    }
}
