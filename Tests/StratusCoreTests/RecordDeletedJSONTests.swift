import Foundation
import StratusCore
import XCTest

/// `record.deleted` payloads written by `RecordDeleted.json` and read by `RecordDeleted.withoutImage`
/// must be what `Codable` writes and reads.
final class RecordDeletedJSONTests: XCTestCase {
    static let fields: [String: FieldValue] = [
        "title": .string("quote \" backslash \\ slash / new\nline é 漢字 👩‍💻"),
        "count": .int64(Int64.min),
        "ratio": .double(0.1),
        "whole": .double(1.0),
        "when": .timestamp(1_700_000_000_123),
        "blob": .bytes(Data([0, 1, 2, 250, 255])),
        "parent": .reference(Reference(recordName: "p/1", action: .deleteSelf)),
        "file": .asset(.object(["fileChecksum": .string("abc"), "size": .int(12), "downloadURL": .string("https://x/y?z=1")])),
        "place": .location(Location(latitude: 47.3769, longitude: 8.5417, horizontalAccuracy: 5, timestamp: 17)),
        "tags": .list(.string, [.string("a"), .string("b/c")]),
        "numbers": .list(.int64, [.int64(1), .int64(-2)]),
    ]

    static func record(fields: [String: FieldValue] = fields, createdVersion: Int64? = 7) -> Record {
        Record(
            recordName: "item/1 \"odd\"", recordType: "Item", fields: fields, changeTag: "t",
            created: RecordStamp(timestamp: 1_000, userRecordName: "_user", deviceID: nil),
            modified: RecordStamp(timestamp: 2_000, userRecordName: "_user", deviceID: "d"),
            createdVersion: createdVersion)
    }

    static let database = DatabaseID(container: "iCloud.test", environment: .development, scope: .private, owner: "_owner")
    static let zoneKey = ZoneKey(database: database, zoneName: "Zone")

    /// Payloads as the write path makes them: a custom zone's, a default zone's (no incarnation, no
    /// creation version), a cascade's, and one whose image is cut to its budget.
    static var payloads: [RecordDeleted] {
        [
            RecordDeleted(database: database, zoneID: ZoneID(zoneName: "Zone", ownerRecordName: "_owner"), zoneIncarnation: UUID(),
                          record: record(), cascadedFrom: nil),
            RecordDeleted(database: DatabaseID(container: "iCloud.test", environment: .production, scope: .public, owner: "_public"),
                          zoneID: ZoneID(zoneName: ZoneID.defaultZoneName, ownerRecordName: "_public"), zoneIncarnation: nil,
                          record: record(createdVersion: nil), cascadedFrom: nil),
            RecordDeleted(database: database, zoneID: ZoneID(zoneName: "Zone", ownerRecordName: "_owner"), zoneIncarnation: UUID(),
                          record: record(fields: [:]), cascadedFrom: "root"),
            RecordDeleted(database: database, zoneID: ZoneID(zoneName: "Zone", ownerRecordName: "_owner"), zoneIncarnation: UUID(),
                          record: record(), cascadedFrom: nil, lastBudget: 40),
        ]
    }

    func testTheWrittenPayloadReadsBackThroughCodableAsTheSamePayload() throws {
        for payload in Self.payloads {
            let event = NewEvent(zoneKey: Self.zoneKey, zoneSequence: 3, deleted: payload, causation: Causation(requestID: "r"))
            let encoded = NewEvent(zoneKey: Self.zoneKey, zoneSequence: 3, payload: payload, causation: Causation(requestID: "r"))
            XCTAssertEqual(event, encoded)
            XCTAssertEqual(try EventCoding.decoder.decode(RecordDeleted.self, from: event.payload), payload)
            // The bytes `JSONEncoder` writes.
            XCTAssertEqual(event.payload, try EventCoding.encoder.encode(payload))
        }
        // The budget cut the image: some fields are omitted, and say so.
        XCTAssertFalse(try XCTUnwrap(Self.payloads.last?.last).omitted.isEmpty)
    }

    func testWithoutImageReadsEverythingButTheImage() throws {
        for payload in Self.payloads {
            var expected = payload
            expected.last = nil
            for bytes in [EventCoding.encode(payload), Data(try JSONParser.parse([UInt8](EventCoding.encode(payload))).serialized())] {
                XCTAssertEqual(try RecordDeleted.withoutImage(Self.envelope(bytes)), expected)
            }
        }
        // A payload as PostgreSQL hands it back (`jsonb` text: spaces, its own key order).
        let payload = try XCTUnwrap(Self.payloads.first)
        let spaced = #"{"last": {"fields": {"a": {"type": "STRING", "value": "x"}}, "omitted": [], "modifiedAt": 5}, "database": {"owner": "_owner", "scope": "private", "container": "iCloud.test", "environment": "development"}, "zoneID": {"zoneName": "Zone", "ownerRecordName": "_owner"}, "createdAt": 1000, "recordName": "r", "recordType": "Item", "createdVersion": 7, "zoneIncarnation": ""#
            + (payload.zoneIncarnation?.uuidString.lowercased() ?? "") + #""}"#
        let read = try RecordDeleted.withoutImage(Self.envelope(Data(spaced.utf8)))
        XCTAssertEqual(read.recordName, "r")
        XCTAssertEqual(read.zoneIncarnation, payload.zoneIncarnation)
        XCTAssertEqual(read.createdVersion, 7)
        XCTAssertNil(read.last)
        var whole = try EventCoding.decoder.decode(RecordDeleted.self, from: Data(spaced.utf8))
        whole.last = nil
        XCTAssertEqual(read, whole)
        // A first-version payload (no image, no creation time).
        let first = #"{"database":{"container":"c","environment":"production","owner":"_public","scope":"public"},"recordName":"r","recordType":"T","zoneID":{"ownerRecordName":"_public","zoneName":"_defaultZone"}}"#
        XCTAssertEqual(try RecordDeleted.withoutImage(Self.envelope(Data(first.utf8))),
                       try EventCoding.decoder.decode(RecordDeleted.self, from: Data(first.utf8)))
    }

    func testWithoutImageRefusesWhatCodableRefuses() {
        for text in [#"{"recordName":"r"}"#, #"{"database":7}"#, "not json", #"{"database":{"container":"c","environment":"staging","owner":"o","scope":"private"},"recordName":"r","recordType":"T","zoneID":{"ownerRecordName":"o","zoneName":"Z"}}"#] {
            XCTAssertThrowsError(try RecordDeleted.withoutImage(Self.envelope(Data(text.utf8))), text) { error in
                XCTAssertTrue(error is EventDecodingError, "\(error)")
            }
        }
    }

    /// The relay's message, written directly, reads back as the envelope through `Codable` and through
    /// the workers' reader, whatever its header holds.
    func testTheRelaysMessageReadsBackAsTheEnvelope() throws {
        let payload = EventCoding.encode(try XCTUnwrap(Self.payloads.first))
        let causations = [
            Causation(requestID: "stratus-gc/expire/\u{1}\"}{", userRecordName: "_user/é", deviceID: "device 漢字"),
            Causation(requestID: ""),
        ]
        for causation in causations {
            for sequence in [nil, Int64(0), Int64.max] {
                let envelope = EventEnvelope(id: Int64.max, zoneKey: ZoneKey(rawValue: "a/b\"c/d"), zoneSequence: sequence, type: RecordDeleted.eventType,
                                             schemaVersion: 2, payload: payload, causation: causation, createdAt: -5)
                let message = EventCoding.encodeEnvelope(envelope)
                var whole = try EventCoding.decoder.decode(EventEnvelope.self, from: message)
                XCTAssertEqual(try whole.decode(RecordDeleted.self), try envelope.decode(RecordDeleted.self))
                whole.payload = payload
                XCTAssertEqual(whole, envelope)
                XCTAssertEqual(try EventCoding.decodeEnvelope([UInt8](message)), envelope)
                let object = try XCTUnwrap(JSONSerialization.jsonObject(with: message) as? [String: Any])
                XCTAssertEqual(object["format"] as? Int, EventCoding.envelopeFormat)
            }
        }
    }

    static func envelope(_ payload: Data) -> EventEnvelope {
        EventEnvelope(id: 1, zoneKey: zoneKey, zoneSequence: 3, type: RecordDeleted.eventType, schemaVersion: 2, payload: payload,
                      causation: Causation(requestID: "r"), createdAt: 1)
    }
}
