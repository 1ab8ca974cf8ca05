import Foundation
import StratusCore
import XCTest

/// `RecordSaved.indexed`, a rebuild's reader of saves, must give the query index what decoding the
/// payload through `Codable` and encoding its record again gives.
final class RecordSavedJSONTests: XCTestCase {
    static let database = RecordDeletedJSONTests.database

    /// Saves as the write path makes them: a creation, an update (with its previous image), a
    /// default zone's, a record with no fields, odd names and numbers at the edges of a double.
    static var payloads: [RecordSaved] {
        var fields = RecordDeletedJSONTests.fields
        fields["huge"] = .double(1_152_921_504_606_846_976)
        fields["tiny"] = .double(1e-7)
        fields["words é"] = .string("zwei Wörter")
        fields["names"] = .list(.string, [.string("x y"), .string("")])
        let record = RecordDeletedJSONTests.record(fields: fields)
        var changed = record
        changed.fields["title"] = .string("new title")
        changed.changeTag = "u"
        let zone = ZoneID(zoneName: "Zone", ownerRecordName: "_owner")
        return [
            RecordSaved(database: database, zoneID: zone, zoneIncarnation: UUID(), record: record, before: nil),
            RecordSaved(database: database, zoneID: zone, zoneIncarnation: UUID(), record: changed, before: record),
            RecordSaved(database: DatabaseID(container: "iCloud.test", environment: .production, scope: .public, owner: "_public"),
                        zoneID: ZoneID(zoneName: ZoneID.defaultZoneName, ownerRecordName: "_public"), zoneIncarnation: nil,
                        record: RecordDeletedJSONTests.record(fields: [:], createdVersion: nil), before: nil),
        ]
    }

    func testIndexedIsWhatCodableReads() throws {
        for payload in Self.payloads {
            let indexed = try RecordSaved.indexed(Self.envelope(EventCoding.encode(payload)))
            let reference = RecordSaved.Indexed(payload)
            XCTAssertEqual(indexed.database, reference.database)
            XCTAssertEqual(indexed.zoneName, reference.zoneName)
            XCTAssertEqual(indexed.record, payload.record)
            XCTAssertEqual(indexed.document, SearchDocument.text(of: payload.record, policy: .development))
            XCTAssertEqual(try JSONParser.parse(indexed.recordJSON), try JSONParser.parse(reference.recordJSON), "the same JSON value")
        }
    }

    /// A payload as PostgreSQL hands it back (`jsonb` text: spaces, its own key order, a double
    /// written as the decimal it holds) reads as the same save.
    func testAPayloadInPostgreSQLsSpellingReadsTheSame() throws {
        let text = #"{"record": {"fields": {"n": {"type": "DOUBLE", "value": 1152921504606846976}, "t": {"type": "STRING", "value": "a, b: c"}}, "created": {"timestamp": 1000, "userRecordName": "_u"}, "modified": {"deviceID": "d", "timestamp": 2000, "userRecordName": "_u"}, "changeTag": "t", "recordName": "r", "recordType": "Item"}, "zoneID": {"zoneName": "Z", "ownerRecordName": "_u"}, "database": {"owner": "_u", "scope": "private", "container": "iCloud.test", "environment": "development"}, "changedFields": ["n", "t"]}"#
        let event = Self.envelope(Data(text.utf8))
        let indexed = try RecordSaved.indexed(event)
        let reference = RecordSaved.Indexed(try event.decode(RecordSaved.self))
        XCTAssertEqual(indexed.record, reference.record)
        XCTAssertEqual(indexed.database, reference.database)
        XCTAssertEqual(indexed.zoneName, "Z")
        XCTAssertEqual(indexed.document, "a, b: c")
        XCTAssertEqual(try JSONParser.parse(indexed.recordJSON), try JSONParser.parse(text)["record"])
    }

    /// A share's record (its state read through `Codable`) and payloads `Codable` refuses take the
    /// whole decoder, which says what is wrong.
    func testUnusualPayloadsGoThroughCodable() throws {
        var share = RecordDeletedJSONTests.record(fields: ["title": .string("shared")])
        share.shareState = ShareState(owner: "_owner")
        let payload = RecordSaved(database: Self.database, zoneID: ZoneID(zoneName: "Zone", ownerRecordName: "_owner"), zoneIncarnation: nil,
                                  record: share, before: nil)
        let indexed = try RecordSaved.indexed(Self.envelope(EventCoding.encode(payload)))
        XCTAssertEqual(indexed.record, share)
        XCTAssertEqual(indexed.recordJSON, RecordSaved.Indexed(payload).recordJSON)
        for text in [#"{"record": 7}"#, "not json", #"{"database":{"container":"c","environment":"staging","owner":"o","scope":"private"},"zoneID":{"ownerRecordName":"o","zoneName":"Z"},"changedFields":[],"record":{"fields":{},"changeTag":"t","created":{"timestamp":1,"userRecordName":"u"},"modified":{"timestamp":1,"userRecordName":"u"},"recordName":"r","recordType":"T"}}"#] {
            XCTAssertThrowsError(try RecordSaved.indexed(Self.envelope(Data(text.utf8))), text) { error in
                XCTAssertTrue(error is EventDecodingError, "\(error)")
            }
        }
    }

    /// `withoutPrevious` (stratus-gc's reader of saves) gives what `Codable` gives, less the image.
    func testWithoutPreviousIsWhatCodableReadsLessTheImage() throws {
        var payloads = Self.payloads
        // A field named as the payload's members are: only the top-level image is cut.
        var named = payloads[1]
        named.record.fields["previous"] = .string("a field")
        named.record.fields["previousChangeTag"] = .int64(3)
        payloads.append(named)
        XCTAssertNotNil(payloads[1].previous, "an update carries an image")
        for payload in payloads {
            var expected = payload
            expected.previous = nil
            for bytes in [EventCoding.encode(payload), Data(try XCTUnwrap(JSONParser.parse([UInt8](EventCoding.encode(payload)))).serialized())] {
                XCTAssertEqual(try RecordSaved.withoutPrevious(Self.envelope(bytes)), expected)
            }
        }
        // In PostgreSQL's spelling, with an image.
        let text = #"{"record": {"fields": {"t": {"type": "STRING", "value": "a/b"}}, "created": {"timestamp": 1000, "userRecordName": "_u"}, "modified": {"deviceID": "d", "timestamp": 2000, "userRecordName": "_u"}, "changeTag": "t2", "recordName": "r", "recordType": "Item", "expirationDate": 99}, "previous": {"fields": {"t": {"type": "STRING", "value": "old"}}, "omitted": [], "modifiedAt": 1500}, "previousChangeTag": "t1", "zoneID": {"zoneName": "Z", "ownerRecordName": "_u"}, "zoneIncarnation": "6B1C1F5E-0000-4000-8000-00000000ABCD", "database": {"owner": "_u", "scope": "private", "container": "iCloud.test", "environment": "development"}, "changedFields": ["t"]}"#
        var whole = try EventCoding.decoder.decode(RecordSaved.self, from: Data(text.utf8))
        XCTAssertNotNil(whole.previous)
        whole.previous = nil
        let read = try RecordSaved.withoutPrevious(Self.envelope(Data(text.utf8)))
        XCTAssertEqual(read, whole)
        XCTAssertEqual(read.record.expirationDate, 99)
        XCTAssertEqual(read.previousChangeTag, "t1")
        // A share's record goes through Codable; what Codable refuses is refused.
        var share = RecordDeletedJSONTests.record(fields: [:])
        share.shareState = ShareState(owner: "_owner")
        let shared = RecordSaved(database: Self.database, zoneID: ZoneID(zoneName: "Zone", ownerRecordName: "_owner"), zoneIncarnation: nil,
                                 record: share, before: nil)
        XCTAssertEqual(try RecordSaved.withoutPrevious(Self.envelope(EventCoding.encode(shared))), shared)
        for bad in [#"{"record": 7}"#, "not json", #"{"database":{"container":"c","environment":"staging","owner":"o","scope":"private"},"zoneID":{"ownerRecordName":"o","zoneName":"Z"},"changedFields":[],"record":{"fields":{},"changeTag":"t","created":{"timestamp":1,"userRecordName":"u"},"modified":{"timestamp":1,"userRecordName":"u"},"recordName":"r","recordType":"T"}}"#, #"{"database":{"container":"c","environment":"development","owner":"o","scope":"private"},"zoneID":{"ownerRecordName":"o","zoneName":"Z"},"changedFields":[1],"record":{"fields":{},"changeTag":"t","created":{"timestamp":1,"userRecordName":"u"},"modified":{"timestamp":1,"userRecordName":"u"},"recordName":"r","recordType":"T"}}"#] {
            XCTAssertThrowsError(try RecordSaved.withoutPrevious(Self.envelope(Data(bad.utf8))), bad) { error in
                XCTAssertTrue(error is EventDecodingError, "\(error)")
            }
        }
    }

    static func envelope(_ payload: Data) -> EventEnvelope {
        EventEnvelope(id: 1, zoneKey: RecordDeletedJSONTests.zoneKey, zoneSequence: 3, type: RecordSaved.eventType, schemaVersion: 2, payload: payload,
                      causation: Causation(requestID: "r"), createdAt: 1)
    }
}
