import Foundation
import Hummingbird
import HummingbirdTesting
import StratusAPI
import StratusCore
import StratusPostgres
import StratusTesting
import XCTest

/// The user directory's identities (email, name components, discoverability, the sign-up option)
/// and the user endpoints over HTTP against the real PostgreSQL: users/caller, users/current,
/// users/discover, users/lookup/email and users/lookup/id find only discoverable users, and answer
/// hostile requests with CloudKit errors.
final class UserDirectoryTests: XCTestCase {
    typealias Body = [String: Any]
    static let container = "iCloud.com.example.notes"

    struct Fixture: Sendable {
        let store: PostgresStore
        let apiToken: String
        let secretKey: SecretKey
        /// Alice: discoverable, with an email address and a name.
        let alice: String
        /// Bob: with an email address and a name, not discoverable.
        let bob: String
        /// Carol: discoverable, with neither an email address nor a name.
        let carol: String

        /// A web auth token for `user`: a directory user's carries the directory's first credential epoch, any other user's none.
        func token(_ user: String) -> String {
            let inDirectory = [alice, bob, carol].contains(user)
            return WebAuthToken(
                userRecordName: user, container: UserDirectoryTests.container, expiresAt: Int64(Date().timeIntervalSince1970) + 3600,
                credentialEpoch: inDirectory ? 1 : nil
            ).signed(with: secretKey)
        }

        func path(_ operation: String, as user: String?) -> String {
            var uri = "/database/1/\(UserDirectoryTests.container)/development/public/\(operation)?ckAPIToken=\(apiToken)"
            if let user { uri += "&ckWebAuthToken=\(token(user))" }
            return uri
        }
    }

    func withFixture(_ body: @Sendable (Fixture, any TestClientProtocol) async throws -> Void) async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let token = try await ContainerStore(store: store).create(container: Self.container, label: "test", logger: TestSupport.logger)
            let users = UserStore(store: store, rounds: 1_000)
            let alice = try await users.create(
                container: Self.container, login: "alice", password: "a password",
                identity: UserIdentityChange(emailAddress: "Alice@Example.com", givenName: "Alice", familyName: "Liddell", discoverable: true),
                logger: TestSupport.logger)
            let bob = try await users.create(
                container: Self.container, login: "bob", password: "a password",
                identity: UserIdentityChange(emailAddress: "bob@example.com", givenName: "Bob", familyName: "Builder"), logger: TestSupport.logger)
            let carol = try await users.create(
                container: Self.container, login: "carol", password: "a password", identity: UserIdentityChange(discoverable: true), logger: TestSupport.logger)
            let configuration = APIConfiguration(secretKey: SecretKey.generate())
            let fixture = Fixture(store: store, apiToken: token, secretKey: configuration.secretKey, alice: alice, bob: bob, carol: carol)
            let router = buildRouter(APIDependencies(store: store, readiness: [], metrics: { "" }), configuration: configuration)
            try await Application(router: router, logger: TestSupport.logger).test(.router) { client in
                try await body(fixture, client)
            }
        }
    }

    static func send(_ client: any TestClientProtocol, _ uri: String, method: HTTPRequest.Method = .post, body: Any? = nil) async throws -> (Int, Body) {
        let data = try body.map { try JSONSerialization.data(withJSONObject: $0) } ?? Data()
        return try await client.execute(uri: uri, method: method, headers: [:], body: ByteBuffer(data: data)) { response in
            let object = try? JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? Body
            return (Int(response.status.code), object ?? [:])
        }
    }

    static func users(_ answer: Body) -> [Body] { answer["users"] as? [Body] ?? [] }

    func testCallerAnswersItsIdentityWithNameComponentsWhenDiscoverable() async throws {
        try await withFixture { fixture, client in
            let (status, alice) = try await Self.send(client, fixture.path("users/caller", as: fixture.alice), method: .get)
            XCTAssertEqual(status, 200, "\(alice)")
            XCTAssertEqual(alice["userRecordName"] as? String, fixture.alice)
            XCTAssertEqual(alice["nameComponents"] as? [String: String], ["givenName": "Alice", "familyName": "Liddell"])
            XCTAssertEqual(alice["lookupInfo"] as? [String: String], ["userRecordName": fixture.alice, "emailAddress": "Alice@Example.com"])
            let (_, current) = try await Self.send(client, fixture.path("users/current", as: fixture.alice))
            XCTAssertEqual(current as? [String: String], ["userRecordName": fixture.alice, "firstName": "Alice", "lastName": "Liddell"])

            // Bob gave a name and an email address but is not discoverable: neither leaves the server.
            let (_, bob) = try await Self.send(client, fixture.path("users/caller", as: fixture.bob), method: .get)
            XCTAssertEqual(bob["userRecordName"] as? String, fixture.bob)
            XCTAssertNil(bob["nameComponents"], "\(bob)")
            XCTAssertEqual(bob["lookupInfo"] as? [String: String], ["userRecordName": fixture.bob])
            let (_, bobCurrent) = try await Self.send(client, fixture.path("users/current", as: fixture.bob), method: .get)
            XCTAssertEqual(bobCurrent as? [String: String], ["userRecordName": fixture.bob])

            // A user the directory does not hold (a development token's) is known by the record name alone.
            let (strangerStatus, stranger) = try await Self.send(client, fixture.path("users/caller", as: "_stranger"), method: .get)
            XCTAssertEqual(strangerStatus, 200)
            XCTAssertEqual(stranger["userRecordName"] as? String, "_stranger")
            XCTAssertEqual(stranger["lookupInfo"] as? [String: String], ["userRecordName": "_stranger"])

            // Carol is discoverable without a name: no empty nameComponents.
            let (_, carol) = try await Self.send(client, fixture.path("users/caller", as: fixture.carol), method: .get)
            XCTAssertNil(carol["nameComponents"], "\(carol)")
        }
    }

    func testLookupsFindOnlyDiscoverableUsers() async throws {
        try await withFixture { fixture, client in
            // By email: capitals do not matter, the lookup info comes back as sent, others are left out.
            let (emailStatus, byEmail) = try await Self.send(client, fixture.path("users/lookup/email", as: fixture.bob), body: [
                "users": [["emailAddress": "bob@example.com"], ["emailAddress": "ALICE@example.COM"], ["emailAddress": "nobody@example.com"]],
            ])
            XCTAssertEqual(emailStatus, 200, "\(byEmail)")
            XCTAssertEqual(Self.users(byEmail).count, 1, "\(byEmail)")
            XCTAssertEqual(Self.users(byEmail).first?["userRecordName"] as? String, fixture.alice)
            XCTAssertEqual(Self.users(byEmail).first?["lookupInfo"] as? [String: String], ["emailAddress": "ALICE@example.COM"])
            XCTAssertEqual(Self.users(byEmail).first?["nameComponents"] as? [String: String], ["givenName": "Alice", "familyName": "Liddell"])

            // By record name: the email address is never shown.
            let (_, byID) = try await Self.send(client, fixture.path("users/lookup/id", as: fixture.bob), body: [
                "users": [["userRecordName": fixture.bob], ["userRecordName": "_nobody"], ["userRecordName": fixture.alice], ["userRecordName": fixture.carol]],
            ])
            XCTAssertEqual(Self.users(byID).map { $0["userRecordName"] as? String }, [fixture.alice, fixture.carol])
            XCTAssertEqual(Self.users(byID).first?["lookupInfo"] as? [String: String], ["userRecordName": fixture.alice])
            XCTAssertNil(Self.users(byID).last?["nameComponents"], "carol has no name")

            // POST users/discover: one identity per lookup info, in order; a user who is not found
            // (not discoverable, unknown, or a phone number) answers the lookup info alone.
            let (discoverStatus, discovered) = try await Self.send(client, fixture.path("users/discover", as: fixture.carol), body: [
                "lookupInfos": [
                    ["emailAddress": "bob@example.com"], ["userRecordName": fixture.alice], ["phoneNumber": "+15555550100"],
                    ["emailAddress": "alice@example.com"], ["userRecordName": "_nobody"],
                ],
            ])
            XCTAssertEqual(discoverStatus, 200, "\(discovered)")
            let identities = Self.users(discovered)
            XCTAssertEqual(identities.count, 5)
            XCTAssertEqual(identities[0] as? [String: [String: String]], ["lookupInfo": ["emailAddress": "bob@example.com"]])
            XCTAssertEqual(identities[1]["userRecordName"] as? String, fixture.alice)
            XCTAssertEqual(identities[2] as? [String: [String: String]], ["lookupInfo": ["phoneNumber": "+15555550100"]])
            XCTAssertEqual(identities[3]["userRecordName"] as? String, fixture.alice)
            XCTAssertEqual(identities[4] as? [String: [String: String]], ["lookupInfo": ["userRecordName": "_nobody"]])

            // GET users/discover: the container's discoverable users, without email addresses.
            let (allStatus, all) = try await Self.send(client, fixture.path("users/discover", as: fixture.bob), method: .get)
            XCTAssertEqual(allStatus, 200, "\(all)")
            XCTAssertEqual(Set(Self.users(all).compactMap { $0["userRecordName"] as? String }), [fixture.alice, fixture.carol])
            XCTAssertEqual(Self.users(all).count, 2)
            let text = String(decoding: try JSONSerialization.data(withJSONObject: all), as: UTF8.self)
            XCTAssertFalse(text.lowercased().contains("example.com"), "a list hands out no email addresses: \(text)")

            // Discoverability changes take effect at once, both ways.
            let directory = UserDirectory(store: fixture.store)
            try await directory.change(container: Self.container, login: "bob", UserIdentityChange(discoverable: true), logger: TestSupport.logger)
            try await directory.change(container: Self.container, login: "alice", UserIdentityChange(discoverable: false), logger: TestSupport.logger)
            let (_, after) = try await Self.send(client, fixture.path("users/lookup/email", as: fixture.carol), body: [
                "users": [["emailAddress": "bob@example.com"], ["emailAddress": "alice@example.com"]],
            ])
            XCTAssertEqual(Self.users(after).map { $0["userRecordName"] as? String }, [fixture.bob])
            let (_, allAfter) = try await Self.send(client, fixture.path("users/discover", as: fixture.carol), method: .get)
            XCTAssertEqual(Set(Self.users(allAfter).compactMap { $0["userRecordName"] as? String }), [fixture.bob, fixture.carol])
        }
    }

    func testHostileLookupsAreAnsweredWithCloudKitErrors() async throws {
        try await withFixture { fixture, client in
            let many = (0...200).map { ["userRecordName": "_u\($0)"] }
            let cases: [(String, String, Any, Int, String)] = [
                ("empty list", "users/lookup/email", ["users": [Any]()], 400, "BAD_REQUEST"),
                ("too many", "users/lookup/id", ["users": many], 400, "LIMIT_EXCEEDED"),
                ("too many to discover", "users/discover", ["lookupInfos": many], 400, "LIMIT_EXCEEDED"),
                ("two keys", "users/discover", ["lookupInfos": [["emailAddress": "a@b.c", "userRecordName": "_a"]]], 400, "BAD_REQUEST"),
                ("no key", "users/discover", ["lookupInfos": [[String: String]()]], 400, "BAD_REQUEST"),
                ("the wrong key", "users/lookup/email", ["users": [["userRecordName": fixture.alice]]], 400, "BAD_REQUEST"),
                ("a repeat", "users/lookup/email", ["users": [["emailAddress": "a@b.c"], ["emailAddress": "A@B.C"]]], 400, "BAD_REQUEST"),
                ("NUL", "users/lookup/id", ["users": [["userRecordName": "_a\u{0}b"]]], 400, "BAD_REQUEST"),
                ("a long name", "users/lookup/id", ["users": [["userRecordName": String(repeating: "x", count: 256)]]], 400, "BAD_REQUEST"),
                ("no email address", "users/lookup/email", ["users": [["emailAddress": "nobody"]]], 400, "BAD_REQUEST"),
                ("a long email address", "users/lookup/email", ["users": [["emailAddress": String(repeating: "x", count: 251) + "@b.c"]]], 400, "BAD_REQUEST"),
                ("a long phone number", "users/discover", ["lookupInfos": [["phoneNumber": String(repeating: "1", count: 65)]]], 400, "BAD_REQUEST"),
                ("a number", "users/lookup/id", ["users": [["userRecordName": 7]]], 400, "BAD_REQUEST"),
                ("no list", "users/discover", ["users": [["userRecordName": "_a"]]], 400, "BAD_REQUEST"),
            ]
            for (name, operation, body, status, code) in cases {
                let (answered, answer) = try await Self.send(client, fixture.path(operation, as: fixture.alice), body: body)
                XCTAssertEqual(answered, status, "\(name): \(answer)")
                XCTAssertEqual(answer["serverErrorCode"] as? String, code, "\(name): \(answer)")
                XCTAssertFalse((answer["reason"] as? String ?? "").isEmpty, name)
            }
            // Not JSON, and no body at all.
            let notJSON = try await client.execute(
                uri: fixture.path("users/lookup/email", as: fixture.alice), method: .post, headers: [:], body: ByteBuffer(string: "{nope")
            ) { Int($0.status.code) }
            XCTAssertEqual(notJSON, 400)
            let (emptyStatus, _) = try await Self.send(client, fixture.path("users/discover", as: fixture.alice))
            XCTAssertEqual(emptyStatus, 400)
            // Every user endpoint needs a user.
            for (operation, method) in [("users/discover", HTTPRequest.Method.get), ("users/discover", .post), ("users/lookup/email", .post), ("users/lookup/id", .post), ("users/caller", .get)] {
                let (anonymous, answer) = try await Self.send(client, fixture.path(operation, as: nil), method: method, body: ["users": [["userRecordName": "_a"]]])
                XCTAssertEqual(anonymous, 421, "\(operation): \(answer)")
                XCTAssertEqual(answer["serverErrorCode"] as? String, "AUTHENTICATION_REQUIRED")
            }
        }
    }

    func testTheDirectoryKeepsIdentitiesAndTheSignUpOption() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let logger = TestSupport.logger
            _ = try await ContainerStore(store: store).create(container: Self.container, label: "test", logger: logger)
            let users = UserStore(store: store, rounds: 1_000)
            let directory = UserDirectory(store: store)

            // The sign-up option is off by default: a new user is not discoverable unless told so.
            let dana = try await users.create(container: Self.container, login: "dana", password: "a password", identity: UserIdentityChange(emailAddress: " dana@example.com "), logger: logger)
            var identity = try await directory.identity(container: Self.container, userRecordName: dana, logger: logger)
            XCTAssertEqual(identity, UserIdentity(userRecordName: dana, emailAddress: "dana@example.com"))
            let optionSet = try await directory.setDiscoverableByDefault(container: Self.container, true, logger: logger)
            XCTAssertTrue(optionSet)
            let erin = try await users.create(container: Self.container, login: "erin", password: "a password", logger: logger)
            let erinIdentity = try await directory.identity(container: Self.container, userRecordName: erin, logger: logger)
            XCTAssertEqual(erinIdentity?.discoverable, true, "the sign-up option makes new users discoverable")
            let fay = try await users.create(container: Self.container, login: "fay", password: "a password", identity: UserIdentityChange(discoverable: false), logger: logger)
            let fayIdentity = try await directory.identity(container: Self.container, userRecordName: fay, logger: logger)
            XCTAssertEqual(fayIdentity?.discoverable, false, "an explicit choice wins over the sign-up option")
            let unknownContainer = try await directory.setDiscoverableByDefault(container: "iCloud.none", true, logger: logger)
            XCTAssertFalse(unknownContainer)

            // An email address names one user, whatever its capitals.
            await Self.assertThrows(.exists) {
                _ = try await users.create(container: Self.container, login: "gus", password: "a password", identity: UserIdentityChange(emailAddress: "DANA@example.com"), logger: logger)
            }
            await Self.assertThrows(.exists) {
                try await directory.change(container: Self.container, login: "erin", UserIdentityChange(emailAddress: "Dana@Example.com"), logger: logger)
            }
            await Self.assertThrows(.notFound) {
                try await directory.change(container: Self.container, login: "nobody", UserIdentityChange(givenName: "X"), logger: logger)
            }
            for bad in [UserIdentityChange(emailAddress: "no-at-sign"), UserIdentityChange(emailAddress: "a b@c.d"), UserIdentityChange(givenName: "a\u{7}b"),
                        UserIdentityChange(familyName: String(repeating: "x", count: 256))] {
                await Self.assertThrows(.badRequest) {
                    try await directory.change(container: Self.container, login: "dana", bad, logger: logger)
                }
            }

            // Parts change one at a time; an empty text clears its part.
            try await directory.change(container: Self.container, login: "dana", UserIdentityChange(givenName: "Dana", familyName: "Scully", discoverable: true), logger: logger)
            try await directory.change(container: Self.container, login: "dana", UserIdentityChange(emailAddress: ""), logger: logger)
            identity = try await directory.identity(container: Self.container, userRecordName: dana, logger: logger)
            XCTAssertEqual(identity, UserIdentity(userRecordName: dana, nameComponents: NameComponents(givenName: "Dana", familyName: "Scully"), discoverable: true))
            // With the address cleared it is free for another user.
            try await directory.change(container: Self.container, login: "erin", UserIdentityChange(emailAddress: "dana@example.com"), logger: logger)
        }
    }

    func testTheUserAndContainerCommandsSetIdentitiesAndTheSignUpOption() async throws {
        try await TestSupport.withMigratedStore { store, url in
            let logger = TestSupport.logger
            _ = try await ContainerStore(store: store).create(container: Self.container, label: "test", logger: logger)
            let settings = ["STRATUS_DATABASE_URL": url]
            let passwordFile = FileManager.default.temporaryDirectory.appendingPathComponent("stratus-password-\(UUID().uuidString)")
            try "a long password\n".write(to: passwordFile, atomically: true, encoding: .utf8)
            defer { try? FileManager.default.removeItem(at: passwordFile) }
            let directory = UserDirectory(store: store)

            let created = try await StratusExecutable.run("stratus", [
                "user", "create", Self.container, "--login", "hal", "--password-file", passwordFile.path,
                "--email", "hal@example.com", "--given-name", "Hal", "--family-name", "Nine", "--discoverable", "true",
            ], settings: settings)
            XCTAssertEqual(created.status, 0, created.output)
            let hal = try XCTUnwrap(Self.userRecordName(in: created.output), created.output)
            var identity = try await directory.identity(container: Self.container, userRecordName: hal, logger: logger)
            XCTAssertEqual(identity, UserIdentity(userRecordName: hal, emailAddress: "hal@example.com", nameComponents: NameComponents(givenName: "Hal", familyName: "Nine"), discoverable: true))

            let changed = try await StratusExecutable.run("stratus", ["user", "set", Self.container, "--login", "hal", "--discoverable", "false", "--family-name", ""], settings: settings)
            XCTAssertEqual(changed.status, 0, changed.output)
            identity = try await directory.identity(container: Self.container, userRecordName: hal, logger: logger)
            XCTAssertEqual(identity, UserIdentity(userRecordName: hal, emailAddress: "hal@example.com", nameComponents: NameComponents(givenName: "Hal")))

            let nothing = try await StratusExecutable.run("stratus", ["user", "set", Self.container, "--login", "hal"], settings: settings)
            XCTAssertNotEqual(nothing.status, 0, "a change must change something")
            let badEmail = try await StratusExecutable.run("stratus", ["user", "set", Self.container, "--login", "hal", "--email", "not an address"], settings: settings)
            XCTAssertNotEqual(badEmail.status, 0, badEmail.output)

            let option = try await StratusExecutable.run("stratus", ["container", "set", Self.container, "--users-discoverable-by-default", "true"], settings: settings)
            XCTAssertEqual(option.status, 0, option.output)
            let ivy = try await StratusExecutable.run("stratus", ["user", "create", Self.container, "--login", "ivy", "--password-file", passwordFile.path], settings: settings)
            XCTAssertEqual(ivy.status, 0, ivy.output)
            let ivyName = try XCTUnwrap(Self.userRecordName(in: ivy.output), ivy.output)
            let ivyIdentity = try await directory.identity(container: Self.container, userRecordName: ivyName, logger: logger)
            XCTAssertEqual(ivyIdentity?.discoverable, true)
        }
    }

    /// The user record name a `stratus user create` printed: its own line, `_` and 32 hex digits.
    static func userRecordName(in output: String) -> String? {
        output.split(separator: "\n").map(String.init).first { line in
            line.count == 33 && line.hasPrefix("_") && line.dropFirst().allSatisfy(\.isHexDigit)
        }
    }

    /// Fails unless `body` throws a StratusError with `code`.
    static func assertThrows(_ code: ServerErrorCode, file: StaticString = #filePath, line: UInt = #line, _ body: () async throws -> Void) async {
        do {
            try await body()
            XCTFail("expected \(code)", file: file, line: line)
        } catch let error as StratusError {
            XCTAssertEqual(error.code, code, error.reason, file: file, line: line)
        } catch {
            XCTFail("expected \(code), got \(error)", file: file, line: line)
        }
    }
}
