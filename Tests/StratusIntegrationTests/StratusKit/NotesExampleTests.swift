import Foundation
import PostgresNIO
import StratusPostgres
import StratusTesting
import XCTest

/// The example app (Examples/Notes, built here as `notes-example`) as its guide runs it: two
/// copies, each with a state folder of its own (a phone and a laptop), signed in with a login and
/// password of the container's directory, against the live API with the relay and
/// stratus-subscriptions. What one adds the other lists, and a watching copy is pushed the other's
/// next note.
final class NotesExampleTests: XCTestCase {
    func testTwoCopiesOfTheNotesExampleSyncThroughTheStack() async throws {
        try await KitStack.with(pipeline: true) { fixture, port, _ in
            _ = try await UserStore(store: fixture.store, rounds: 1000).create(
                container: fixture.container, login: "alice@example.com", password: "a long password", logger: TestSupport.logger)
            let settings = [
                "NOTES_SERVER": "http://127.0.0.1:\(port)", "NOTES_CONTAINER": fixture.container, "NOTES_API_TOKEN": fixture.apiToken,
                "NOTES_LOGIN": "alice@example.com", "NOTES_PASSWORD": "a long password",
            ]
            let folders = FileManager.default.temporaryDirectory.appendingPathComponent("notes-example-\(UUID().uuidString.prefix(8))")
            defer { try? FileManager.default.removeItem(at: folders) }
            let phone = folders.appendingPathComponent("phone").path, laptop = folders.appendingPathComponent("laptop").path
            func notes(_ state: String, _ arguments: String...) async throws -> String {
                let (status, output) = try await StratusExecutable.run("notes-example", ["--state", state] + arguments, settings: settings)
                XCTAssertEqual(status, 0, output)
                return output
            }
            /// The id `add` printed (`+ id: text`).
            func added(_ output: String) throws -> String {
                let line = try XCTUnwrap(output.split(separator: "\n").first { $0.hasPrefix("+ ") }, output)
                return String(try XCTUnwrap(line.dropFirst(2).split(separator: ":").first))
            }

            let milk = try added(try await notes(phone, "add", "buy milk"))
            let listed = try await notes(laptop, "list")
            XCTAssertTrue(listed.contains("\(milk): buy milk"), listed)
            try await StratusExecutable.with("notes-example", ["--state", laptop, "watch"], settings: settings) { watcher in
                // Watching once its courier (a token of the laptop's device) exists.
                try await TestSupport.eventually(timeout: .seconds(20), "the laptop to watch") {
                    try await TestSupport.count(fixture.store, "SELECT count(*) FROM courier_tokens") == 1 && watcher.output().contains("watching")
                }
                let call = try added(try await notes(phone, "add", "call Bob"))
                try await TestSupport.eventually(timeout: .seconds(20), "the laptop to be pushed the phone's note") {
                    watcher.output().contains("← \(call): call Bob")
                }
                // And a delete on the phone reaches it too.
                _ = try await notes(phone, "delete", milk)
                try await TestSupport.eventually(timeout: .seconds(20), "the laptop to hear of the delete") {
                    watcher.output().contains("← \(milk) deleted")
                }
            }
            let afterwards = try await notes(laptop, "list")
            XCTAssertTrue(afterwards.contains("call Bob") && !afterwards.contains("buy milk"), afterwards)
        }
    }
}
