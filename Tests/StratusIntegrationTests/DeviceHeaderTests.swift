import Foundation
import HummingbirdTesting
import NIOCore
import StratusCore
import StratusPostgres
import StratusTesting
import XCTest

/// `X-Stratus-Device-ID`: the device a write comes from is stamped on its records (`created` and
/// `modified` `deviceID`, in the write's answer, a lookup and a sync page) and on its events'
/// causation; a write without it stays `_stratus`; a malformed one is refused before anything is stored.
final class DeviceHeaderTests: XCTestCase {
    typealias Body = [String: Any]

    static func modify(_ client: any TestClientProtocol, _ fixture: RecordAPITests.Fixture, device: String?, _ body: Any) async throws -> (Int, Body) {
        let data = try JSONSerialization.data(withJSONObject: body)
        return try await client.execute(
            uri: fixture.path("records/modify"), method: .post, headers: device.map { [.init("X-Stratus-Device-ID")!: $0] } ?? [:], body: ByteBuffer(data: data)
        ) { response in
            (Int(response.status.code), (try? JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? Body) ?? [:])
        }
    }

    static func save(_ name: String) -> Body {
        ["zoneID": ["zoneName": "Notes"], "operations": [["operationType": "forceReplace", "record": ["recordName": name, "recordType": "Note", "fields": ["t": ["value": name]]]]]]
    }

    func testAWriteIsStampedWithTheDeviceItNames() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "Notes")
            let (status, answer) = try await Self.modify(client, fixture, device: "phone-1.A_b", Self.save("mine"))
            XCTAssertEqual(status, 200, "\(answer)")
            let record = try XCTUnwrap((answer["records"] as? [Body])?.first)
            XCTAssertEqual((record["created"] as? Body)?["deviceID"] as? String, "phone-1.A_b")
            XCTAssertEqual((record["modified"] as? Body)?["deviceID"] as? String, "phone-1.A_b")
            // Another device changes it: modified names that one, created still the first.
            _ = try await Self.modify(client, fixture, device: "laptop", Self.save("mine"))
            let (_, changes) = try await RecordAPITests.post(client, fixture.path("records/changes"), ["zoneID": ["zoneName": "Notes"]])
            let synced = try XCTUnwrap((changes["records"] as? [Body])?.first { $0["recordName"] as? String == "mine" }, "\(changes)")
            XCTAssertEqual((synced["modified"] as? Body)?["deviceID"] as? String, "laptop")
            XCTAssertEqual((synced["created"] as? Body)?["deviceID"] as? String, "phone-1.A_b")
            let (_, looked) = try await RecordAPITests.post(client, fixture.path("records/lookup"), ["zoneID": ["zoneName": "Notes"], "records": [["recordName": "mine"]]])
            XCTAssertEqual(((looked["records"] as? [Body])?.first?["modified"] as? Body)?["deviceID"] as? String, "laptop")
            // Without the header: the web service's device, as before.
            _ = try await Self.modify(client, fixture, device: nil, Self.save("web"))
            let (_, web) = try await RecordAPITests.post(client, fixture.path("records/lookup"), ["zoneID": ["zoneName": "Notes"], "records": [["recordName": "web"]]])
            XCTAssertEqual(((web["records"] as? [Body])?.first?["modified"] as? Body)?["deviceID"] as? String, RecordStamp.webServiceDeviceID)
            // The events say which device caused them.
            let events = try await EventLog(store: fixture.store).events(after: 0, limit: 100, logger: TestSupport.logger)
            XCTAssertEqual(events.filter { $0.type == "record.saved" }.map(\.causation.deviceID), ["phone-1.A_b", "laptop", nil])
        }
    }

    func testAMalformedDeviceIsRefusedAndNothingIsStored() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "Notes")
            for device in ["", String(repeating: "a", count: 65), "has space", "é", "a/b"] {
                let (status, answer) = try await Self.modify(client, fixture, device: device, Self.save("refused"))
                XCTAssertEqual(status, 400, "\(device): \(answer)")
                XCTAssertEqual(answer["serverErrorCode"] as? String, "BAD_REQUEST")
                XCTAssertTrue((answer["reason"] as? String)?.contains("X-Stratus-Device-ID") == true, "\(answer)")
            }
            let (_, looked) = try await RecordAPITests.post(client, fixture.path("records/lookup"), ["zoneID": ["zoneName": "Notes"], "records": [["recordName": "refused"]]])
            XCTAssertEqual((looked["records"] as? [Body])?.first?["serverErrorCode"] as? String, "NOT_FOUND")
        }
    }
}
