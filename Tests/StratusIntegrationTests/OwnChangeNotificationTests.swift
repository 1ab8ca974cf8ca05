import Foundation
import HummingbirdTesting
import NIOCore
import StratusTesting
@testable import StratusWorkers
import XCTest

/// A device is not pushed its own change: two devices of one user (each with a courier token made
/// under its `X-Stratus-Device-ID`) and a web client that names no device write in turn; each
/// device's courier is handed the others' changes, never its own, and the web client's every change
/// (real PostgreSQL, broker, relay and stratus-subscriptions).
final class OwnChangeNotificationTests: XCTestCase {
    typealias Body = [String: Any]

    /// A POST as `_alice`, from `device` (nil: no device named).
    static func post(_ client: any TestClientProtocol, _ uri: String, device: String?, _ body: Body) async throws -> (Int, Body) {
        let data = try JSONSerialization.data(withJSONObject: body)
        return try await client.execute(
            uri: uri, method: .post, headers: device.map { [.init("X-Stratus-Device-ID")!: $0] } ?? [:], body: ByteBuffer(data: data)
        ) { response in
            (Int(response.status.code), (try? JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? Body) ?? [:])
        }
    }

    /// A courier token made from `device`: the path of its long poll.
    static func courier(_ client: any TestClientProtocol, _ fixture: RecordAPITests.Fixture, device: String?) async throws -> String {
        let (status, created) = try await post(client, SubscriptionTests.notificationsPath(fixture, "tokens/create"), device: device, [:])
        XCTAssertEqual(status, 200, "\(created)")
        let url = try XCTUnwrap(created["webcourierURL"] as? String)
        return try XCTUnwrap(url.range(of: "/device/").map { String(url[$0.lowerBound...]) })
    }

    static func save(_ client: any TestClientProtocol, _ fixture: RecordAPITests.Fixture, _ name: String, device: String?) async throws {
        let (status, answer) = try await post(client, fixture.path("records/modify"), device: device, [
            "zoneID": ["zoneName": "Q"],
            "operations": [["operationType": "create", "record": RecordAPITests.note(name, ["count": ["value": 1]], type: "Item")]],
        ])
        XCTAssertEqual(status, 200, "\(answer)")
    }

    /// What a courier is handed now (the list form, without waiting): `recordName` for a query
    /// subscription's notification, `zone:<name>` for the database subscription's.
    static func handed(_ client: any TestClientProtocol, _ path: String) async throws -> [String] {
        let (status, answer) = try await SubscriptionTests.get(client, path + "?format=list&timeout=0")
        XCTAssertEqual(status, 200, "\(answer)")
        return (answer["notifications"] as? [Body] ?? []).map { notification in
            if let name = notification["recordName"] as? String { return name }
            return "zone:" + (((notification["zoneID"] as? Body)?["zoneName"] as? String) ?? "?")
        }
    }

    func testADeviceIsNotHandedItsOwnChangesButTheUsersOtherDevicesAre() async throws {
        try await SubscriptionTests.withStack { fixture, client, _ in
            try await RecordAPITests.createZone(client, fixture, "Q")
            let (status, subscriptions) = try await SubscriptionTests.modify(client, fixture, [
                SubscriptionTests.create(SubscriptionTests.querySubscription("all")),
                SubscriptionTests.create(["subscriptionID": "db", "subscriptionType": "database"]),
            ])
            XCTAssertEqual(status, 200, "\(subscriptions)")
            let phone = try await Self.courier(client, fixture, device: "phone")
            let laptop = try await Self.courier(client, fixture, device: "laptop")
            let web = try await Self.courier(client, fixture, device: nil)
            // A malformed device is refused, and makes no token.
            let (refused, refusal) = try await Self.post(client, SubscriptionTests.notificationsPath(fixture, "tokens/create"), device: "a b", [:])
            XCTAssertEqual(refused, 400)
            XCTAssertEqual(refusal["serverErrorCode"] as? String, "BAD_REQUEST")

            // The phone writes, the laptop makes a zone and writes, the web client writes, the phone writes.
            try await Self.save(client, fixture, "p1", device: "phone")
            let (zoneStatus, zoneAnswer) = try await Self.post(client, fixture.path("zones/modify"), device: "laptop", [
                "operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "L"]]]],
            ])
            XCTAssertEqual(zoneStatus, 200, "\(zoneAnswer)")
            try await Self.save(client, fixture, "l1", device: "laptop")
            try await Self.save(client, fixture, "w1", device: nil)
            try await Self.save(client, fixture, "p2", device: "phone")
            // All nine are in the user's log (notifications/changes lists the user's every notification).
            let logged = try await SubscriptionTests.waitForNotifications(client, fixture, count: 9)
            XCTAssertEqual(logged.count, 9)

            // Each device is handed the others' changes (a record's query and database notifications,
            // the laptop's zone), never its own; the courier that named no device, all of them.
            let toPhone = try await Self.handed(client, phone)
            XCTAssertEqual(toPhone.filter { !$0.hasPrefix("zone:") }.sorted(), ["l1", "w1"], "\(toPhone)")
            XCTAssertEqual(toPhone.filter { $0.hasPrefix("zone:") }.sorted(), ["zone:L", "zone:Q", "zone:Q"], "\(toPhone)")
            let toLaptop = try await Self.handed(client, laptop)
            XCTAssertEqual(toLaptop.filter { !$0.hasPrefix("zone:") }.sorted(), ["p1", "p2", "w1"], "\(toLaptop)")
            XCTAssertEqual(toLaptop.filter { $0.hasPrefix("zone:") }, ["zone:Q", "zone:Q", "zone:Q"], "\(toLaptop)")
            let toWeb = try await Self.handed(client, web)
            XCTAssertEqual(toWeb.count, 9, "\(toWeb)")
            // The couriers moved past what they skipped: nothing is left for any of them.
            for path in [phone, laptop, web] {
                let left = try await Self.handed(client, path)
                XCTAssertEqual(left, [])
            }
            // The next change of the laptop wakes the phone's waiting poll, and only the phone's.
            async let phoneWaits: (Int, Body) = SubscriptionTests.get(client, phone + "?format=list&timeout=45")
            try await Self.save(client, fixture, "l2", device: "laptop")
            let (woken, answer) = try await phoneWaits
            XCTAssertEqual(woken, 200)
            XCTAssertTrue((answer["notifications"] as? [Body] ?? []).contains { $0["recordName"] as? String == "l2" }, "\(answer)")
            _ = try await SubscriptionTests.waitForNotifications(client, fixture, count: 11)
            let laptopAfter = try await Self.handed(client, laptop)
            XCTAssertEqual(laptopAfter, [])
        }
    }
}
