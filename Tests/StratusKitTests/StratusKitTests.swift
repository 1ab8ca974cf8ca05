import Crypto
import Foundation
@testable import StratusKit
import XCTest

/// StratusKit's pure parts, without a server: backoff, batching, the state's pending changes and
/// its serialization, the wire forms, sealing.
final class RetryPolicyTests: XCTestCase {
    func testBackoffDoublesUpToItsMaximumAndJitterOnlyStretches() {
        let policy = RetryPolicy(maxAttempts: 10, baseDelay: 0.5, maxDelay: 4, jitter: 0.5)
        XCTAssertEqual(policy.delay(afterAttempt: 1, retryAfter: nil, random: 0), 0.5)
        XCTAssertEqual(policy.delay(afterAttempt: 2, retryAfter: nil, random: 0), 1)
        XCTAssertEqual(policy.delay(afterAttempt: 3, retryAfter: nil, random: 0), 2)
        XCTAssertEqual(policy.delay(afterAttempt: 9, retryAfter: nil, random: 0), 4)
        XCTAssertEqual(policy.delay(afterAttempt: 1_000, retryAfter: nil, random: 0), 4, "no overflow for any attempt")
        XCTAssertEqual(policy.delay(afterAttempt: 2, retryAfter: nil, random: 0.999), 1 * 1.4995, accuracy: 0.0001)
        for random in stride(from: 0.0, to: 1.0, by: 0.1) {
            let wait = policy.delay(afterAttempt: 3, retryAfter: nil, random: random)
            XCTAssertTrue((2...3).contains(wait), "\(wait)")
        }
    }

    func testTheServersRetryAfterIsAFloorEvenPastTheMaximum() {
        let policy = RetryPolicy(maxAttempts: 10, baseDelay: 0.5, maxDelay: 4, jitter: 0.25)
        XCTAssertEqual(policy.delay(afterAttempt: 1, retryAfter: 3, random: 0), 3)
        XCTAssertEqual(policy.delay(afterAttempt: 1, retryAfter: 30, random: 0), 30, "a longer retryAfter than maxDelay is honoured")
        XCTAssertGreaterThanOrEqual(policy.delay(afterAttempt: 1, retryAfter: 30, random: 0.9), 30)
        XCTAssertEqual(policy.delay(afterAttempt: 4, retryAfter: 1, random: 0), 4, "backoff beyond a short retryAfter")
        XCTAssertEqual(policy.delay(afterAttempt: 1, retryAfter: -5, random: 0), 0.5, "a negative retryAfter counts as none")
    }

    func testOnlyPassingConditionsAreRetriedAndOnlyUpToTheAttempts() {
        let policy = RetryPolicy(maxAttempts: 3)
        let later = StratusKitError(code: .tryAgainLater, reason: "busy", retryAfter: 1, httpStatus: 503)
        XCTAssertTrue(policy.shouldRetry(later, afterAttempt: 1))
        XCTAssertTrue(policy.shouldRetry(later, afterAttempt: 2))
        XCTAssertFalse(policy.shouldRetry(later, afterAttempt: 3))
        for code in [StratusKitError.Code.throttled, .zoneBusy, .networkFailure, .requestRateLimited] {
            XCTAssertTrue(policy.shouldRetry(StratusKitError(code: code, reason: ""), afterAttempt: 1), code.rawValue)
        }
        for code in [StratusKitError.Code.conflict, .badRequest, .changeTokenExpired, .atomicError, .quotaExceeded, .authenticationFailed] {
            XCTAssertFalse(policy.shouldRetry(StratusKitError(code: code, reason: ""), afterAttempt: 1), code.rawValue)
        }
        XCTAssertFalse(RetryPolicy.none.shouldRetry(later, afterAttempt: 1))
    }
}

final class BatchingTests: XCTestCase {
    static func record(_ name: String, zone: String = "Notes", bytes: Int = 10) -> Record {
        Record(recordType: "Note", recordID: RecordID(recordName: name, zoneID: ZoneID(zoneName: zone)),
               fields: ["body": .string(String(repeating: "x", count: bytes))])
    }

    func testRequestsAreOneZoneEachWithinTheOperationLimit() {
        let saves = (0..<450).map { Self.record("r\($0)", zone: $0 % 3 == 0 ? "A" : "B") }
        let deletes = (0..<10).map { RecordID(recordName: "d\($0)", zoneID: ZoneID(zoneName: "C")) }
        let requests = BatchPlanner.requests(saves: saves, deletes: deletes, limits: BatchLimits())
        XCTAssertEqual(requests.map(\.zoneID.zoneName), ["A", "B", "B", "C"])
        XCTAssertEqual(requests.map { $0.saves.count + $0.deletes.count }, [150, 200, 100, 10])
        XCTAssertTrue(requests.allSatisfy { request in request.saves.allSatisfy { $0.recordID.zoneID == request.zoneID } })
        // Every operation exactly once, in order within its zone.
        XCTAssertEqual(requests.flatMap(\.saves).map(\.recordID).sorted { $0.recordName < $1.recordName }, saves.map(\.recordID).sorted { $0.recordName < $1.recordName })
        XCTAssertEqual(requests.flatMap(\.deletes), deletes)
    }

    func testRequestsStayWithinTheByteBudgetAndALargeRecordGoesAlone() {
        let limits = BatchLimits(maxOperations: 200, maxBytes: 10_000)
        let saves = (0..<10).map { Self.record("r\($0)", bytes: 3_000) } + [Self.record("big", bytes: 50_000)] + [Self.record("last", bytes: 10)]
        let requests = BatchPlanner.requests(saves: saves, deletes: [], limits: limits)
        for request in requests where request.saves.count > 1 {
            XCTAssertLessThanOrEqual(request.saves.map(BatchPlanner.size(of:)).reduce(0, +), limits.maxBytes)
        }
        XCTAssertTrue(requests.contains { $0.saves.map(\.recordID.recordName) == ["big"] }, "\(requests.map { $0.saves.map(\.recordID.recordName) })")
        XCTAssertEqual(requests.flatMap(\.saves).count, saves.count)
    }

    func testLimitsAreClampedToTheServers() {
        XCTAssertEqual(BatchLimits(maxOperations: 5_000).maxOperations, 200)
        XCTAssertEqual(BatchLimits(maxOperations: 0, maxBytes: -1).maxOperations, 1)
        XCTAssertEqual(BatchLimits(maxOperations: 0, maxBytes: -1).maxBytes, 1)
    }

    func testABatchTakesPendingChangesInOrderUntilFullAndNamesRecordsGoneLocally() async {
        let pending: [PendingRecordZoneChange] = (0..<300).map { index in
            let id = RecordID(recordName: "r\(index)", zoneID: ZoneID(zoneName: "Notes"))
            return index % 10 == 9 ? .deleteRecord(id) : .saveRecord(id)
        }
        let batch = await StratusSyncEngine.RecordZoneChangeBatch(pendingChanges: pending) { id in
            id.recordName == "r3" ? nil : Self.record(id.recordName)
        }
        XCTAssertEqual(batch.recordsToSave.count + batch.recordIDsToDelete.count, 200)
        XCTAssertEqual(batch.missingRecords.map(\.recordName), ["r3"])
        XCTAssertEqual(batch.recordsToSave.first?.recordID.recordName, "r0")
        XCTAssertEqual(batch.recordIDsToDelete.first?.recordName, "r9")
        let small = await StratusSyncEngine.RecordZoneChangeBatch(pendingChanges: pending, limits: BatchLimits(maxOperations: 200, maxBytes: 2_000)) { id in
            Self.record(id.recordName, bytes: 400)
        }
        XCTAssertGreaterThan(small.recordsToSave.count, 0)
        XCTAssertLessThan(small.recordsToSave.count, 10)
    }
}

final class SyncStateTests: XCTestCase {
    let zone = ZoneID(zoneName: "Notes")

    func testPendingChangesAreKeptOnceTheLatestWinsAndAResendKeepsAChangeAddedMeanwhile() {
        var snapshot = SyncSnapshot()
        let a = RecordID(recordName: "a", zoneID: zone), b = RecordID(recordName: "b", zoneID: zone)
        snapshot.add(records: [.saveRecord(a), .saveRecord(b), .saveRecord(a)])
        XCTAssertEqual(snapshot.pendingRecordZoneChanges.map(\.change), [.saveRecord(b), .saveRecord(a)])
        snapshot.add(records: [.deleteRecord(b)])
        XCTAssertEqual(snapshot.pendingRecordZoneChanges.map(\.change), [.saveRecord(a), .deleteRecord(b)], "a delete replaces the save")
        // `a` is sent as it was (number n); the app changes it again before the answer.
        let sentNumber = snapshot.pendingRecordZoneChanges[0].number
        snapshot.add(records: [.saveRecord(a)])
        snapshot.settle(.saveRecord(a), sentAs: sentNumber)
        XCTAssertEqual(snapshot.pendingRecordZoneChanges.map(\.change), [.deleteRecord(b), .saveRecord(a)], "the newer change stays to be sent")
        snapshot.settle(.saveRecord(a), sentAs: snapshot.pendingRecordZoneChanges[1].number)
        XCTAssertEqual(snapshot.pendingRecordZoneChanges.map(\.change), [.deleteRecord(b)])
    }

    func testTheSerializationRoundTripsEverythingAResumedEngineNeeds() throws {
        var snapshot = SyncSnapshot()
        snapshot.userRecordName = "_u"
        snapshot.databaseToken = "db=="
        snapshot.zoneTokens[zone] = "zone=="
        snapshot.zoneTokens[ZoneID(zoneName: "Trip", ownerRecordName: "_owner")] = "trip=="
        snapshot.zonesToRefetch = [zone]
        snapshot.add(records: [.saveRecord(RecordID(recordName: "a", zoneID: zone)), .deleteRecord(RecordID(recordName: "b", zoneID: zone))])
        snapshot.add(database: [.saveZone(Zone(zoneID: zone)), .deleteZone(ZoneID(zoneName: "Old"))])
        snapshot.courier = .init(token: "t", webcourierURL: "http://h/device/1/c/development/courier/t", webSocketURL: nil)
        snapshot.subscriptionSaved = true
        let state = StratusSyncEngine.State(snapshot)
        let data = try JSONEncoder().encode(state.serialization)
        let decoded = try JSONDecoder().decode(StratusSyncEngine.State.Serialization.self, from: data)
        XCTAssertEqual(decoded.snapshot, snapshot)
        let resumed = StratusSyncEngine.State(decoded.snapshot)
        XCTAssertEqual(resumed.pendingRecordZoneChanges, state.pendingRecordZoneChanges)
        XCTAssertEqual(resumed.pendingDatabaseChanges, state.pendingDatabaseChanges)
        XCTAssertTrue(resumed.hasPendingUntrackedChanges)
    }

    func testResetForgetsTokensAndPendingChangesButKeepsTheDevice() {
        var snapshot = SyncSnapshot()
        snapshot.userRecordName = "_a"
        snapshot.zoneTokens[zone] = "t"
        snapshot.add(records: [.saveRecord(RecordID(recordName: "a", zoneID: zone))])
        let device = snapshot.deviceID
        snapshot.reset(user: "_b")
        XCTAssertEqual(snapshot.userRecordName, "_b")
        XCTAssertTrue(snapshot.zoneTokens.isEmpty)
        XCTAssertTrue(snapshot.pendingRecordZoneChanges.isEmpty)
        XCTAssertEqual(snapshot.deviceID, device)
    }
}

final class WireTests: XCTestCase {
    func testRecordsRoundTripEveryFieldTypeAndInt64Exactly() throws {
        let zone = ZoneID(zoneName: "Notes", ownerRecordName: "_o")
        var record = Record(recordType: "Note", recordID: RecordID(recordName: "n", zoneID: zone))
        record["big"] = .int64(Int64.max)
        record["small"] = .int64(Int64.min)
        record["d"] = .double(1.5)
        record["s"] = .string("é\u{1F600}")
        record["t"] = .timestamp(1_700_000_000_123)
        record["b"] = .bytes(Data([0, 1, 255]))
        record["r"] = .reference(Reference(recordName: "other", action: .deleteSelf))
        var location = Location(latitude: 1, longitude: 2)
        location.timestamp = 5
        record["l"] = .location(location)
        record["list"] = .list(elementType: "STRING", [.string("a"), .string("b")])
        record["empty"] = .list(elementType: "INT64", [])
        record.recordChangeTag = "tag"
        var wire = RecordCoding.encode(record)
        guard case .object(var members) = wire else { return XCTFail() }
        members["zoneID"] = zone.wire
        wire = .object(members)
        let text = wire.encoded()
        let decoded = try RecordCoding.decode(try JSON.decode(text), zoneID: zone)
        XCTAssertEqual(decoded.fields, record.fields)
        XCTAssertEqual(decoded.recordID, record.recordID)
        XCTAssertEqual(decoded.recordChangeTag, "tag")
        XCTAssertTrue(String(decoding: text, as: UTF8.self).contains("9223372036854775807"))
    }

    func testServerErrorsAreTypedWithRetryAfterAndTheServerRecord() throws {
        let body = Data(#"{"uuid":"u","serverErrorCode":"TRY_AGAIN_LATER","reason":"busy","retryAfter":2}"#.utf8)
        XCTAssertThrowsError(try Transport.read(body, status: 503, retryAfterHeader: nil)) { error in
            let error = error as? StratusKitError
            XCTAssertEqual(error?.code, .tryAgainLater)
            XCTAssertEqual(error?.retryAfter, 2)
            XCTAssertEqual(error?.isRetryable, true)
            XCTAssertEqual(error?.uuid, "u")
        }
        XCTAssertThrowsError(try Transport.read(Data("<html>".utf8), status: 502, retryAfterHeader: "7")) { error in
            XCTAssertEqual((error as? StratusKitError)?.code, .internalError)
            XCTAssertEqual((error as? StratusKitError)?.retryAfter, 7)
        }
        let conflict: JSON = ["recordName": "n", "serverErrorCode": "CONFLICT", "reason": "stale", "zoneID": ["zoneName": "Notes"],
                              "serverRecord": ["recordName": "n", "recordType": "Note", "recordChangeTag": "t2", "fields": ["title": ["value": "server", "type": "STRING"]]]]
        let error = try XCTUnwrap(StratusKitError(wire: conflict, httpStatus: 200))
        XCTAssertEqual(error.code, .conflict)
        XCTAssertEqual(error.serverRecord?.recordChangeTag, "t2")
        XCTAssertEqual(error.serverRecord?["title"], .string("server"))
        XCTAssertEqual(error.serverRecord?.recordID.zoneID, ZoneID(zoneName: "Notes"))
    }

    func testUnknownTypesAndMismatchedValuesAreLeftOutNotTrapped() throws {
        let wire: JSON = ["recordName": "n", "recordType": "Note", "fields": [
            "odd": ["value": "x", "type": "FUTURE_TYPE"], "bad": ["value": "x", "type": "INT64"], "good": ["value": 1, "type": "INT64"],
            "nested": ["value": [["a"]], "type": "STRING_LIST"]]]
        let record = try RecordCoding.decode(wire, zoneID: .default)
        XCTAssertEqual(Array(record.fields.keys), ["good"])
        XCTAssertThrowsError(try RecordCoding.decode(["recordType": "Note"], zoneID: .default))
    }
}

final class SealingTests: XCTestCase {
    let keys = StaticKeyProvider(current: "k1", keys: ["k1": SymmetricKey(size: .bits256)])

    func testSealedValuesOpenWithTheKeyAndNotWithout() throws {
        var record = Record(recordType: "Note", recordID: RecordID(recordName: "n", zoneID: ZoneID(zoneName: "Notes")))
        record.encryptedValues["secret"] = .string("marker-1234")
        let sealed = try FieldSealing.seal(record, with: keys)
        let bytes = try XCTUnwrap(sealed["secret"])
        XCTAssertNil(String(decoding: bytes, as: UTF8.self).range(of: "marker-1234"), "the value is not in the sealed bytes")
        var received = Record(recordType: "Note", recordID: record.recordID)
        received.sealedValues = sealed
        XCTAssertEqual(try FieldSealing.open(received, with: keys).encryptedValues["secret"], .string("marker-1234"))
        XCTAssertThrowsError(try FieldSealing.open(received, with: nil)) { XCTAssertEqual(($0 as? StratusKitError)?.code, .missingKey) }
        let other = StaticKeyProvider(current: "k1", keys: ["k1": SymmetricKey(size: .bits256)])
        XCTAssertThrowsError(try FieldSealing.open(received, with: other)) { XCTAssertEqual(($0 as? StratusKitError)?.code, .decryptionFailed) }
        let lenient = try FieldSealing.open(received, with: nil, strict: false)
        XCTAssertEqual(lenient.sealedValues, sealed, "kept sealed, sent back unchanged")
        // Bound to its field and type: moved elsewhere it does not open.
        var moved = Record(recordType: "Other", recordID: record.recordID)
        moved.sealedValues = sealed
        XCTAssertThrowsError(try FieldSealing.open(moved, with: keys))
        XCTAssertThrowsError(try FieldSealing.seal(record, with: nil)) { XCTAssertEqual(($0 as? StratusKitError)?.code, .missingKey) }
    }

    func testGarbageDoesNotOpenAndDoesNotTrap() {
        for bytes in [Data(), Data([1]), Data([0, 0x53, 0x4B, 0x45, 1, 200, 1]), Data([0, 0x53, 0x4B, 0x45, 2, 1, 65] + Array(repeating: 0, count: 40)),
                      Data([0, 0x53, 0x4B, 0x45, 1, 2, 107, 49] + Array(repeating: 0, count: 10)), Data([1, 2, 107, 49] + Array(repeating: 0, count: 40))] {
            var record = Record(recordType: "Note", recordID: RecordID(recordName: "n"))
            record.sealedValues["f"] = bytes
            XCTAssertThrowsError(try FieldSealing.open(record, with: keys))
        }
    }
}

final class ZoneChangeTests: XCTestCase {
    func testADeleteReplacesAPendingSaveAndASaveAfterADeleteKeepsBothInOrder() {
        var snapshot = SyncSnapshot()
        let zone = ZoneID(zoneName: "Z")
        snapshot.add(database: [.saveZone(Zone(zoneID: zone)), .deleteZone(zone)])
        XCTAssertEqual(snapshot.pendingDatabaseChanges.map(\.change), [.deleteZone(zone)])
        snapshot.add(database: [.saveZone(Zone(zoneID: zone))])
        XCTAssertEqual(snapshot.pendingDatabaseChanges.map(\.change), [.deleteZone(zone), .saveZone(Zone(zoneID: zone))])
        snapshot.add(database: [.saveZone(Zone(zoneID: zone))])
        XCTAssertEqual(snapshot.pendingDatabaseChanges.map(\.change), [.deleteZone(zone), .saveZone(Zone(zoneID: zone))], "a save once")
        // Requests name a zone once each (the server refuses a zone twice), in order, 200 at most.
        let requests = StratusSyncEngine.zoneRequests(snapshot.pendingDatabaseChanges)
        XCTAssertEqual(requests.map { $0.map(\.change) }, [[.deleteZone(zone)], [.saveZone(Zone(zoneID: zone))]])
        var many = SyncSnapshot()
        many.add(database: (0..<450).map { .saveZone(Zone(zoneID: ZoneID(zoneName: "z\($0)"))) })
        XCTAssertEqual(StratusSyncEngine.zoneRequests(many.pendingDatabaseChanges).map(\.count), [200, 200, 50])
    }

    func testTheEngineRefusesThePublicDatabase() {
        final class Nothing: StratusSyncEngineDelegate {
            func handleEvent(_ event: StratusSyncEngine.Event, syncEngine: StratusSyncEngine) async {}
            func nextRecordZoneChangeBatch(_ context: StratusSyncEngine.SendChangesContext, syncEngine: StratusSyncEngine) async -> StratusSyncEngine.RecordZoneChangeBatch? { nil }
        }
        let container = StratusContainer(serverURL: URL(string: "http://127.0.0.1:1")!, identifier: "iCloud.x", authentication: .apiToken("t", webAuthToken: nil))
        XCTAssertThrowsError(try StratusSyncEngine(.init(database: container.publicCloudDatabase, stateSerialization: nil, delegate: Nothing()))) {
            XCTAssertEqual(($0 as? StratusKitError)?.code, .invalidArgument)
        }
    }

    /// The courier leaves the WebSocket out for good only when URLSession refuses its URL as
    /// unsupported (FoundationNetworking over a libcurl without WebSocket); a connection that
    /// failed otherwise is tried again at the next round.
    func testOnlyAnUnsupportedWebSocketURLLeavesTheWebSocketOut() {
        XCTAssertTrue(StratusSyncEngine.refusesWebSocket(NSError(domain: NSURLErrorDomain, code: NSURLErrorUnsupportedURL)))
        XCTAssertFalse(StratusSyncEngine.refusesWebSocket(NSError(domain: NSURLErrorDomain, code: NSURLErrorCannotConnectToHost)))
        XCTAssertFalse(StratusSyncEngine.refusesWebSocket(NSError(domain: NSURLErrorDomain, code: NSURLErrorTimedOut)))
        XCTAssertFalse(StratusSyncEngine.refusesWebSocket(StratusKitError(code: .networkFailure, reason: "no answer")))
    }
}

final class SealedWireTests: XCTestCase {
    func testASealedValueReadBackWithoutItsFlagIsKnownByItsBytes() throws {
        let keys = StaticKeyProvider(current: "k", keys: ["k": SymmetricKey(size: .bits256)])
        var record = Record(recordType: "Note", recordID: RecordID(recordName: "n"))
        record.encryptedValues["body"] = .string("hidden")
        record["plain"] = .bytes(Data([1, 2, 3]))
        let sealed = try FieldSealing.seal(record, with: keys)
        let sent = RecordCoding.encode(record, sealed: sealed)
        XCTAssertEqual(sent["fields"]?["body"]?["isEncrypted"], .bool(true))
        XCTAssertEqual(sent["fields"]?["body"]?["type"], "BYTES")
        // The server answers the field without isEncrypted.
        let answered: JSON = ["recordName": "n", "recordType": "Note", "fields": [
            "body": ["type": "BYTES", "value": .string(sealed["body"]!.base64EncodedString())],
            "plain": ["type": "BYTES", "value": .string(Data([1, 2, 3]).base64EncodedString())]]]
        let read = try RecordCoding.decode(answered, zoneID: .default)
        XCTAssertEqual(Set(read.sealedValues.keys), ["body"])
        XCTAssertEqual(read["plain"], .bytes(Data([1, 2, 3])))
        XCTAssertEqual(try FieldSealing.open(read, with: keys).encryptedValues["body"], .string("hidden"))
    }
}

final class JSONReadingTests: XCTestCase {
    func read(_ text: String) throws -> JSON { try JSON.decode(Data(text.utf8)) }

    func testEveryKindOfValueIsReadAndIntegersStayExact() throws {
        let text = #"""
         { "s": "plain", "e": "q\"b\\s\/n\nt\tu\u00e9p\ud83d\ude00", "raw": "é😀", "empty": "", "t": true, "f": false, "n": null,
           "max": 9223372036854775807, "min": -9223372036854775808, "past": 9223372036854775808, "zero": -0,
           "d": 1.5, "e2": -0.25e2, "x": 1E3, "a": [1, [], {}, "x"], "o": {"k": {"k": [null]}}, "dup": 1, "dup": 2 }
        """#
        let expected: JSON = [
            "s": "plain", "e": "q\"b\\s/n\nt\tu\u{e9}p\u{1F600}", "raw": "é😀", "empty": "", "t": true, "f": false, "n": .null,
            "max": .int(.max), "min": .int(.min), "past": .double(9_223_372_036_854_775_808), "zero": .int(0),
            "d": 1.5, "e2": -25.0, "x": .double(1000), "a": [1, [], [:], "x"], "o": ["k": ["k": [.null]]], "dup": 2,
        ]
        XCTAssertEqual(try read(text), expected)
        XCTAssertEqual(try read(" 7 "), .int(7))
        XCTAssertEqual(try read("\"\""), .string(""))
    }

    func testARecordPageReadsAsJSONDecoderReadsIt() throws {
        let record = #"{"recordName":"s-1","recordType":"Note","recordChangeTag":"abc","fields":{"title":{"value":"Note \"1\"","type":"STRING"},"# +
            #""count":{"value":-12,"type":"INT64"},"score":{"value":0.125,"type":"DOUBLE"},"tags":{"value":["a","ü"],"type":"STRING_LIST"}},"# +
            #""created":{"timestamp":1764950000000,"userRecordName":"_u"},"deleted":false,"zoneID":{"zoneName":"Z","ownerRecordName":"_u"}}"#
        let text = #"{"records":["# + Array(repeating: record, count: 3).joined(separator: ",") + #"],"syncToken":"t","moreComing":true}"#
        XCTAssertEqual(try read(text), try JSONDecoder().decode(JSON.self, from: Data(text.utf8)))
    }

    func testWhatIsNotJSONIsRefusedWithAClearErrorNotATrap() {
        let deep = String(repeating: "[", count: JSON.maxDepth + 1) + String(repeating: "]", count: JSON.maxDepth + 1)
        let texts = ["", " ", "{", "[1,]", "[1 2]", #"{"a" 1}"#, #"{"a":1,}"#, "{1:2}", "01", "1.", "1e", "-", "+1", "\"abc", #""\x""#,
                     #""\u12""#, #""\ud800""#, #""\udc00x""#, #""\ud800\u0041""#, "tru", "nul", "[1] 2", "\"\u{01}\"", "1e999", deep]
        for text in texts {
            XCTAssertThrowsError(try read(text), text) { XCTAssertEqual(($0 as? StratusKitError)?.code, .invalidResponse, text) }
        }
        for bytes: [UInt8] in [[0x22, 0xFF, 0x22], [0x22, 0xC3, 0x22], [0x22, 0x5C, 0x6E, 0xED, 0xA0, 0x80, 0x22]] {
            XCTAssertThrowsError(try JSON.decode(Data(bytes)), "\(bytes)") { XCTAssertEqual(($0 as? StratusKitError)?.code, .invalidResponse) }
        }
        let deepest = String(repeating: "[", count: JSON.maxDepth) + String(repeating: "]", count: JSON.maxDepth)
        XCTAssertNoThrow(try read(deepest), "nesting up to the bound is read")
    }
}
