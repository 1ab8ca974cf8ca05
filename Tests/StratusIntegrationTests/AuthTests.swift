import Crypto
import Foundation
import Hummingbird
import HummingbirdTesting
import StratusAPI
import StratusCore
import StratusPostgres
import StratusRuntime
import StratusTesting
import XCTest

/// Both authentication schemes over HTTP against the real PostgreSQL: server-to-server signed
/// requests, and the sign-in endpoint of the built-in user directory.
final class AuthTests: XCTestCase {
    typealias Body = [String: Any]
    static let container = "iCloud.com.example.notes"

    struct Fixture: Sendable {
        let store: PostgresStore
        let url: String
        let configuration: APIConfiguration
        let apiToken: String
        let otherAPIToken: String
    }

    func withFixture(_ body: @Sendable (Fixture, any TestClientProtocol) async throws -> Void) async throws {
        try await TestSupport.withMigratedStore { store, url in
            let containers = ContainerStore(store: store)
            let token = try await containers.create(container: Self.container, label: "test", logger: TestSupport.logger)
            let other = try await containers.create(container: "iCloud.other", label: "test", logger: TestSupport.logger)
            let fixture = Fixture(store: store, url: url, configuration: APIConfiguration(secretKey: SecretKey.generate()), apiToken: token, otherAPIToken: other)
            let router = buildRouter(APIDependencies(store: store, readiness: [], metrics: { "" }), configuration: fixture.configuration)
            try await Application(router: router, logger: TestSupport.logger).test(.router) { client in
                try await body(fixture, client)
            }
        }
    }

    /// Sends a request and decodes the JSON answer.
    static func send(
        _ client: any TestClientProtocol, _ uri: String, method: HTTPRequest.Method = .post, headers: HTTPFields = [:], body: Data
    ) async throws -> (Int, Body) {
        try await client.execute(uri: uri, method: method, headers: headers, body: ByteBuffer(data: body)) { response in
            let object = try? JSONSerialization.jsonObject(with: Data(buffer: response.body), options: [.fragmentsAllowed]) as? Body
            return (Int(response.status.code), object ?? [:])
        }
    }

    static func json(_ object: Any) throws -> Data { try JSONSerialization.data(withJSONObject: object) }

    /// The three signature headers for a request.
    static func signedHeaders(keyID: String, key: P256.Signing.PrivateKey, body: Data, subpath: String, at time: Date = Date()) throws -> HTTPFields {
        let date = ISO8601Time.text(Int64(time.timeIntervalSince1970))
        var headers = HTTPFields()
        headers[.init(ServerSignature.keyIDHeader)!] = keyID
        headers[.init(ServerSignature.dateHeader)!] = date
        headers[.init(ServerSignature.signatureHeader)!] = try ServerSignature.sign(date: date, body: body, subpath: subpath, privateKey: key)
        return headers
    }

    static func path(_ operation: String, database: String = "public", container: String = container) -> String {
        "/database/1/\(container)/development/\(database)/\(operation)"
    }

    static func create(_ name: String, value: Int) -> Body {
        ["operations": [["operationType": "create", "record": ["recordName": name, "recordType": "Note", "fields": ["v": ["value": value]]]]]]
    }

    func testServerToServerSignedRequestsReachThePublicDatabaseOnly() async throws {
        try await withFixture { fixture, client in
            let privateKey = P256.Signing.PrivateKey()
            let keys = ServerKeyStore(store: fixture.store)
            let registered = try await keys.register(
                container: Self.container, publicKey: try ServerPublicKey(text: privateKey.publicKey.pemRepresentation), label: "cron", logger: TestSupport.logger)
            XCTAssertEqual(registered.keyID, try ServerPublicKey(text: privateKey.publicKey.pemRepresentation).keyID)
            // Registering the same key again is idempotent.
            let again = try await keys.register(
                container: Self.container, publicKey: try ServerPublicKey(text: privateKey.publicKey.pemRepresentation), label: "cron", logger: TestSupport.logger)
            XCTAssertEqual(again.userRecordName, registered.userRecordName)

            // A signed write to the public database succeeds and is attributed to the key's user.
            let subpath = Self.path("records/modify")
            let body = try Self.json(Self.create("s1", value: 7))
            let (status, written) = try await Self.send(client, subpath, headers: try Self.signedHeaders(keyID: registered.keyID, key: privateKey, body: body, subpath: subpath), body: body)
            XCTAssertEqual(status, 200, "\(written)")
            let record = (written["records"] as? [Body])?.first
            XCTAssertEqual(record?["recordName"] as? String, "s1")
            XCTAssertEqual((record?["created"] as? Body)?["userRecordName"] as? String, registered.userRecordName)

            // A signed read sees it; users/caller names the key's user.
            let lookupPath = Self.path("records/lookup")
            let lookupBody = try Self.json(["records": [["recordName": "s1"]]])
            let (lookupStatus, read) = try await Self.send(client, lookupPath, headers: try Self.signedHeaders(keyID: registered.keyID, key: privateKey, body: lookupBody, subpath: lookupPath), body: lookupBody)
            XCTAssertEqual(lookupStatus, 200)
            XCTAssertEqual((((read["records"] as? [Body])?.first?["fields"] as? Body)?["v"] as? Body)?["value"] as? Int, 7)
            let callerPath = Self.path("users/caller")
            let (callerStatus, caller) = try await Self.send(client, callerPath, method: .get, headers: try Self.signedHeaders(keyID: registered.keyID, key: privateKey, body: Data(), subpath: callerPath), body: Data())
            XCTAssertEqual(callerStatus, 200)
            XCTAssertEqual(caller["userRecordName"] as? String, registered.userRecordName)

            // Server keys do not reach private databases.
            let privatePath = Self.path("zones/list", database: "private")
            let (privateStatus, privateBody) = try await Self.send(client, privatePath, headers: try Self.signedHeaders(keyID: registered.keyID, key: privateKey, body: Data(), subpath: privatePath), body: Data())
            XCTAssertEqual(privateStatus, 403)
            XCTAssertEqual(privateBody["serverErrorCode"] as? String, "ACCESS_DENIED")

            // Failures: each is 401 AUTHENTICATION_FAILED with a reason, and nothing is written.
            let good = try Self.signedHeaders(keyID: registered.keyID, key: privateKey, body: body, subpath: subpath)
            var cases: [(String, String, HTTPFields, Data)] = []
            cases.append(("stale date", subpath, try Self.signedHeaders(keyID: registered.keyID, key: privateKey, body: body, subpath: subpath, at: Date().addingTimeInterval(-660)), body))
            cases.append(("future date", subpath, try Self.signedHeaders(keyID: registered.keyID, key: privateKey, body: body, subpath: subpath, at: Date().addingTimeInterval(660)), body))
            cases.append(("other body", subpath, good, try Self.json(Self.create("s2", value: 8))))
            cases.append(("other subpath", Self.path("records/modify", container: Self.container) + "x", good, body))
            cases.append(("other signer", subpath, try Self.signedHeaders(keyID: registered.keyID, key: P256.Signing.PrivateKey(), body: body, subpath: subpath), body))
            cases.append(("unknown key", subpath, try Self.signedHeaders(keyID: String(repeating: "ab", count: 32), key: privateKey, body: body, subpath: subpath), body))
            var missingSignature = good
            missingSignature[.init(ServerSignature.signatureHeader)!] = nil
            cases.append(("missing signature header", subpath, missingSignature, body))
            var garbage = good
            garbage[.init(ServerSignature.signatureHeader)!] = "%%%"
            cases.append(("garbage signature", subpath, garbage, body))
            cases.append(("mixed schemes", subpath + "?ckAPIToken=\(fixture.apiToken)", good, body))
            let otherContainerPath = Self.path("records/modify", container: "iCloud.other")
            cases.append(("another container", otherContainerPath, try Self.signedHeaders(keyID: registered.keyID, key: privateKey, body: body, subpath: otherContainerPath), body))
            for (name, uri, headers, requestBody) in cases {
                let (status, answer) = try await Self.send(client, uri, headers: headers, body: requestBody)
                if name == "other subpath" {
                    // An unknown route is a 404 before authentication; what matters is that nothing is written.
                    XCTAssertNotEqual(status, 200, name)
                    continue
                }
                XCTAssertEqual(status, 401, "\(name): \(answer)")
                XCTAssertEqual(answer["serverErrorCode"] as? String, "AUTHENTICATION_FAILED", name)
                XCTAssertFalse((answer["reason"] as? String ?? "").isEmpty, name)
            }
            let (_, mixed) = try await Self.send(client, subpath + "?ckAPIToken=\(fixture.apiToken)", headers: good, body: body)
            XCTAssertTrue((mixed["reason"] as? String ?? "").contains("not both"), "\(mixed)")
            let (_, stale) = try await Self.send(client, subpath, headers: cases[0].2, body: body)
            XCTAssertTrue((stale["reason"] as? String ?? "").contains("10 minutes"), "\(stale)")
            let (_, afterFailures) = try await Self.send(client, lookupPath, headers: try Self.signedHeaders(keyID: registered.keyID, key: privateKey, body: try Self.json(["records": [["recordName": "s2"]]]), subpath: lookupPath), body: try Self.json(["records": [["recordName": "s2"]]]))
            XCTAssertEqual((afterFailures["records"] as? [Body])?.first?["serverErrorCode"] as? String, "NOT_FOUND", "no failed request wrote s2")

            // A revoked key stops working at once.
            let revoked = try await keys.revoke(id: registered.keyID, logger: TestSupport.logger)
            XCTAssertTrue(revoked)
            let (revokedStatus, _) = try await Self.send(client, lookupPath, headers: try Self.signedHeaders(keyID: registered.keyID, key: privateKey, body: lookupBody, subpath: lookupPath), body: lookupBody)
            XCTAssertEqual(revokedStatus, 401)
        }
    }

    /// A JavaScript client signs the path with its query string as it sends it
    /// (`…/users/caller?ckjsBuildVersion=…&ckjsVersion=…&clientId=…`): that signature verifies, over
    /// the query byte for byte (a decoded or reordered query does not), and the path-only form still does.
    func testASignatureOverThePathWithItsQueryAsSentVerifies() async throws {
        try await withFixture { fixture, client in
            let privateKey = P256.Signing.PrivateKey()
            let registered = try await ServerKeyStore(store: fixture.store).register(
                container: Self.container, publicKey: try ServerPublicKey(text: privateKey.publicKey.pemRepresentation), label: "web", logger: TestSupport.logger)
            let path = Self.path("users/caller")
            let query = "ckjsBuildVersion=2404ProjectDev18&ckjsVersion=2.6.4&clientId=9f1c%2F2b%20e7"
            let uri = "\(path)?\(query)"
            let (status, caller) = try await Self.send(
                client, uri, method: .get, headers: try Self.signedHeaders(keyID: registered.keyID, key: privateKey, body: Data(), subpath: uri), body: Data())
            XCTAssertEqual(status, 200, "\(caller)")
            XCTAssertEqual(caller["userRecordName"] as? String, registered.userRecordName)
            // A POST with a body and a query verifies the same way.
            let modify = Self.path("records/modify") + "?ckjsVersion=2.6.4"
            let body = try Self.json(Self.create("js1", value: 1))
            let (saved, answer) = try await Self.send(
                client, modify, headers: try Self.signedHeaders(keyID: registered.keyID, key: privateKey, body: body, subpath: modify), body: body)
            XCTAssertEqual(saved, 200, "\(answer)")
            // The path alone still verifies when a query is sent.
            let (pathOnly, _) = try await Self.send(
                client, uri, method: .get, headers: try Self.signedHeaders(keyID: registered.keyID, key: privateKey, body: Data(), subpath: path), body: Data())
            XCTAssertEqual(pathOnly, 200)
            // The query is taken as received: a signature over its decoded or reordered form fails.
            let decoded = "\(path)?ckjsBuildVersion=2404ProjectDev18&ckjsVersion=2.6.4&clientId=9f1c/2b e7"
            let reordered = "\(path)?ckjsVersion=2.6.4&ckjsBuildVersion=2404ProjectDev18&clientId=9f1c%2F2b%20e7"
            for signed in [decoded, reordered, "\(path)?"] {
                let (refused, reason) = try await Self.send(
                    client, uri, method: .get, headers: try Self.signedHeaders(keyID: registered.keyID, key: privateKey, body: Data(), subpath: signed), body: Data())
                XCTAssertEqual(refused, 401, signed)
                XCTAssertEqual(reason["serverErrorCode"] as? String, "AUTHENTICATION_FAILED", signed)
            }
            // A query past the bound is refused clearly, before the signature is checked.
            let long = "\(path)?pad=\(String(repeating: "a", count: ServerSignature.maxQueryBytes))"
            let (tooLong, answerTooLong) = try await Self.send(
                client, long, method: .get, headers: try Self.signedHeaders(keyID: registered.keyID, key: privateKey, body: Data(), subpath: long), body: Data())
            XCTAssertEqual(tooLong, 401)
            XCTAssertTrue((answerTooLong["reason"] as? String ?? "").contains("query string"), "\(answerTooLong)")
        }
    }

    func testTheKeyCommandRegistersPEMKeysAndRefusesOtherText() async throws {
        try await withFixture { fixture, client in
            var configuration = try StratusConfiguration.fromEnvironment(["STRATUS_SECRET_KEY": SecretKey.generate().hex, "STRATUS_DATABASE_URL": fixture.url])
            configuration.databaseMaxConnections = 2
            let privateKey = P256.Signing.PrivateKey()
            let keyID = try await Admin.createServerKey(
                container: Self.container, publicKey: privateKey.publicKey.pemRepresentation, label: "ops", configuration, logger: TestSupport.logger)
            XCTAssertEqual(keyID.count, 64)
            let path = Self.path("users/caller")
            let (status, _) = try await Self.send(client, path, method: .get, headers: try Self.signedHeaders(keyID: keyID, key: privateKey, body: Data(), subpath: path), body: Data())
            XCTAssertEqual(status, 200)
            do {
                _ = try await Admin.createServerKey(container: Self.container, publicKey: "not a key", label: "", configuration, logger: TestSupport.logger)
                XCTFail("a non-key was registered")
            } catch let error as StratusError {
                XCTAssertEqual(error.code, .badRequest)
            }
            do {
                _ = try await Admin.createServerKey(container: "iCloud.missing", publicKey: privateKey.publicKey.pemRepresentation, label: "", configuration, logger: TestSupport.logger)
                XCTFail("a key was registered for a missing container")
            } catch let error as StratusError {
                XCTAssertEqual(error.code, .notFound)
            }
            do {
                _ = try await Admin.createServerKey(container: "iCloud.other", publicKey: privateKey.publicKey.pemRepresentation, label: "", configuration, logger: TestSupport.logger)
                XCTFail("one key was registered for two containers")
            } catch let error as StratusError {
                XCTAssertEqual(error.code, .exists)
            }
            try await Admin.revokeServerKey(keyID, configuration, logger: TestSupport.logger)
            let (revoked, _) = try await Self.send(client, path, method: .get, headers: try Self.signedHeaders(keyID: keyID, key: privateKey, body: Data(), subpath: path), body: Data())
            XCTAssertEqual(revoked, 401)
        }
    }

    func testSignInIssuesAWebAuthTokenForAnOpaqueUserRecordName() async throws {
        try await withFixture { fixture, client in
            let users = UserStore(store: fixture.store, rounds: 1000)
            let alice = try await users.create(container: Self.container, login: "alice@example.com", password: "correct horse", logger: TestSupport.logger)
            XCTAssertTrue(alice.hasPrefix("_"))
            XCTAssertFalse(alice.contains("alice"), "user record names never carry the login")
            do {
                _ = try await users.create(container: Self.container, login: "alice@example.com", password: "another one", logger: TestSupport.logger)
                XCTFail("a login was taken twice")
            } catch let error as StratusError {
                XCTAssertEqual(error.code, .exists)
            }
            // The same login in another container is another user.
            let otherAlice = try await users.create(container: "iCloud.other", login: "alice@example.com", password: "correct horse", logger: TestSupport.logger)
            XCTAssertNotEqual(otherAlice, alice)

            // Without a user, the private database answers 421 with where to sign in.
            let (required, requiredBody) = try await Self.send(client, Self.path("zones/list", database: "private") + "?ckAPIToken=\(fixture.apiToken)", body: Data())
            XCTAssertEqual(required, 421)
            XCTAssertEqual(requiredBody["serverErrorCode"] as? String, "AUTHENTICATION_REQUIRED")
            // An absolute address of the hosted sign-in page, with a signed request and no API token.
            let redirectURL = try XCTUnwrap(requiredBody["redirectURL"] as? String)
            XCTAssertFalse(redirectURL.contains(fixture.apiToken), "no API token in redirectURL: \(redirectURL)")
            let page = try XCTUnwrap(URLComponents(string: redirectURL))
            XCTAssertNotNil(page.scheme, "redirectURL is absolute: \(redirectURL)")
            XCTAssertNotNil(page.host, "redirectURL is absolute: \(redirectURL)")
            XCTAssertEqual(page.path, "/auth/1/\(Self.container)/signin/page")
            let signInRequest = try XCTUnwrap(page.queryItems?.first { $0.name == "request" }?.value)
            // The page signs in with that request in place of the API token.
            let redirect = "/auth/1/\(Self.container)/signin?ckSignInRequest=\(signInRequest)"

            // Following it with the right password yields a token; the wrong one does not.
            let (signedIn, answer) = try await Self.send(client, redirect, body: try Self.json(["login": "alice@example.com", "password": "correct horse"]))
            XCTAssertEqual(signedIn, 200, "\(answer)")
            XCTAssertEqual(answer["userRecordName"] as? String, alice)
            let token = try XCTUnwrap(answer["ckWebAuthToken"] as? String)
            let expiresAt = try XCTUnwrap(answer["expiresAt"] as? Int64)
            XCTAssertGreaterThan(expiresAt, Int64(Date().timeIntervalSince1970 * 1000) + 86_400_000)
            var failures: [(String, String, Data, Int, String)] = []
            failures.append(("wrong password", redirect, try Self.json(["login": "alice@example.com", "password": "correct horsf"]), 401, "AUTHENTICATION_FAILED"))
            failures.append(("unknown login", redirect, try Self.json(["login": "mallory@example.com", "password": "correct horse"]), 401, "AUTHENTICATION_FAILED"))
            failures.append(("no API token", "/auth/1/\(Self.container)/signin", try Self.json(["login": "alice@example.com", "password": "correct horse"]), 401, "AUTHENTICATION_FAILED"))
            failures.append(("another container's API token", "/auth/1/\(Self.container)/signin?ckAPIToken=\(fixture.otherAPIToken)", try Self.json(["login": "alice@example.com", "password": "correct horse"]), 401, "AUTHENTICATION_FAILED"))
            failures.append(("broken JSON", redirect, Data("{".utf8), 400, "BAD_REQUEST"))
            failures.append(("missing password", redirect, try Self.json(["login": "alice@example.com"]), 400, "BAD_REQUEST"))
            failures.append(("password is a number", redirect, try Self.json(["login": "alice@example.com", "password": 5]), 400, "BAD_REQUEST"))
            for (name, uri, body, status, code) in failures {
                let (actual, failure) = try await Self.send(client, uri, body: body)
                XCTAssertEqual(actual, status, name)
                XCTAssertEqual(failure["serverErrorCode"] as? String, code, name)
                XCTAssertNil(failure["ckWebAuthToken"], name)
            }
            let (_, wrong) = try await Self.send(client, redirect, body: try Self.json(["login": "alice@example.com", "password": "correct horsf"]))
            let (_, unknown) = try await Self.send(client, redirect, body: try Self.json(["login": "mallory@example.com", "password": "correct horse"]))
            XCTAssertEqual(wrong["reason"] as? String, unknown["reason"] as? String, "a wrong password and an unknown login look the same")

            // The token opens alice's private database and names her.
            let auth = "?ckAPIToken=\(fixture.apiToken)&ckWebAuthToken=\(token)"
            let zone = try Self.json(["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Notes"]]]]])
            let (zoneStatus, _) = try await Self.send(client, Self.path("zones/modify", database: "private") + auth, body: zone)
            XCTAssertEqual(zoneStatus, 200)
            let (callerStatus, caller) = try await Self.send(client, Self.path("users/caller", database: "private") + auth, method: .get, body: Data())
            XCTAssertEqual(callerStatus, 200)
            XCTAssertEqual(caller["userRecordName"] as? String, alice)
            let (_, current) = try await Self.send(client, Self.path("users/current") + auth, body: Data())
            XCTAssertEqual(current["userRecordName"] as? String, alice)
            // It is not valid in another container, even with that container's API token.
            let (foreign, _) = try await Self.send(client, Self.path("zones/list", database: "private", container: "iCloud.other") + "?ckAPIToken=\(fixture.otherAPIToken)&ckWebAuthToken=\(token)", body: Data())
            XCTAssertEqual(foreign, 401)

            // A new password replaces the old one.
            try await users.setPassword(container: Self.container, login: "alice@example.com", password: "battery staple", logger: TestSupport.logger)
            let (old, _) = try await Self.send(client, redirect, body: try Self.json(["login": "alice@example.com", "password": "correct horse"]))
            XCTAssertEqual(old, 401)
            let (new, renewed) = try await Self.send(client, redirect, body: try Self.json(["login": "alice@example.com", "password": "battery staple"]))
            XCTAssertEqual(new, 200)
            XCTAssertEqual(renewed["userRecordName"] as? String, alice, "the user record name survives a password change")
        }
    }

    func testAPasswordChangeEndsTheUsersEarlierWebAuthTokens() async throws {
        try await withFixture { fixture, client in
            // The admin CLI's path (`stratus user password`, `stratus user token`), with the API's key.
            var configuration = try StratusConfiguration.fromEnvironment([
                "STRATUS_SECRET_KEY": fixture.configuration.secretKey.hex, "STRATUS_DATABASE_URL": fixture.url,
            ])
            configuration.databaseMaxConnections = 2
            let users = UserStore(store: fixture.store, rounds: 1000)
            let bob = try await users.create(container: Self.container, login: "bob@example.com", password: "first password", logger: TestSupport.logger)
            let signIn = "/auth/1/\(Self.container)/signin?ckAPIToken=\(fixture.apiToken)"
            func signedIn(_ password: String) async throws -> String {
                let (status, answer) = try await Self.send(client, signIn, body: try Self.json(["login": "bob@example.com", "password": password]))
                XCTAssertEqual(status, 200, "\(answer)")
                return try XCTUnwrap(answer["ckWebAuthToken"] as? String)
            }
            func caller(_ token: String) async throws -> (Int, Body) {
                try await Self.send(client, Self.path("users/caller", database: "private") + "?ckAPIToken=\(fixture.apiToken)&ckWebAuthToken=\(token)", method: .get, body: Data())
            }
            let before = try await signedIn("first password")
            let minted = try await Admin.webAuthToken(container: Self.container, user: bob, days: 1, configuration, logger: TestSupport.logger)
            let outsider = WebAuthToken(userRecordName: "_outsider", container: Self.container, expiresAt: Int64(Date().timeIntervalSince1970) + 600)
                .signed(with: fixture.configuration.secretKey)
            for token in [before, minted, outsider] {
                let (status, answer) = try await caller(token)
                XCTAssertEqual(status, 200, "\(answer)")
            }

            try await Admin.setPassword(container: Self.container, login: "bob@example.com", password: "second password", configuration, logger: TestSupport.logger)
            for (name, token) in [("signed in before", before), ("minted before", minted)] {
                let (status, answer) = try await caller(token)
                XCTAssertEqual(status, 401, "\(name): \(answer)")
                XCTAssertEqual(answer["serverErrorCode"] as? String, "AUTHENTICATION_FAILED", name)
                XCTAssertTrue((answer["reason"] as? String ?? "").contains("password changed"), "\(answer)")
            }
            // A token without a credential epoch does not reach a directory user either.
            let epochless = WebAuthToken(userRecordName: bob, container: Self.container, expiresAt: Int64(Date().timeIntervalSince1970) + 600)
                .signed(with: fixture.configuration.secretKey)
            let (epochlessStatus, _) = try await caller(epochless)
            XCTAssertEqual(epochlessStatus, 401)
            // New tokens work; so do tokens of users outside the directory.
            let after = try await signedIn("second password")
            let mintedAfter = try await Admin.webAuthToken(container: Self.container, user: bob, days: 1, configuration, logger: TestSupport.logger)
            for token in [after, mintedAfter] {
                let (status, answer) = try await caller(token)
                XCTAssertEqual(status, 200, "\(answer)")
                XCTAssertEqual(answer["userRecordName"] as? String, bob)
            }
            let (outsiderStatus, _) = try await caller(outsider)
            XCTAssertEqual(outsiderStatus, 200)
            // The next change ends those too.
            try await users.setPassword(container: Self.container, login: "bob@example.com", password: "third password", logger: TestSupport.logger)
            for token in [after, mintedAfter] {
                let (status, _) = try await caller(token)
                XCTAssertEqual(status, 401)
            }
        }
    }

    /// The API keeps the tokens it opened (`OpenedWebAuthTokens`); a kept token still stops
    /// working the second it expires.
    func testAWebAuthTokenTheAPIOpenedBeforeIsRefusedOnceItExpires() async throws {
        try await withFixture { fixture, client in
            let expiresAt = Int64(Date().timeIntervalSince1970) + 3
            let token = WebAuthToken(userRecordName: "_brief", container: Self.container, expiresAt: expiresAt)
                .signed(with: fixture.configuration.secretKey)
            func caller() async throws -> (Int, Body) {
                try await Self.send(client, Self.path("users/caller", database: "private") + "?ckAPIToken=\(fixture.apiToken)&ckWebAuthToken=\(token)", method: .get, body: Data())
            }
            // Opened once, then answered from what the API kept.
            for _ in 0..<2 {
                let (status, answer) = try await caller()
                XCTAssertEqual(status, 200, "\(answer)")
                XCTAssertEqual(answer["userRecordName"] as? String, "_brief")
            }
            try await TestSupport.eventually(timeout: .seconds(10), "the kept token to be refused once it has expired") {
                let (status, answer) = try await caller()
                guard status == 401 else { return false }
                XCTAssertEqual(answer["serverErrorCode"] as? String, "AUTHENTICATION_FAILED")
                XCTAssertTrue((answer["reason"] as? String ?? "").contains("expired"), "\(answer)")
                return true
            }
            XCTAssertGreaterThanOrEqual(Int64(Date().timeIntervalSince1970), expiresAt, "refused only once expired")
        }
    }

    func testTokensOfOneKindAreRefusedAsAnother() async throws {
        try await withFixture { fixture, client in
            let key = fixture.configuration.secretKey
            let token = WebAuthToken(userRecordName: "_carol", container: Self.container, expiresAt: Int64(Date().timeIntervalSince1970) + 600).signed(with: key)
            let auth = "?ckAPIToken=\(fixture.apiToken)&ckWebAuthToken=\(token)"
            let (created, _) = try await Self.send(client, Self.path("zones/modify", database: "private") + auth,
                                                   body: try Self.json(["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Notes"]]]]]))
            XCTAssertEqual(created, 200)
            let (_, changes) = try await Self.send(client, Self.path("records/changes", database: "private") + auth, body: try Self.json(["zoneID": ["zoneName": "Notes"]]))
            let syncToken = try XCTUnwrap(changes["syncToken"] as? String)
            let (_, zones) = try await Self.send(client, Self.path("zones/changes", database: "private") + auth, body: try Self.json([String: Any]()))
            let databaseToken = try XCTUnwrap(zones["syncToken"] as? String)

            // Sync tokens are no web auth tokens.
            for (name, other) in [("zone sync token", syncToken), ("database sync token", databaseToken)] {
                let (status, answer) = try await Self.send(
                    client, Self.path("users/caller", database: "private") + "?ckAPIToken=\(fixture.apiToken)&ckWebAuthToken=\(other)", method: .get, body: Data())
                XCTAssertEqual(status, 401, "\(name): \(answer)")
                XCTAssertEqual(answer["serverErrorCode"] as? String, "AUTHENTICATION_FAILED", name)
            }
            // A web auth token is no sync token or continuation marker; a zone's token is no database's, and back.
            let refusals: [(String, String, Body)] = [
                ("web auth token as a zone sync token", "records/changes", ["zoneID": ["zoneName": "Notes"], "syncToken": token]),
                ("database token as a zone sync token", "records/changes", ["zoneID": ["zoneName": "Notes"], "syncToken": databaseToken]),
                ("web auth token as a database sync token", "zones/changes", ["syncToken": token]),
                ("zone token as a database sync token", "zones/changes", ["syncToken": syncToken]),
                ("web auth token as a continuation marker", "records/query", ["zoneID": ["zoneName": "Notes"], "query": ["recordType": "Note"], "continuationMarker": token]),
                ("sync token as a continuation marker", "records/query", ["zoneID": ["zoneName": "Notes"], "query": ["recordType": "Note"], "continuationMarker": syncToken]),
            ]
            for (name, operation, body) in refusals {
                let (status, answer) = try await Self.send(client, Self.path(operation, database: "private") + auth, body: try Self.json(body))
                XCTAssertEqual(status, 400, "\(name): \(answer)")
                XCTAssertEqual(answer["serverErrorCode"] as? String, "BAD_REQUEST", name)
            }
            // Each still works as itself.
            let (again, _) = try await Self.send(client, Self.path("records/changes", database: "private") + auth, body: try Self.json(["zoneID": ["zoneName": "Notes"], "syncToken": syncToken]))
            XCTAssertEqual(again, 200)
            let (zonesAgain, _) = try await Self.send(client, Self.path("zones/changes", database: "private") + auth, body: try Self.json(["syncToken": databaseToken]))
            XCTAssertEqual(zonesAgain, 200)
        }
    }

    func testPublicReadsAreOpenToTheAPITokenUnlessTheContainerOptsOut() async throws {
        try await withFixture { fixture, client in
            let anonymous = "?ckAPIToken=\(fixture.apiToken)"
            let token = WebAuthToken(userRecordName: "_writer", container: Self.container, expiresAt: Int64(Date().timeIntervalSince1970) + 600)
                .signed(with: fixture.configuration.secretKey)
            let signedIn = anonymous + "&ckWebAuthToken=\(token)"
            let (written, _) = try await Self.send(client, Self.path("records/modify") + signedIn, body: try Self.json(Self.create("p1", value: 1)))
            XCTAssertEqual(written, 200)
            let lookup = try Self.json(["records": [["recordName": "p1"]]])
            // As on Apple's service, a new container's public database is readable with the API token alone.
            let (open, openBody) = try await Self.send(client, Self.path("records/lookup") + anonymous, body: lookup)
            XCTAssertEqual(open, 200)
            XCTAssertEqual((openBody["records"] as? [Body])?.first?["recordName"] as? String, "p1")
            let (zones, _) = try await Self.send(client, Self.path("zones/list") + anonymous, method: .get, body: Data())
            XCTAssertEqual(zones, 200)

            // The operator's opt-out closes it: a user is needed again, and told where to sign in.
            let closedNow = try await ContainerStore(store: fixture.store).setAnonymousPublicReads(container: Self.container, allowed: false, logger: TestSupport.logger)
            XCTAssertTrue(closedNow)
            let (closed, closedBody) = try await Self.send(client, Self.path("records/lookup") + anonymous, body: lookup)
            XCTAssertEqual(closed, 421)
            XCTAssertNotNil(closedBody["redirectURL"])
            let (closedQuery, _) = try await Self.send(client, Self.path("records/query") + anonymous, body: try Self.json(["query": ["recordType": "Note"]]))
            XCTAssertEqual(closedQuery, 421)
            let (asUser, _) = try await Self.send(client, Self.path("records/lookup") + signedIn, body: lookup)
            XCTAssertEqual(asUser, 200)

            let changed = try await ContainerStore(store: fixture.store).setAnonymousPublicReads(container: Self.container, allowed: true, logger: TestSupport.logger)
            XCTAssertTrue(changed)
            let (query, _) = try await Self.send(client, Self.path("records/query") + anonymous, body: try Self.json(["query": ["recordType": "Note"]]))
            XCTAssertNotEqual(query, 421, "queries are reads")
            // Writes and identity still need a user.
            let (anonymousWrite, writeBody) = try await Self.send(client, Self.path("records/modify") + anonymous, body: try Self.json(Self.create("p2", value: 2)))
            XCTAssertEqual(anonymousWrite, 421)
            XCTAssertEqual(writeBody["serverErrorCode"] as? String, "AUTHENTICATION_REQUIRED")
            let (anonymousCaller, _) = try await Self.send(client, Self.path("users/caller") + anonymous, method: .get, body: Data())
            XCTAssertEqual(anonymousCaller, 421)
            // The private database never opens to anonymous callers.
            let (privateList, _) = try await Self.send(client, Self.path("zones/list", database: "private") + anonymous, body: Data())
            XCTAssertEqual(privateList, 421)
        }
    }
}
