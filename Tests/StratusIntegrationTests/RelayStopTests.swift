import Foundation
import StratusCore
import StratusKafka
import StratusPostgres
import StratusTesting
import XCTest

/// `stratus-api` told to stop while its relay waits for a broker that died: the relay's send gives
/// up when the shutdown cancels it, so the process exits well before the send's own time limit.
final class RelayStopTests: XCTestCase {
    func testStratusAPIStoppedWhileItsRelayWaitsForADeadBrokerExitsPromptly() async throws {
        try await TestSupport.withMigratedStore { store, url in
            let broker = try Broker()
            try broker.start()
            defer { broker.kill() }
            let port = try Broker.freePort()
            let topic = "relay-stop-\(UUID().uuidString.prefix(8).lowercased())"
            let dataDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("stratus-relay-stop-\(UUID().uuidString)").path
            defer { try? FileManager.default.removeItem(atPath: dataDirectory) }
            let settings = [
                "STRATUS_DATABASE_URL": url, "STRATUS_KAFKA_BROKERS": broker.address, "STRATUS_TOPIC": topic,
                "STRATUS_HTTP_PORT": "\(port)", "STRATUS_SECRET_KEY": SecretKey.generate().hex, "STRATUS_DATA_DIR": dataDirectory,
            ]
            try await StratusExecutable.with("stratus-api", settings: settings) { api in
                try await api.answersHealth(at: "http://127.0.0.1:\(port)")
                let admin = KafkaAdmin(configuration: KafkaClientConfiguration(brokers: broker.address), logger: TestSupport.logger)
                try await TestSupport.eventually(timeout: .seconds(30), "the relay to create its topic") {
                    try await admin.partitionCount(topic: topic, timeout: .seconds(2)) != nil
                }
                broker.kill()
                // A zone created now is an event the relay sends to the dead broker; its delivery
                // report would come only after the send's time limit (30 s).
                let database = DatabaseID(container: "iCloud.test", environment: .development, scope: .private, owner: "_relay")
                _ = try await ZoneStore(store: store).modify(
                    [.create(ZoneID(zoneName: "Stop", ownerRecordName: database.owner))], in: database,
                    causation: Causation(requestID: "relay-stop"), logger: TestSupport.logger)
                // Setup, not an assertion: the relay is woken by the commit and sends at once.
                try await Task.sleep(for: .seconds(1))
                let clock = ContinuousClock()
                let stopping = clock.now
                let status = await api.stop(signal: SIGTERM)
                let took = clock.now - stopping
                XCTAssertEqual(status, 0, "a graceful stop: \(api.output().suffix(3000))")
                XCTAssertLessThan(took, .seconds(15), "stratus-api took \(took) to stop")
            }
            let unpublished = try await EventLog(store: store).unpublished(limit: 10, logger: TestSupport.logger)
            XCTAssertEqual(unpublished.count, 1, "the zone's event stays to be published")
        }
    }
}
