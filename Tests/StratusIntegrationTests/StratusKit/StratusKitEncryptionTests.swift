import Crypto
import Foundation
@testable import StratusKit
import StratusKafka
import StratusPostgres
import StratusTesting
import XCTest

/// Encrypted fields end to end: a value sealed on the device is nowhere in the database (a dump of
/// it), the event log or the broker's messages; a second device with the key reads it; one without
/// it gets a clear error.
final class StratusKitEncryptionTests: XCTestCase {
    func testAnEncryptedValueIsSealedOnTheDeviceAndOpensOnlyWithTheKey() async throws {
        try await KitStack.with(pipeline: true) { fixture, port, location in
            let key = SymmetricKey(size: .bits256)
            let keys = StaticKeyProvider(current: "k1", keys: ["k1": key])
            let marker = "secret-marker-\(UUID().uuidString)"
            let visible = "visible-title-\(UUID().uuidString)"
            let zone = ZoneID(zoneName: "Vault")
            let a = SyncDevice(name: "a", acknowledged: nil)
            try a.launch(KitStack.container(fixture, port: port, user: "_vault", keys: keys).privateCloudDatabase)
            await a.createZone(zone)
            let id = RecordID(recordName: "diary", zoneID: zone)
            await a.save(id, fields: ["title": .string(visible)], encrypted: ["body": .string(marker), "pin": .int64(1234)])
            try await a.engine.sendChanges()
            XCTAssertEqual(a.records[id]?.encryptedValues["body"], .string(marker), "the device's own copy opens")

            // Published: every event reached the broker.
            try await TestSupport.eventually(timeout: .seconds(30), "the relay to publish") {
                try await EventLog(store: fixture.store).backlog(logger: TestSupport.logger).count == 0
            }
            let dump = try await Self.dump(location.databaseURL)
            XCTAssertTrue(dump.contains(visible), "the dump holds the record (\(dump.count) bytes)")
            XCTAssertFalse(dump.contains(marker), "the sealed value is in no table, event or index")
            let consumer = try KafkaConsumer(configuration: KafkaClientConfiguration(brokers: location.brokers), groupID: "reader-\(UUID())",
                                             topics: [location.topic], logger: TestSupport.logger)
            var messages: [String] = []
            try await TestSupport.eventually(timeout: .seconds(30), "the record's event on the broker") {
                for message in try await consumer.poll(maxMessages: 500, timeout: .seconds(1)) { messages.append(String(decoding: message.value, as: UTF8.self)) }
                return messages.contains { $0.contains(visible) }
            }
            XCTAssertFalse(messages.contains { $0.contains(marker) }, "no broker message holds the value")

            // A second device with the key reads it; one without, or with another key, cannot.
            let b = SyncDevice(name: "b", acknowledged: nil)
            try b.launch(KitStack.container(fixture, port: port, user: "_vault", keys: keys).privateCloudDatabase)
            try await b.engine.fetchChanges()
            XCTAssertEqual(b.records[id]?.encryptedValues["body"], .string(marker))
            XCTAssertEqual(b.records[id]?.encryptedValues["pin"], .int64(1234))
            let keyless = KitStack.container(fixture, port: port, user: "_vault").privateCloudDatabase
            let sealed = try await keyless.record(for: id)
            XCTAssertEqual(Set(sealed.sealedValues.keys), ["body", "pin"])
            XCTAssertTrue(sealed.encryptedValues.isEmpty)
            XCTAssertThrowsError(try FieldSealing.open(sealed, with: nil)) { error in
                XCTAssertEqual((error as? StratusKitError)?.code, .missingKey)
                XCTAssertTrue((error as? StratusKitError)?.reason.contains("encrypted") == true, "\(error)")
            }
            let stranger = StaticKeyProvider(current: "k1", keys: ["k1": SymmetricKey(size: .bits256)])
            XCTAssertThrowsError(try FieldSealing.open(sealed, with: stranger)) { XCTAssertEqual(($0 as? StratusKitError)?.code, .decryptionFailed) }
            // A keyless device that saves the record sends the sealed values back untouched.
            var edited = sealed
            edited["title"] = "edited"
            _ = try await keyless.save(edited)
            let fetched1 = try await b.engine.database.record(for: id).encryptedValues["body"]
            XCTAssertEqual(fetched1, .string(marker))
        }
    }

    /// `pg_dump` of a database, as text (written to a file, read once the process ended).
    static func dump(_ url: String) async throws -> String {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("stratuskit-dump-\(UUID().uuidString).sql")
        defer { try? FileManager.default.removeItem(at: file) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["pg_dump", "--no-owner", "--file", file.path, url]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        let (ended, finish) = AsyncStream<Int32>.makeStream()
        process.terminationHandler = { finish.yield($0.terminationStatus); finish.finish() }
        try process.run()
        var iterator = ended.makeAsyncIterator()
        let status = await iterator.next()
        XCTAssertEqual(status, 0, "pg_dump")
        return try String(contentsOf: file, encoding: .utf8)
    }
}
