import Foundation
import HummingbirdTesting
@testable import StratusAPI
import StratusBlobStore
import StratusCore
import StratusPostgres
import StratusTesting
import XCTest

/// `RecordWire.dictionary` owns CloudKit's record dictionary. The renderings kept for speed — the
/// SQL of a sync page (`SyncStore`, over migration 0031's `wire_head`) and the copy of a record's
/// stored text (`RecordWire.write(stored:…)`) — must say what it says, for every field type and
/// every optional member a record can carry. The records are written through `records/modify`
/// (assets uploaded first), then each is read the SQL way (a sync page written by PostgreSQL), by
/// copying its stored text, and the Swift way (read into a `Record`, through the general sync page
/// and through lookup, written by `RecordWire.dictionary`): the JSON must agree, and the SQL
/// page's bytes must be the copy's bytes.
final class RecordWireAgreementTests: XCTestCase {
    typealias Body = [String: Any]
    static let zoneName = "Agree"

    /// Every scalar and list type but assets (uploaded separately), strings that need escapes and
    /// spell the markers the fast paths look for, references with and without their zone.
    static func records() -> [Body] {
        let zoned: Body = ["zoneName": zoneName]
        return [
            ["recordName": "lists", "recordType": "Item", "fields": [
                "texts": ["value": ["a", "b\"", "ü\n", ""], "type": "STRING_LIST"],
                "ints": ["value": [1, -2, 9_007_199_254_740_993], "type": "INT64_LIST"],
                "doubles": ["value": [0.5, 2, -1e-7, 1.5e300], "type": "DOUBLE_LIST"],
                "times": ["value": [0, 1_700_000_000_123, -1000], "type": "TIMESTAMP_LIST"],
                "blobs": ["value": ["AAEC+g==", ""], "type": "BYTES_LIST"],
                "refs": ["value": [["recordName": "scalars", "zoneID": zoned, "action": "NONE"], ["recordName": "na\"me\\é", "action": "NONE"]],
                         "type": "REFERENCE_LIST"],
                "places": ["value": [["latitude": 1, "longitude": 2], ["latitude": -90, "longitude": 180, "altitude": 3.5, "timestamp": 5]],
                           "type": "LOCATION_LIST"],
                "none": ["value": [], "type": "STRING_LIST"],
            ]],
            ["recordName": "scalars", "recordType": "Item", "fields": [
                "text": ["value": "tab\t, quote \", backslash \\, newline \n, control \u{1}, emoji 🌍, e\u{301}, </script>", "type": "STRING"],
                "spellsReference": ["value": #"{"action": "NONE", "recordName": "x"}"#, "type": "STRING"],
                "spellsAsset": ["value": #""type": "ASSETID""#],
                "max": ["value": Int64.max, "type": "INT64"], "min": ["value": Int64.min, "type": "INT64"],
                "double": ["value": 3.25, "type": "DOUBLE"], "whole": ["value": 3.0, "type": "DOUBLE"],
                "small": ["value": 1e-7, "type": "DOUBLE"], "large": ["value": 1.5e300, "type": "DOUBLE"],
                "time": ["value": 1_700_000_000_123, "type": "TIMESTAMP"], "before": ["value": -1000, "type": "TIMESTAMP"],
                "bytes": ["value": "AAEC+g==", "type": "BYTES"],
                "zoned": ["value": ["recordName": "lists", "zoneID": zoned, "action": "NONE"], "type": "REFERENCE"],
                "validated": ["value": ["recordName": "lists", "action": "VALIDATE"], "type": "REFERENCE"],
                "owned": ["value": ["recordName": "lists", "action": "DELETE_SELF"], "type": "REFERENCE"],
                "place": ["value": [
                    "latitude": 1.5, "longitude": -2.25, "horizontalAccuracy": 3, "verticalAccuracy": 4.5, "altitude": 10, "speed": 1.25,
                    "course": 90, "timestamp": 1_700_000_000_000,
                ], "type": "LOCATION"],
            ]],
            ["recordName": "child", "recordType": "Note", "parent": ["recordName": "scalars"], "createShortGUID": true,
             "expirationDate": Int64(Date().timeIntervalSince1970 * 1000) + 86_400_000, "fields": ["f": ["value": "v"]]],
            ["recordName": "na\"me\\é", "recordType": "T_y", "fields": ["f": ["value": "w"]]],
            ["recordName": "root", "recordType": "Item", "fields": [:]],
            ["recordName": "doomed", "recordType": "Item", "fields": ["f": ["value": 1]]],
        ]
    }

    func testEveryRenderingSaysWhatTheOwnerSays() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("stratus-assets-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try await AssetTests.withStack(blobs: FileSystemBlobStore(directory: directory), blobSettings: [:]) { stack in
            let (fixture, client) = (stack.fixture, stack.client)
            try await RecordAPITests.createZone(client, fixture, Self.zoneName)
            let image = try await AssetTests.upload(client, fixture, record: "photo", field: "image", [1, 2, 3], zone: Self.zoneName)
            let album = [
                try await AssetTests.upload(client, fixture, record: "photo", field: "album", [4], zone: Self.zoneName),
                try await AssetTests.upload(client, fixture, record: "photo", field: "album", [5, 6], zone: Self.zoneName),
            ]
            let photo: Body = ["recordName": "photo", "recordType": "Photo", "fields": [
                "image": ["value": image, "type": "ASSETID"], "album": ["value": album, "type": "ASSETID_LIST"], "title": ["value": "p"],
            ]]
            let (saved, answer) = try await RecordAPITests.post(client, fixture.path("records/modify"), [
                "zoneID": ["zoneName": Self.zoneName], "operations": (Self.records() + [photo]).map { ["operationType": "create", "record": $0] },
            ])
            XCTAssertEqual(saved, 200, "\(answer)")
            let tags = Dictionary(((answer["records"] as? [Body]) ?? []).map { ($0["recordName"] as? String ?? "", $0["recordChangeTag"] as? String ?? "") }) { a, _ in a }
            // A share of `root`: `root` carries the `share` member, the share record its state.
            let (shared, shareAnswer) = try await RecordAPITests.post(client, fixture.path("records/modify"), [
                "zoneID": ["zoneName": Self.zoneName], "operations": [
                    ["operationType": "update", "record": ["recordName": "root", "recordType": "Item", "share": ["recordName": "share-1"],
                                                           "recordChangeTag": tags["root"] ?? ""]],
                    ["operationType": "create", "record": ["recordName": "share-1", "recordType": "cloudkit.share"]],
                ],
            ])
            XCTAssertEqual(shared, 200, "\(shareAnswer)")
            // A device names itself only through a device's own protocol, never a web service
            // request: set on two records so that both forms of a stamp are compared.
            _ = try await fixture.store.withConnection { connection in
                try await connection.query("""
                    UPDATE records SET created_device = 'device "one" \\', modified_device = 'device-2é'
                    WHERE zone_name = \(Self.zoneName) AND record_name IN ('scalars', 'child')
                    """, logger: TestSupport.logger)
            }
            let names = Self.records().map { $0["recordName"] as! String } + ["photo", "share-1"]
            let zone = ZoneID(zoneName: Self.zoneName, ownerRecordName: "_alice")
            let database = DatabaseID(container: fixture.container, environment: .development, scope: .private, owner: "_alice")
            let zoneID = String(decoding: zone.json.serialized(), as: UTF8.self)
            let links = AssetLinks(key: fixture.configuration.secretKey, base: "http://h", expiresAt: 0)
            let sync = SyncStore(store: fixture.store)
            let recordStore = RecordStore(store: fixture.store)
            let read = try await recordStore.lookup(names, zone: zone, in: database, logger: TestSupport.logger)
            func owner(_ name: String, desiredKeys: [String]? = nil) throws -> JSONValue {
                RecordWire.dictionary(try XCTUnwrap(read[ExactName(name)], name), zone: zone, desiredKeys: desiredKeys, numbersAsStrings: false, links: links)
            }
            let stored = try await recordStore.lookupStored(names.filter { $0 != "share-1" }, zone: zone, in: database, logger: TestSupport.logger) ?? [:]

            // Page by page, one record each: the SQL way where PostgreSQL writes the page, else the general page.
            var sqlWritten: [String: String] = [:]
            var general: Set<String> = []
            var version: Int64 = 0
            var pages = 0
            repeat {
                let page = try await sync.changes(zone: zone, in: database, incarnation: nil, since: version, limit: 1, wire: zoneID, logger: TestSupport.logger)
                let plain = try await sync.changes(zone: zone, in: database, incarnation: nil, since: version, limit: 1, logger: TestSupport.logger)
                XCTAssertNil(plain.wire, "without the wire form, the general page")
                guard case .saved(let record)? = plain.changes.first, plain.changes.count == 1 else { return XCTFail("one saved record a page: \(plain.changes)") }
                let name = record.recordName
                // The general page reads the record the owner writes.
                XCTAssertEqual(RecordWire.dictionary(record, zone: zone, desiredKeys: nil, numbersAsStrings: false, links: links), try owner(name), name)
                if let text = page.wireText {
                    XCTAssertTrue(page.changes.isEmpty, name)
                    let parsed = try JSONParser.parse(text)
                    XCTAssertEqual(parsed["recordName"]?.stringValue, name)
                    let written = try owner(name)
                    XCTAssertTrue(StoredRecordWireTests.same(parsed, written), "\(name), SQL:\n\(parsed)\nowner:\n\(written)")
                    sqlWritten[name] = text
                } else {
                    XCTAssertEqual(page.changes, plain.changes, name)
                    general.insert(name)
                }
                version = page.version
                pages += 1
                if !page.moreComing { break }
            } while pages <= names.count
            XCTAssertEqual(Set(sqlWritten.keys), Set(names).subtracting(["photo", "share-1"]), "PostgreSQL writes every record but an asset's and a share")
            XCTAssertEqual(general, ["photo", "share-1"])

            // The copy of the stored text: byte for byte what PostgreSQL wrote, as JSON what the owner writes.
            for name in names where name != "share-1" {
                let text = try XCTUnwrap(stored[ExactName(name)], name)
                var copied: [UInt8] = []
                try RecordWire.write(stored: text, zone: zone, zoneID: Array(zoneID.utf8), desiredKeys: nil, numbersAsStrings: false, links: links, into: &copied)
                XCTAssertTrue(StoredRecordWireTests.same(try JSONParser.parse(copied), try owner(name)), name)
                if let sql = sqlWritten[name] { XCTAssertEqual(String(decoding: copied, as: UTF8.self), sql, "\(name): the SQL page's bytes are the copy's") }
                for keys in [["text", "refs", "zoned", "f", "image", "missing"], []] {
                    var trimmed: [UInt8] = []
                    try RecordWire.write(
                        stored: text, zone: zone, zoneID: Array(zoneID.utf8), desiredKeys: Set(keys), numbersAsStrings: false, links: links, into: &trimmed)
                    XCTAssertTrue(StoredRecordWireTests.same(try JSONParser.parse(trimmed), try owner(name, desiredKeys: keys)), "\(name), desiredKeys \(keys)")
                }
            }

            // What was compared covers every field type and every optional member the owner writes.
            var types: Set<String> = []
            var members: Set<String> = []
            for name in names {
                guard case .object(let dictionary) = try owner(name) else { return XCTFail(name) }
                members.formUnion(dictionary.keys)
                if case .object(let fields)? = dictionary["fields"] {
                    for case .object(let field) in fields.values { if let type = field["type"]?.stringValue { types.insert(type) } }
                }
            }
            let everyType = FieldType.Base.allCases.flatMap { [$0.rawValue, $0.rawValue + "_LIST"] }
            XCTAssertEqual(types, Set(everyType))
            XCTAssertTrue(members.isSuperset(of: [
                "recordName", "recordType", "recordChangeTag", "fields", "created", "modified", "deleted", "zoneID", "parent", "share", "shortGUID",
                "expirationDate", "publicPermission", "participants",
            ]), "\(members)")
            var sqlMembers: Set<String> = []
            for text in sqlWritten.values { if case .object(let dictionary) = try JSONParser.parse(text) { sqlMembers.formUnion(dictionary.keys) } }
            XCTAssertEqual(sqlMembers, [
                "recordName", "recordType", "recordChangeTag", "fields", "created", "modified", "deleted", "zoneID", "parent", "share", "shortGUID",
                "expirationDate",
            ])
            let devices = try sqlWritten.values.map { try JSONParser.parse($0)["created"]?["deviceID"]?.stringValue ?? "" }
            XCTAssertTrue(devices.contains("device \"one\" \\") && devices.contains(RecordStamp.webServiceDeviceID), "\(devices)")

            // A deletion: the SQL page writes it as the API writes the general page's.
            let (deleted, deletion) = try await RecordAPITests.post(client, fixture.path("records/modify"), [
                "zoneID": ["zoneName": Self.zoneName], "operations": [["operationType": "forceDelete", "record": ["recordName": "doomed"]]],
            ])
            XCTAssertEqual(deleted, 200, "\(deletion)")
            let before = try XCTUnwrap(read.values.compactMap(\.version).max())
            let page = try await sync.changes(zone: zone, in: database, incarnation: nil, since: before, limit: 10, wire: zoneID, logger: TestSupport.logger)
            let plain = try await sync.changes(zone: zone, in: database, incarnation: nil, since: before, limit: 10, logger: TestSupport.logger)
            var expected: [UInt8] = []
            for change in plain.changes {
                guard case .deleted(let name, _) = change else { continue }
                JSONValue.object(["recordName": .string(name), "deleted": .bool(true)]).write(into: &expected)
            }
            XCTAssertEqual(plain.changes.map(\.recordName), ["doomed"])
            XCTAssertEqual(page.wireText, String(decoding: expected, as: UTF8.self))
        }
    }
}
