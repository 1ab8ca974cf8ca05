import Foundation
import HummingbirdTesting
@testable import StratusAPI
import StratusCore
import StratusPostgres
import StratusTesting
import XCTest

/// Sync pages and lookups in a private database answer each record by copying the text PostgreSQL
/// renders from its row (`SyncStore.storedText`, one statement), falling back to reading records
/// into `Record`s where the copy cannot serve (a share). Either way a record must say exactly what
/// the general path — the record read from its row and written by `RecordWire.dictionary` — says.
extension SyncTests {
    static func wireRecords() -> [Body] { [
        ["recordName": "scalars", "recordType": "Item", "fields": [
            "text": ["value": "tab\t, quote \", backslash \\, emoji 🌍"], "int": ["value": 9_007_199_254_740_993, "type": "INT64"],
            "negative": ["value": -42, "type": "INT64"], "double": ["value": 3.25, "type": "DOUBLE"], "whole": ["value": 3.0, "type": "DOUBLE"],
            "time": ["value": 1_700_000_000_123, "type": "TIMESTAMP"], "bytes": ["value": "AAEC+g==", "type": "BYTES"],
            "ref": ["value": ["recordName": "lists", "action": "DELETE_SELF"], "type": "REFERENCE"],
            "place": ["value": ["latitude": 1.5, "longitude": -2.25, "horizontalAccuracy": 3, "altitude": 10, "timestamp": 1_700_000_000_000], "type": "LOCATION"],
        ]],
        ["recordName": "lists", "recordType": "Item", "fields": [
            "texts": ["value": ["a", "b\""], "type": "STRING_LIST"], "ints": ["value": [1, -2], "type": "INT64_LIST"],
            "doubles": ["value": [0.5, 2], "type": "DOUBLE_LIST"],
        ]],
        ["recordName": "child", "recordType": "Note", "parent": ["recordName": "scalars"], "expirationDate": Int64(Date().timeIntervalSince1970 * 1000) + 86_400_000,
         "fields": ["f": ["value": "v"]]],
        ["recordName": "na\"me\\é", "recordType": "T_y", "fields": ["f": ["value": "w"]]],
    ] }

    /// Creates `zone` and saves `wireRecords()` in it; the reply of the save.
    @discardableResult
    static func saveWireRecords(_ client: any TestClientProtocol, _ fixture: RecordAPITests.Fixture, zone: String) async throws -> Body {
        try await RecordAPITests.createZone(client, fixture, zone)
        let (status, saved) = try await RecordAPITests.post(client, fixture.path("records/modify"), [
            "zoneID": ["zoneName": zone], "operations": wireRecords().map { ["operationType": "create", "record": $0] },
        ])
        guard status == 200 else { throw SaveFailed(description: "the records could not be saved: \(saved)") }
        return saved
    }

    struct SaveFailed: Error, CustomStringConvertible { var description: String }

    /// Sets every column of the zone's records that the API leaves empty on a plain record
    /// (devices, share, short GUID, expiration).
    static func setEveryColumn(_ store: PostgresStore, zone: String) async throws {
        try await store.withConnection { connection in
            try await connection.query("""
                UPDATE records SET created_device = 'device "one" \\', modified_device = 'device-2', share = 'share\u{00e9}',
                    short_guid = 'guid-' || record_name, expires_at = coalesce(expires_at, 4102444800000)
                WHERE zone_name = \(zone)
                """, logger: TestSupport.logger)
        }
    }

    /// Each record of the page (by name) and what lookup says of it, both with `extra` in the request.
    static func compareWithLookup(
        _ client: any TestClientProtocol, _ fixture: RecordAPITests.Fixture, zone: String, names: [String], extra: Body = [:], _ context: String
    ) async throws {
        var changes: Body = ["zoneID": ["zoneName": zone]]
        changes.merge(extra) { _, new in new }
        let (status, page) = try await RecordAPITests.post(client, fixture.path("records/changes"), changes)
        XCTAssertEqual(status, 200, "\(context): \(page)")
        var lookup: Body = ["zoneID": ["zoneName": zone], "records": names.map { ["recordName": $0] }]
        lookup.merge(extra) { _, new in new }
        let (lookupStatus, looked) = try await RecordAPITests.post(client, fixture.path("records/lookup"), lookup)
        XCTAssertEqual(lookupStatus, 200, "\(context): \(looked)")
        // Lookup against the general path, for the records the copy serves.
        let database = DatabaseID(container: fixture.container, environment: .development, scope: .private, owner: "_alice")
        let read = try await RecordStore(store: fixture.store).lookup(names, zone: ZoneID(zoneName: zone, ownerRecordName: "_alice"), in: database, logger: TestSupport.logger)
        let links = AssetLinks(key: fixture.configuration.secretKey, base: "http://h", expiresAt: 0)
        for record in (looked["records"] as? [Body]) ?? [] {
            let name = record["recordName"] as? String ?? ""
            guard let stored = read[ExactName(name)], !ShareRecord.isShare(stored.recordType) else { continue }
            let general = RecordWire.dictionary(
                stored, zone: ZoneID(zoneName: zone, ownerRecordName: "_alice"), desiredKeys: extra["desiredKeys"] as? [String],
                numbersAsStrings: extra["numbersAsStrings"] as? Bool ?? false, links: links)
            let expected = try JSONSerialization.data(withJSONObject: try JSONSerialization.jsonObject(with: Data(general.serialized())), options: [.sortedKeys])
            let actual = try JSONSerialization.data(withJSONObject: record, options: [.sortedKeys])
            XCTAssertEqual(String(decoding: actual, as: UTF8.self), String(decoding: expected, as: UTF8.self), "\(context): lookup of \(name)")
        }
        let synced = Dictionary(((page["records"] as? [Body]) ?? []).map { ($0["recordName"] as? String ?? "", $0) }, uniquingKeysWith: { a, _ in a })
        XCTAssertEqual(Set(synced.keys), Set(names), "\(context): the page holds every record")
        for record in (looked["records"] as? [Body]) ?? [] {
            let name = record["recordName"] as? String ?? ""
            let expected = try JSONSerialization.data(withJSONObject: record, options: [.sortedKeys])
            let actual = try JSONSerialization.data(withJSONObject: synced[name] ?? [:], options: [.sortedKeys])
            XCTAssertEqual(String(decoding: actual, as: UTF8.self), String(decoding: expected, as: UTF8.self), "\(context): \(name)")
        }
    }

    func testASyncPageSaysWhatLookupSaysOfEveryRecord() async throws {
        try await withFixture { fixture, client in
            let saved = try await Self.saveWireRecords(client, fixture, zone: "Wire")
            let names = Self.wireRecords().map { $0["recordName"] as! String }
            try await Self.compareWithLookup(client, fixture, zone: "Wire", names: names, "copied")
            try await Self.compareWithLookup(client, fixture, zone: "Wire", names: names, extra: ["desiredKeys": ["text", "texts", "f", "missing"]], "desiredKeys")
            try await Self.compareWithLookup(client, fixture, zone: "Wire", names: names, extra: ["numbersAsStrings": true], "numbersAsStrings")
            try await Self.compareWithLookup(client, fixture, zone: "Wire", names: names, extra: ["reverse": true], "reverse")

            // A share in the page: the page is read in the transaction, records and all.
            let (shareStatus, shared) = try await RecordAPITests.post(client, fixture.path("records/modify"), [
                "zoneID": ["zoneName": "Wire"], "operations": [
                    ["operationType": "update", "record": ["recordName": "lists", "recordType": "Item", "share": ["recordName": "share-1"],
                                                           "recordChangeTag": (saved["records"] as? [Body])?[1]["recordChangeTag"] ?? ""]],
                    ["operationType": "create", "record": ["recordName": "share-1", "recordType": "cloudkit.share"]],
                ],
            ])
            XCTAssertEqual(shareStatus, 200, "\(shared)")
            try await Self.compareWithLookup(client, fixture, zone: "Wire", names: names + ["share-1"], "with a share")
        }
    }

    /// A page asked for in wire form gets each record written by PostgreSQL byte for byte as the
    /// API writes it from the record's stored text — with the columns a plain save leaves empty
    /// (no device: the Web Services' one, which migration 0031's `wire_head` writes too), then with
    /// every column set (device, share, short GUID, expiration, parent); a page holding a record
    /// with an asset field, whose download link is signed per answer, is the general page (records
    /// read), and so is every page when the wire form is not asked for.
    func testAWirePageWritesEachRecordAsTheAPIWritesItsStoredText() async throws {
        try await withFixture { fixture, client in
            try await Self.saveWireRecords(client, fixture, zone: "Wired")
            var names = Self.wireRecords().map { $0["recordName"] as! String }
            try await fixture.store.withConnection { connection in
                // An asset field, as the stored form writes one (what `records/modify` binds after an upload).
                try await connection.query("""
                    INSERT INTO records (container, environment, scope, owner, zone_name, record_name, record_type, fields, change_tag,
                        created_at, created_by, modified_at, modified_by, version, created_version)
                    SELECT container, environment, scope, owner, zone_name, 'asset', record_type,
                           '{"file": {"type": "ASSETID", "value": {"fileChecksum": "c2hh", "size": 3, "receipt": "r"}}}'::jsonb, change_tag,
                           created_at, created_by, modified_at, modified_by, version + 1000, created_version + 1000
                    FROM records WHERE zone_name = 'Wired' AND record_name = 'lists'
                    """, logger: TestSupport.logger)
                // As a write raises it: the zone's change counter at its newest version.
                try await connection.query("""
                    UPDATE zones SET change_counter = (SELECT max(version) FROM records WHERE zone_name = 'Wired') WHERE zone_name = 'Wired'
                    """, logger: TestSupport.logger)
            }
            names.append("asset")
            let zone = ZoneID(zoneName: "Wired", ownerRecordName: "_alice")
            let database = DatabaseID(container: fixture.container, environment: .development, scope: .private, owner: "_alice")
            let zoneID = String(decoding: zone.json.serialized(), as: UTF8.self)
            let sync = SyncStore(store: fixture.store)
            let links = AssetLinks(key: fixture.configuration.secretKey, base: "http://h", expiresAt: 0)
            for columns in ["as saved", "every column set"] {
                if columns == "every column set" { try await Self.setEveryColumn(fixture.store, zone: "Wired") }
                // The size a page's byte budget counts is the stored fields' length, kept with every write.
                let sizes = try await TestSupport.count(fixture.store, """
                    SELECT count(*)::int8 FROM records WHERE zone_name = 'Wired' AND fields_bytes = octet_length(fields::text)
                    """)
                XCTAssertEqual(sizes, Int64(names.count), columns)
                let whole = try await sync.changes(zone: zone, in: database, incarnation: nil, since: 0, limit: 100, wire: zoneID, logger: TestSupport.logger)
                XCTAssertNil(whole.wire, "a page holding the asset record is the general page (\(columns))")
                XCTAssertEqual(whole.changes.count, names.count, columns)
                let plain = try await sync.changes(zone: zone, in: database, incarnation: nil, since: 0, limit: 100, logger: TestSupport.logger)
                XCTAssertNil(plain.wire, columns)
                XCTAssertEqual(plain.changes.count, names.count, columns)
                for change in plain.changes {
                    guard case .saved = change else { return XCTFail("\(change.recordName): without the wire form, records are read (\(columns))") }
                }
                guard let texts = try await RecordStore(store: fixture.store).lookupStored(names, zone: zone, in: database, logger: TestSupport.logger) else {
                    return XCTFail("every record has its stored text")
                }
                // Page by page, one record each: every page but the asset record's is written by PostgreSQL.
                var written: Set<String> = []
                var version: Int64 = 0
                for _ in names {
                    let page = try await sync.changes(zone: zone, in: database, incarnation: nil, since: version, limit: 1, wire: zoneID, logger: TestSupport.logger)
                    version = page.version
                    if let text = page.wireText {
                        guard case .object(let members) = try JSONParser.parse(text), let name = members["recordName"]?.stringValue else {
                            return XCTFail("\(text) is one record (\(columns))")
                        }
                        var expected: [UInt8] = []
                        try RecordWire.write(
                            stored: try XCTUnwrap(texts[ExactName(name)]), zone: zone, zoneID: Array(zoneID.utf8), desiredKeys: nil, numbersAsStrings: false,
                            links: links, into: &expected)
                        XCTAssertEqual(text, String(decoding: expected, as: UTF8.self), "\(name), \(columns)")
                        written.insert(name)
                    } else {
                        XCTAssertEqual(page.changes.map(\.recordName), ["asset"], "only the asset record's page is left to the general page (\(columns))")
                    }
                }
                XCTAssertEqual(written, Set(names).subtracting(["asset"]), columns)
            }
        }
    }

    /// A page whose records all have their wire form comes joined by PostgreSQL in one row, and it
    /// ends where the general page ends — same entries, position, `moreComing`, reverse bounds and
    /// bytes — for every limit, byte budget (the first record fitting or not), direction and token,
    /// with deletions and an expired record among the changes; each entry is what the API writes
    /// from the record's stored text.
    func testAJoinedPageEndsWhereTheGeneralPageEnds() async throws {
        try await withFixture { fixture, client in
            try await Self.saveWireRecords(client, fixture, zone: "Joined")
            try await Self.setEveryColumn(fixture.store, zone: "Joined")
            let (deleted, deletion) = try await RecordAPITests.post(client, fixture.path("records/modify"), [
                "zoneID": ["zoneName": "Joined"], "operations": [
                    ["operationType": "forceDelete", "record": ["recordName": "lists"]],
                    ["operationType": "create", "record": ["recordName": "late", "recordType": "Note", "fields": ["f": ["value": "x"]]]],
                ],
            ])
            XCTAssertEqual(deleted, 200, "\(deletion)")
            try await fixture.store.withConnection { connection in
                // Expired as if at a later change (the zone's ninth).
                try await connection.query("UPDATE records SET expires_at = 1, version = 9 WHERE zone_name = 'Joined' AND record_name = 'child'", logger: TestSupport.logger)
                try await connection.query("UPDATE zones SET change_counter = 9 WHERE zone_name = 'Joined'", logger: TestSupport.logger)
            }
            let zone = ZoneID(zoneName: "Joined", ownerRecordName: "_alice")
            let database = DatabaseID(container: fixture.container, environment: .development, scope: .private, owner: "_alice")
            let zoneID = String(decoding: zone.json.serialized(), as: UTF8.self)
            let sync = SyncStore(store: fixture.store)
            let links = AssetLinks(key: fixture.configuration.secretKey, base: "http://h", expiresAt: 0)
            let texts = try await RecordStore(store: fixture.store).lookupStored(
                Self.wireRecords().map { $0["recordName"] as! String } + ["late"], zone: zone, in: database, logger: TestSupport.logger) ?? [:]
            var joinedPages = 0
            for mode in [SyncStore.Mode.forward, .reverse(upTo: nil, below: nil)] {
                for since: Int64 in [0, 2, 4] {
                    for limit in [1, 2, 3, 100] {
                        for (maxBytes, firstAlwaysFits) in [(Int.max, true), (1, true), (1, false), (120, true), (400, false)] {
                            let context = "\(mode) since \(since) limit \(limit) budget \(maxBytes) \(firstAlwaysFits)"
                            let plain = try await sync.changes(zone: zone, in: database, incarnation: nil, since: since, limit: limit, mode: mode,
                                                               maxBytes: maxBytes, firstAlwaysFits: firstAlwaysFits, logger: TestSupport.logger)
                            let joined = try await sync.changes(zone: zone, in: database, incarnation: nil, since: since, limit: limit, mode: mode,
                                                                maxBytes: maxBytes, firstAlwaysFits: firstAlwaysFits, wire: zoneID, logger: TestSupport.logger)
                            XCTAssertNil(plain.wire, context)
                            XCTAssertEqual(joined.version, plain.version, context)
                            XCTAssertEqual(joined.moreComing, plain.moreComing, context)
                            XCTAssertEqual(joined.reverse?.upTo, plain.reverse?.upTo, context)
                            XCTAssertEqual(joined.reverse?.below, plain.reverse?.below, context)
                            XCTAssertEqual(joined.bytes, plain.bytes, context)
                            XCTAssertTrue(joined.changes.isEmpty, context)
                            // The entries, written as the API writes each from its stored text.
                            var expected: [UInt8] = []
                            for (index, change) in plain.changes.enumerated() {
                                if index > 0 { expected.append(UInt8(ascii: ",")) }
                                switch change {
                                case .saved(let record):
                                    try RecordWire.write(stored: try XCTUnwrap(texts[ExactName(record.recordName)], context), zone: zone, zoneID: Array(zoneID.utf8),
                                                         desiredKeys: nil, numbersAsStrings: false, links: links, into: &expected)
                                case .deleted(let name, _):
                                    JSONValue.object(["recordName": .string(name), "deleted": .bool(true)]).write(into: &expected)
                                }
                            }
                            XCTAssertEqual(joined.wireText ?? "", String(decoding: expected, as: UTF8.self), context)
                            if !plain.changes.isEmpty { joinedPages += 1 }
                        }
                    }
                }
            }
            XCTAssertGreaterThan(joinedPages, 40)
            // From a token after the first four records: "lists" deleted, "scalars" deleted with it (its
            // reference says DELETE_SELF) and "child" expired.
            let all = try await sync.changes(zone: zone, in: database, incarnation: nil, since: 4, limit: 100, wire: zoneID, logger: TestSupport.logger)
            guard case .array(let entries) = try JSONParser.parse("[" + (all.wireText ?? "") + "]") else { return XCTFail("the entries are JSON") }
            let deletions = entries.filter { $0["deleted"] == .bool(true) }.compactMap { $0["recordName"]?.stringValue }
            XCTAssertEqual(Set(deletions), ["lists", "scalars", "child"])
        }
    }

    /// The stored text PostgreSQL writes for a row says what the row's columns say, every column
    /// set: the API writes no device, share or short GUID on a plain record, so they are set here.
    func testTheStoredTextOfARowSaysWhatItsColumnsSay() async throws {
        try await withFixture { fixture, client in
            try await Self.saveWireRecords(client, fixture, zone: "Text")
            let names = Self.wireRecords().map { $0["recordName"] as! String }
            try await Self.setEveryColumn(fixture.store, zone: "Text")
            let zone = ZoneID(zoneName: "Text", ownerRecordName: "_alice")
            let database = DatabaseID(container: fixture.container, environment: .development, scope: .private, owner: "_alice")
            let records = RecordStore(store: fixture.store)
            guard let texts = try await records.lookupStored(names, zone: zone, in: database, logger: TestSupport.logger) else {
                return XCTFail("every record has its text")
            }
            let general = try await records.lookup(names, zone: zone, in: database, reader: "_alice", logger: TestSupport.logger).records
            XCTAssertEqual(Set(texts.keys), Set(names.map(ExactName.init)))
            for name in names {
                let copied = try XCTUnwrap(texts[ExactName(name)])
                let read = try XCTUnwrap(general[ExactName(name)])
                XCTAssertEqual(try EventCoding.decodeRecord(copied), read, name)
                XCTAssertEqual(read.created.deviceID, "device \"one\" \\")
                XCTAssertEqual(read.share, "share\u{00e9}")
            }
        }
    }
}
