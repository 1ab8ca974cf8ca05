import Foundation
import StratusCore
import XCTest

final class ZoneDecisionTests: XCTestCase {
    let database = DatabaseID(container: "iCloud.a", environment: .development, scope: .private, owner: "_u")

    func testCreateNewZoneEmitsCreatedAtNextSequence() throws {
        let incarnation = UUID()
        let outcome = try ZoneDecision.decide(.create(ZoneID(zoneName: "A", ownerRecordName: "_u")), database: database, current: nil, lastSequence: 4, newIncarnation: incarnation)
        guard case .changed(let events, let after) = outcome else { return XCTFail("expected a change") }
        XCTAssertEqual(events, [.created(ZoneCreated(database: database, zoneID: ZoneID(zoneName: "A", ownerRecordName: "_u"), incarnation: incarnation))])
        XCTAssertEqual(after?.changeCounter, 5)
    }

    func testCreateExistingZoneIsUnchangedAndDeleteMissingIsZoneNotFound() throws {
        let zone = Zone(database: database, zoneID: ZoneID(zoneName: "A", ownerRecordName: "_u"), incarnation: UUID(), changeCounter: 3)
        XCTAssertEqual(try ZoneDecision.decide(.create(zone.zoneID), database: database, current: zone, lastSequence: 3, newIncarnation: UUID()), .unchanged(zone))
        XCTAssertThrowsError(try ZoneDecision.decide(.delete(zone.zoneID), database: database, current: nil, lastSequence: 3, newIncarnation: UUID())) { error in
            XCTAssertEqual((error as? StratusError)?.code, .zoneNotFound)
        }
    }

    func testADefaultTimeToLiveIsSetOnCreateChangedWithZoneUpdatedAndLeftAloneWhenNotSent() throws {
        let zoneID = ZoneID(zoneName: "A", ownerRecordName: "_u")
        let incarnation = UUID()
        guard case .changed(let created, let new) = try ZoneDecision.decide(
            .create(zoneID, defaultTimeToLive: .some(60)), database: database, current: nil, lastSequence: 0, newIncarnation: incarnation) else {
            return XCTFail("expected a change")
        }
        XCTAssertEqual(created, [.created(ZoneCreated(database: database, zoneID: zoneID, incarnation: incarnation, defaultTimeToLive: 60))])
        let zone = try XCTUnwrap(new)
        XCTAssertEqual(zone.defaultTimeToLive, 60)
        // Not sent, or the same value: no change.
        XCTAssertEqual(try ZoneDecision.decide(.create(zoneID), database: database, current: zone, lastSequence: 1, newIncarnation: UUID()), .unchanged(zone))
        XCTAssertEqual(try ZoneDecision.decide(.create(zoneID, defaultTimeToLive: .some(60)), database: database, current: zone, lastSequence: 1,
                                               newIncarnation: UUID()), .unchanged(zone))
        // A new value, or none: zone.updated at the next sequence, same incarnation.
        for wanted: Int64? in [120, nil] {
            guard case .changed(let events, let after) = try ZoneDecision.decide(
                .create(zoneID, defaultTimeToLive: .some(wanted)), database: database, current: zone, lastSequence: 1, newIncarnation: UUID()) else {
                return XCTFail("expected a change")
            }
            XCTAssertEqual(events, [.updated(ZoneUpdated(database: database, zoneID: zoneID, incarnation: incarnation, defaultTimeToLive: wanted))])
            XCTAssertEqual(after?.defaultTimeToLive, wanted)
            XCTAssertEqual(after?.incarnation, incarnation)
            XCTAssertEqual(after?.changeCounter, 2)
        }
    }

    func testARecordCreatedWithoutAnExpirationGetsTheDefaultAndAnUpdateKeepsItsOwn() throws {
        let stamp = RecordStamp(timestamp: 1_000, userRecordName: "_u", deviceID: nil)
        func decide(_ type: RecordOperationType, _ input: RecordInput, current: Record? = nil) throws -> Record? {
            guard case .save(let record, _) = try RecordDecision.decide(
                type, input, current: current, stamp: stamp, newChangeTag: "t", newShortGUID: { "g" }, defaultExpiration: 61_000) else { return nil }
            return record
        }
        let plain = RecordInput(recordName: "r", recordType: "T")
        XCTAssertEqual(try decide(.create, plain)?.expirationDate, 61_000)
        XCTAssertEqual(try decide(.forceReplace, plain)?.expirationDate, 61_000, "a forced save that creates")
        XCTAssertEqual(try decide(.create, RecordInput(recordName: "r", recordType: "T", expirationDate: .some(5_000)))?.expirationDate, 5_000)
        XCTAssertNil(try decide(.create, RecordInput(recordName: "r", recordType: "T", expirationDate: .some(nil)))?.expirationDate, "null opts out")
        let existing = Record(recordName: "r", recordType: "T", fields: [:], changeTag: "old", created: stamp, modified: stamp)
        XCTAssertNil(try decide(.forceUpdate, plain, current: existing)?.expirationDate, "an existing record keeps its own (none)")
    }

    func testZoneNameValidation() {
        XCTAssertNoThrow(try ZoneID.validate(zoneName: "Notes-2024.v1"))
        for bad in ["", "_private", "a/b", "with space", String(repeating: "x", count: 256), "é"] {
            XCTAssertThrowsError(try ZoneID.validate(zoneName: bad), bad)
        }
    }

    func testZoneKeyIsStableAcrossIncarnationsAndDistinctAcrossDatabases() {
        let other = DatabaseID(container: "iCloud.a", environment: .production, scope: .private, owner: "_u")
        XCTAssertEqual(ZoneKey(database: database, zoneName: "A").rawValue, "iCloud.a/development/private/_u/A")
        XCTAssertNotEqual(ZoneKey(database: database, zoneName: "A"), ZoneKey(database: other, zoneName: "A"))
        XCTAssertEqual(DatabaseID(container: "c", environment: .development, scope: .public, owner: "_someone").owner, DatabaseID.publicOwner)
    }
}

final class EventTests: XCTestCase {
    /// The message format: the payload travels as JSON (format 2), and a message of the first format,
    /// whose payload was base64 text, still reads the same.
    func testEnvelopeCarriesItsPayloadAsJSONAndReadsTheFirstFormat() throws {
        let database = DatabaseID(container: "iCloud.a", environment: .development, scope: .private, owner: "_u")
        let payload = ZoneCreated(database: database, zoneID: ZoneID(zoneName: "A", ownerRecordName: "_u"), incarnation: UUID())
        let new = NewEvent(zoneKey: ZoneKey(database: database, zoneName: "A"), zoneSequence: 3, payload: payload, causation: Causation(requestID: "r"))
        let envelope = EventEnvelope(id: 9, zoneKey: new.zoneKey, zoneSequence: 3, type: new.type, schemaVersion: new.schemaVersion,
                                     payload: new.payload, causation: new.causation, createdAt: 2)
        let message = EventCoding.encodeEnvelope(envelope)
        let object = try XCTUnwrap(JSONSerialization.jsonObject(with: message) as? [String: Any])
        XCTAssertEqual(object["format"] as? Int, 2)
        XCTAssertNotNil(object["payload"] as? [String: Any], "the payload is a JSON object, not base64 text")
        XCTAssertEqual(try EventCoding.decoder.decode(EventEnvelope.self, from: message).decode(ZoneCreated.self), payload)
        XCTAssertEqual(try EventCoding.decoder.decode(EventEnvelope.self, from: EventCoding.encode(envelope)).decode(ZoneCreated.self), payload,
                       "spliced and encoded messages read alike")
        // The first format, as an older relay wrote it.
        var first = object
        first.removeValue(forKey: "format")
        first["payload"] = new.payload.base64EncodedString()
        let old = try JSONSerialization.data(withJSONObject: first)
        let decoded = try EventCoding.decoder.decode(EventEnvelope.self, from: old)
        XCTAssertEqual(decoded.id, 9)
        XCTAssertEqual(try decoded.decode(ZoneCreated.self), payload)
        // What the write path checks is what the relay sends.
        XCTAssertGreaterThanOrEqual(EventCoding.envelopeSize(of: new), message.count + new.zoneKey.rawValue.utf8.count)
        XCTAssertLessThan(EventCoding.envelopeSize(of: new), message.count + new.zoneKey.rawValue.utf8.count + 64)
        // With the id and the time at their widest, exactly the relay's message and its key.
        let widest = EventEnvelope(id: Int64.max, zoneKey: new.zoneKey, zoneSequence: new.zoneSequence, type: new.type, schemaVersion: new.schemaVersion,
                                   payload: new.payload, causation: new.causation, createdAt: Int64.max)
        XCTAssertEqual(EventCoding.envelopeSize(of: new), EventCoding.encodeEnvelope(widest).count + new.zoneKey.rawValue.utf8.count)
    }

    /// Workers read a message by cutting its payload out as bytes: the same envelope as the JSON
    /// decoder gives, the payload byte for byte as the event log holds it, whatever its strings hold;
    /// the first format and malformed text go through the decoder.
    func testASavesBytesTellWhetherItMayConcernExpiryOrAssets() throws {
        let database = DatabaseID(container: "iCloud.a", environment: .development, scope: .private, owner: "_u")
        let stamp = RecordStamp(timestamp: 1, userRecordName: "_u", deviceID: nil)
        func event(_ record: Record, before: Record? = nil) -> EventEnvelope {
            let saved = RecordSaved(database: database, zoneID: ZoneID(zoneName: "A", ownerRecordName: "_u"), zoneIncarnation: nil, record: record, before: before)
            return EventEnvelope(id: 1, zoneKey: ZoneKey(database: database, zoneName: "A"), zoneSequence: 1, type: RecordSaved.eventType,
                                 schemaVersion: RecordSaved.schemaVersion, payload: EventCoding.encode(saved), causation: Causation(requestID: "r"), createdAt: 1)
        }
        let plain = Record(recordName: "r", recordType: "Note", fields: ["title": .string("hello")], changeTag: "t1", created: stamp, modified: stamp)
        XCTAssertFalse(RecordSaved.mayConcernExpiry(event(plain)), "a created record without an expiration")
        XCTAssertFalse(RecordSaved.mayConcernAssets(event(plain)), "a created record without assets")
        var expiring = plain
        expiring.expirationDate = 5_000
        XCTAssertTrue(RecordSaved.mayConcernExpiry(event(expiring)))
        var withAsset = plain
        withAsset.fields["photo"] = .asset(.object(["receipt": .string("x"), "size": .int(1)]))
        XCTAssertTrue(RecordSaved.mayConcernAssets(event(withAsset)))
        withAsset.fields["photo"] = .list(.asset, [.asset(.object(["receipt": .string("x")]))])
        XCTAssertTrue(RecordSaved.mayConcernAssets(event(withAsset)), "an ASSETID_LIST field")
        var updated = plain
        updated.changeTag = "t2"
        XCTAssertTrue(RecordSaved.mayConcernExpiry(event(updated, before: plain)), "a record saved again may lose its expiration")
        XCTAssertTrue(RecordSaved.mayConcernAssets(event(updated, before: plain)), "a record saved again may release its assets")
        // Bytes that merely look like a key prove nothing: the projection then decodes (never skips wrongly).
        let named = Record(recordName: "r", recordType: "Note", fields: ["expirationDate": .string("ASSETID")], changeTag: "t1", created: stamp, modified: stamp)
        XCTAssertTrue(RecordSaved.mayConcernExpiry(event(named)))
        XCTAssertTrue(RecordSaved.mayConcernAssets(event(named)))
    }

    func testDecodingAnEnvelopeCutsThePayloadOutAsItIs() throws {
        let database = DatabaseID(container: "iCloud.a", environment: .development, scope: .private, owner: "_u")
        let zoneKey = ZoneKey(database: database, zoneName: "A")
        let payloads = [
            #"{"a": 1, "b": [1, 2, {"c": "}"}], "d": "\"}{[", "e": null, "f": true, "g": -1.5e3, "payload": {}}"#,
            #"{}"#,
            #"{"s":"ünïcødé \u00e9 \\"}"#,
        ]
        for text in payloads {
            let envelope = EventEnvelope(id: 11, zoneKey: zoneKey, zoneSequence: nil, type: .zoneCreated, schemaVersion: 2,
                                         payload: Data(text.utf8), causation: Causation(requestID: "r\"}"), createdAt: 5)
            let message = [UInt8](EventCoding.encodeEnvelope(envelope))
            let fast = try EventCoding.decodeEnvelope(message)
            XCTAssertEqual(fast, envelope, text)
            var whole = try EventCoding.decoder.decode(EventEnvelope.self, from: Data(message))
            whole.payload = fast.payload
            XCTAssertEqual(whole, fast, "the same header as the JSON decoder reads")
        }
        // A message with spaces and newlines, and one of the first format (base64 payload), read alike.
        let envelope = EventEnvelope(id: 3, zoneKey: zoneKey, zoneSequence: 4, type: .zoneCreated, schemaVersion: 1,
                                     payload: Data(#"{"x":[1]}"#.utf8), causation: Causation(requestID: "q"), createdAt: 1)
        var object = try XCTUnwrap(JSONSerialization.jsonObject(with: EventCoding.encodeEnvelope(envelope)) as? [String: Any])
        let spaced = try JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted])
        XCTAssertEqual(try JSONSerialization.jsonObject(with: EventCoding.decodeEnvelope([UInt8](spaced)).payload) as? [String: [Int]], ["x": [1]])
        object.removeValue(forKey: "format")
        object["payload"] = envelope.payload.base64EncodedString()
        let first = try JSONSerialization.data(withJSONObject: object)
        XCTAssertEqual(try EventCoding.decodeEnvelope([UInt8](first)), envelope)
        // Malformed text is an error, never a crash or a half-read envelope.
        for bad in [#"{"id":3,"payload":{"x":"#, #"{"id":3,"payload":{"x":1}"#, #"["payload"]"#, "", #"{"payload""#, #"{"payload":{"a":"\"#] {
            XCTAssertThrowsError(try EventCoding.decodeEnvelope(Array(bad.utf8)), bad)
        }
    }

    func testEnvelopeRoundTripsAndDecodesItsPayload() throws {
        let database = DatabaseID(container: "iCloud.a", environment: .development, scope: .private, owner: "_u")
        let payload = ZoneCreated(database: database, zoneID: ZoneID(zoneName: "A", ownerRecordName: "_u"), incarnation: UUID())
        let new = NewEvent(zoneKey: ZoneKey(database: database, zoneName: "A"), zoneSequence: 1, payload: payload, causation: Causation(requestID: "r"))
        let envelope = EventEnvelope(id: 7, zoneKey: new.zoneKey, zoneSequence: 1, type: new.type, schemaVersion: new.schemaVersion, payload: new.payload, causation: new.causation, createdAt: 1)
        let decoded = try EventCoding.decoder.decode(EventEnvelope.self, from: EventCoding.encode(envelope))
        XCTAssertEqual(decoded, envelope)
        XCTAssertEqual(try decoded.decode(ZoneCreated.self), payload)
        XCTAssertThrowsError(try decoded.decode(ZoneDeleted.self))
        // A payload of the right type that does not decode is a decoding error (a poison event that
        // workers set aside at once), not a failure worth retrying.
        var broken = envelope
        broken.payload = Data(#"{"database": 5}"#.utf8)
        XCTAssertThrowsError(try broken.decode(ZoneCreated.self)) { error in
            XCTAssertTrue(error is EventDecodingError, "\(error)")
        }
    }
}

final class TokenTests: XCTestCase {
    func testWebAuthTokenVerifiesAndRejectsTamperingExpiryAndOtherContainers() throws {
        let key = SecretKey.generate()
        let token = WebAuthToken(userRecordName: "_u1", container: "iCloud.a", expiresAt: 2_000).signed(with: key)
        XCTAssertEqual(try WebAuthToken.verify(token, key: key, container: "iCloud.a", now: 1_000, directoryEpoch: nil).userRecordName, "_u1")
        XCTAssertThrowsError(try WebAuthToken.verify(token, key: key, container: "iCloud.b", now: 1_000, directoryEpoch: nil))
        XCTAssertThrowsError(try WebAuthToken.verify(token, key: key, container: "iCloud.a", now: 3_000, directoryEpoch: nil))
        XCTAssertThrowsError(try WebAuthToken.verify(token, key: SecretKey.generate(), container: "iCloud.a", now: 1_000, directoryEpoch: nil))
        var tampered = Array(token)
        tampered[3] = tampered[3] == "A" ? "B" : "A"
        XCTAssertThrowsError(try WebAuthToken.verify(String(tampered), key: key, container: "iCloud.a", now: 1_000, directoryEpoch: nil)) { error in
            XCTAssertEqual((error as? StratusError)?.code, .authenticationFailed)
        }
        XCTAssertThrowsError(try WebAuthToken.verify("garbage", key: key, container: "iCloud.a", now: 1_000, directoryEpoch: nil))
    }

    func testSecretKeyParsingAndRedaction() throws {
        let key = SecretKey.generate()
        XCTAssertEqual(try SecretKey(text: key.hex).hex, key.hex)
        XCTAssertThrowsError(try SecretKey(text: "short"))
        XCTAssertFalse(String(describing: key).contains(key.hex))
    }

    func testAPITokensAreRandomAndDigestsStable() {
        let a = APIToken.generate(), b = APIToken.generate()
        XCTAssertNotEqual(a, b)
        XCTAssertEqual(a.count, 64)
        XCTAssertEqual(APIToken.digest(a), APIToken.digest(a))
        XCTAssertNotEqual(APIToken.digest(a), APIToken.digest(b))
    }
}

final class QueryParsingTests: XCTestCase {
    func json(_ text: String) throws -> JSONValue { try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)) }

    func testParsesFiltersAndSorts() throws {
        let query = try RecordQuery.parse(json(#"{"recordType":"Item","filterBy":[{"comparator":"NEAR","fieldName":"p","fieldValue":{"value":{"latitude":1,"longitude":2}},"distance":500}],"sortBy":[{"fieldName":"___modTime","ascending":false}]}"#))
        XCTAssertEqual(query.filters.first?.comparator, .near)
        XCTAssertEqual(query.filters.first?.distance, 500)
        XCTAssertEqual(query.sorts.first?.ascending, false)
        XCTAssertEqual(RecordQuery.tokens("Hello, WORLD-wide 42!"), ["hello", "world", "wide", "42"])
    }

    /// System fields compare typed columns: a value or comparator the column cannot take is the
    /// client's BAD_REQUEST naming the field (it used to reach PostgreSQL as a type error, a 500).
    func testSystemFieldsAcceptOnlyTheirColumnsTypesAndComparators() throws {
        func filter(_ field: String, _ comparator: String, _ value: String, extra: String = "") throws -> RecordQuery {
            try RecordQuery.parse(json(#"{"recordType":"Item","filterBy":[{"comparator":"\#(comparator)","fieldName":"\#(field)","fieldValue":\#(value)\#(extra)}]}"#))
        }
        let accepted: [(String, String, String)] = [
            ("___createTime", "GREATER_THAN", #"{"value":1000,"type":"TIMESTAMP"}"#),
            ("___createTime", "EQUALS", #"{"value":1000}"#),
            ("___modTime", "LESS_THAN_OR_EQUALS", #"{"value":"1000","type":"INT64"}"#),
            ("___modTime", "IN", #"{"value":[1,2],"type":"TIMESTAMP_LIST"}"#),
            ("___modTime", "NOT_IN", #"{"value":[]}"#),
            ("___recordID", "EQUALS", #"{"value":"a"}"#),
            ("___recordID", "NOT_EQUALS", #"{"value":{"recordName":"a"},"type":"REFERENCE"}"#),
            ("___recordID", "IN", #"{"value":["a","b"]}"#),
            ("___recordID", "NOT_IN", #"{"value":[{"recordName":"a"}],"type":"REFERENCE_LIST"}"#),
            ("___recordID", "BEGINS_WITH", #"{"value":"a"}"#),
            ("___recordID", "NOT_BEGINS_WITH", #"{"value":"a"}"#),
        ]
        for (field, comparator, value) in accepted {
            XCTAssertNoThrow(try filter(field, comparator, value), "\(field) \(comparator) \(value)")
        }
        XCTAssertEqual(try filter("___createTime", "GREATER_THAN", #"{"value":1000,"type":"TIMESTAMP"}"#).filters.first?.value, .timestamp(1000))
        let refused: [(String, String, String, String)] = [
            ("___createTime", "EQUALS", #"{"value":"x"}"#, ""),
            ("___createTime", "EQUALS", #"{"value":1.5}"#, ""),
            ("___createTime", "EQUALS", #"{"value":{"recordName":"a"}}"#, ""),
            ("___modTime", "GREATER_THAN", #"{"value":"2024-01-01"}"#, ""),
            ("___modTime", "IN", #"{"value":["a","b"]}"#, ""),
            ("___modTime", "IN", #"{"value":5}"#, ""),
            ("___createTime", "EQUALS", #"{"value":[1,2]}"#, ""),
            ("___createTime", "BEGINS_WITH", #"{"value":"1"}"#, ""),
            ("___createTime", "LIST_CONTAINS", #"{"value":1}"#, ""),
            ("___createTime", "NEAR", #"{"value":{"latitude":1,"longitude":2}}"#, #","distance":5"#),
            ("___recordID", "EQUALS", #"{"value":5}"#, ""),
            ("___recordID", "LESS_THAN", #"{"value":1000,"type":"TIMESTAMP"}"#, ""),
            ("___recordID", "IN", #"{"value":[1,2]}"#, ""),
            ("___recordID", "NOT_IN", #"{"value":"a"}"#, ""),
            ("___recordID", "BEGINS_WITH", #"{"value":{"recordName":"a"}}"#, ""),
            ("___recordID", "CONTAINS_ALL_TOKENS", #"{"value":"a"}"#, ""),
            ("___recordID", "LIST_CONTAINS_ANY", #"{"value":["a"]}"#, ""),
            ("___recordID", "NEAR", #"{"value":{"latitude":1,"longitude":2}}"#, #","distance":5"#),
        ]
        for (field, comparator, value, extra) in refused {
            XCTAssertThrowsError(try filter(field, comparator, value, extra: extra), "\(field) \(comparator) \(value)") { error in
                XCTAssertEqual((error as? StratusError)?.code, .badRequest)
                XCTAssertTrue((error as? StratusError)?.reason.contains(field) == true, "\(error) names \(field)")
            }
        }
    }

    func testPolicyRefusesFieldsWithoutTheirIndex() throws {
        let policy = IndexPolicy(fields: ["Item": ["secret": [], "title": [.searchable]]])
        XCTAssertNoThrow(try policy.check(RecordQuery.parse(json(#"{"recordType":"Item","filterBy":[{"comparator":"CONTAINS_ANY_TOKENS","fieldName":"title","fieldValue":{"value":"a"}}]}"#))))
        for text in [
            #"{"recordType":"Item","filterBy":[{"comparator":"EQUALS","fieldName":"secret","fieldValue":{"value":"a"}}]}"#,
            #"{"recordType":"Item","filterBy":[{"comparator":"EQUALS","fieldName":"title","fieldValue":{"value":"a"}}]}"#,
            #"{"recordType":"Item","sortBy":[{"fieldName":"title"}]}"#,
        ] {
            XCTAssertThrowsError(try policy.check(RecordQuery.parse(json(text)))) { error in
                XCTAssertEqual((error as? StratusError)?.code, .badRequest)
            }
        }
        XCTAssertFalse(policy.isSearchable(recordType: "Item", field: "secret"))
        XCTAssertTrue(IndexPolicy.development.isSearchable(recordType: "Any", field: "thing"))
    }
}
