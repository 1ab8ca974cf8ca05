import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import StratusAPI
import StratusCore
import StratusPostgres
import StratusPush
import StratusPushTestSupport
import StratusRuntime
import StratusTesting
import Synchronization
import XCTest

/// Email sign-up, verification and password reset over HTTP against the real PostgreSQL, with
/// messages delivered to a real SMTP server this test starts (scripts/smtp_test_server.py, on a
/// free port) or to a signed webhook this test receives.
final class EmailSignUpTests: XCTestCase {
    typealias Body = [String: Any]
    static let container = "iCloud.com.example.signup"

    /// The SMTP server: a child process saving each message as a file; stopped by its PID. With
    /// `startTLS`, it requires STARTTLS, with a certificate issued by a test authority of its own
    /// (`authorityFile`), and takes AUTH PLAIN for `relay-user` / `relay password` over TLS.
    /// Unchecked: its process is started in `init` and only read afterwards.
    final class SMTPServer: @unchecked Sendable {
        let port: Int
        let folder: URL
        let process: Process

        init(startTLS: Bool = false) async throws {
            port = try Broker.freePort()
            folder = FileManager.default.temporaryDirectory.appendingPathComponent("stratus-smtp-\(UUID().uuidString.prefix(8))")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = [
                ProcessInfo.processInfo.environment["STRATUS_TEST_PYTHON"] ?? "python3",
                TestSupport.repositoryRoot.appendingPathComponent("scripts/smtp_test_server.py").path, "\(port)", folder.path,
            ] + (startTLS ? ["--starttls"] : [])
            process.standardInput = FileHandle.nullDevice
            try process.run()
            let ready = folder.appendingPathComponent("ready").path
            let process = process
            try await TestSupport.eventually(timeout: .seconds(30), "the SMTP server listens") {
                guard process.isRunning else { throw TestSupport.MissingServer(description: "the SMTP server (aiosmtpd) exited; run scripts/install-deps.sh") }
                return FileManager.default.fileExists(atPath: ready)
            }
        }

        /// The test authority's certificate (PEM), with `startTLS`.
        var authorityFile: String { folder.appendingPathComponent("ca.pem").path }

        func stop() {
            if process.isRunning { kill(process.processIdentifier, SIGTERM) }
            try? FileManager.default.removeItem(at: folder)
        }

        /// The messages saved so far, in the order they came.
        func messages() throws -> [String] {
            try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".eml") }.sorted().map {
                try String(contentsOf: folder.appendingPathComponent($0), encoding: .utf8)
            }
        }

        /// Waits for the `count`th message and answers it.
        func message(_ count: Int) async throws -> String {
            try await TestSupport.eventually(timeout: .seconds(30), "message \(count) arrives") { try messages().count >= count }
            return try messages()[count - 1]
        }
    }

    struct Fixture: Sendable {
        let store: PostgresStore
        let apiToken: String
        let client: any TestClientProtocol

        func send(_ uri: String, method: HTTPRequest.Method = .post, headers: HTTPFields = [:], _ body: Any) async throws -> (Int, Body) {
            let data = try body as? Data ?? AuthTests.json(body)
            return try await AuthTests.send(client, uri, method: method, headers: headers, body: data)
        }

        func post(_ path: String, app: Bool = true, _ body: Any) async throws -> (Int, Body) {
            try await send("/auth/1/\(EmailSignUpTests.container)/\(path)" + (app ? "?ckAPIToken=\(apiToken)" : ""), body)
        }

        func setMode(_ mode: SignUpMode) async throws {
            try await EmailSignUpStore(store: store).setMode(container: EmailSignUpTests.container, mode, logger: TestSupport.logger)
        }

        /// Rows of the tables sign-up writes: users, email tokens, sessions.
        func stored() async throws -> [Int64] {
            var counts: [Int64] = []
            for table in ["users", "email_tokens", "sessions"] {
                counts.append(try await TestSupport.count(store, "SELECT count(*)::bigint FROM \(unescaped: table)"))
            }
            return counts
        }

        func caller(_ webToken: String) async throws -> (Int, Body) {
            try await send(
                AuthTests.path("users/caller", database: "private", container: EmailSignUpTests.container) + "?ckAPIToken=\(apiToken)&ckWebAuthToken=\(webToken)",
                method: .get, Data())
        }
    }

    /// A router over a fresh database with one container, sending messages with `courier`; with
    /// `ownedDeliveries`, a live application whose task owner sends them off the requests, as
    /// stratus-api does.
    func withFixture(
        courier: any EmailSending, lifetimes: EmailTokenLifetimes = EmailTokenLifetimes(), ownedDeliveries: Bool = false,
        logger: Logger = TestSupport.logger, _ body: @Sendable (Fixture) async throws -> Void
    ) async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let token = try await ContainerStore(store: store).create(container: Self.container, label: "test", logger: TestSupport.logger)
            var configuration = APIConfiguration(secretKey: SecretKey.generate())
            configuration.email.lifetimes = lifetimes
            configuration.publicURL = "https://stratus.example"
            if ownedDeliveries {
                configuration.port = 0
                let tasks = TaskOwner(name: "test", logger: TestSupport.logger)
                let dependencies = APIDependencies(store: store, readiness: [], metrics: { "" }, tasks: tasks, email: courier)
                let app = buildApplication(dependencies, configuration: configuration, services: [], logger: TestSupport.logger)
                try await app.test(.live) { client in try await body(Fixture(store: store, apiToken: token, client: client)) }
                return
            }
            let router = buildRouter(APIDependencies(store: store, readiness: [], metrics: { "" }, email: courier), configuration: configuration)
            try await Application(router: router, logger: logger).test(.router) { client in
                try await body(Fixture(store: store, apiToken: token, client: client))
            }
        }
    }

    func withSMTP(lifetimes: EmailTokenLifetimes = EmailTokenLifetimes(), _ body: @Sendable (Fixture, SMTPServer) async throws -> Void) async throws {
        let smtp = try await SMTPServer()
        do {
            var settings = SMTPSettings(host: "127.0.0.1", port: smtp.port, from: "stratus@example.com")
            settings.startTLS = false
            try await withFixture(courier: SMTPSender(settings: settings), lifetimes: lifetimes) { fixture in try await body(fixture, smtp) }
            smtp.stop()
        } catch {
            smtp.stop()
            throw error
        }
    }

    /// The 64-digit code a message carries.
    static func code(_ message: String) throws -> String {
        let match = try XCTUnwrap(message.firstMatch(of: /code: ([0-9a-f]{64})/), "no code in \(message)")
        return String(match.1)
    }

    /// A refusal with its status, code and reason, and no token.
    static func assertRefused(_ answer: (Int, Body), _ status: Int, _ code: String, _ reason: String, _ what: String) {
        IdentityTests.assertRefused(answer, status: status, code: code, reason, what)
        XCTAssertNil(answer.1["ckWebAuthToken"], what)
    }

    /// STARTTLS, the default: a sign-up's message reaches a relay whose certificate a test
    /// authority issued once the settings trust that authority (`STRATUS_SMTP_CA_FILE`), with the
    /// relay's credentials sent inside TLS only. The host is an IP address (no server name is sent;
    /// the certificate is checked for the address), then a DNS name (sent and checked).
    func testSignUpEmailIsDeliveredOverSTARTTLSToARelayOfATrustedAuthority() async throws {
        let smtp = try await SMTPServer(startTLS: true)
        defer { smtp.stop() }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("stratus-smtp-settings-\(UUID().uuidString.prefix(8))").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let configuration = try StratusConfiguration.fromEnvironment([
            "STRATUS_DATA_DIR": directory, "STRATUS_SMTP_HOST": "127.0.0.1", "STRATUS_SMTP_PORT": "\(smtp.port)", "STRATUS_SMTP_FROM": "stratus@example.com",
            "STRATUS_SMTP_CA_FILE": smtp.authorityFile, "STRATUS_SMTP_USERNAME": "relay-user", "STRATUS_SMTP_PASSWORD": "relay password",
        ])
        guard case .smtp(let settings) = configuration.emailDelivery else { return XCTFail("SMTP: \(String(describing: configuration.emailDelivery))") }
        XCTAssertTrue(settings.startTLS, "STARTTLS is the default")
        XCTAssertEqual(settings.trustedAuthorities?.count, 1)
        try await withFixture(courier: SMTPSender(settings: settings)) { fixture in
            try await fixture.setMode(.open)
            let (status, answer) = try await fixture.post("signup", ["email": "ada@example.com", "password": "a long password"])
            XCTAssertEqual(status, 200, "\(answer)")
            let message = try await smtp.message(1)
            XCTAssertTrue(message.contains("X-Envelope-To: ada@example.com"), message)
            _ = try Self.code(message)
        }
        var named = settings
        named.host = "localhost"
        try await SMTPSender(settings: named).send(Self.message(to: "grace@example.com"))
        let second = try await smtp.message(2)
        XCTAssertTrue(second.contains("X-Envelope-To: grace@example.com"), second)
    }

    /// A relay whose certificate no trusted authority issued is refused: the sign-up answers as
    /// always, no message is handed over, and the log says why, without the code or the relay's
    /// password. A relay that does not offer STARTTLS is refused before anything is sent.
    func testARelayWithAnUntrustedCertificateOrWithoutSTARTTLSIsRefused() async throws {
        let smtp = try await SMTPServer(startTLS: true)
        defer { smtp.stop() }
        var settings = SMTPSettings(host: "127.0.0.1", port: smtp.port, from: "stratus@example.com")
        settings.username = "relay-user"
        settings.password = "relay password"
        let logs = ObserverProjectionTests.CapturedLogs()
        let logger = Logger(label: "email-test") { _ in ObserverProjectionTests.CapturingLogHandler(logs: logs) }
        // No CA file: the system's authorities, none of which issued the test certificate.
        try await withFixture(courier: SMTPSender(settings: settings), logger: logger) { fixture in
            try await fixture.setMode(.open)
            let (status, answer) = try await fixture.post("signup", ["email": "ada@example.com", "password": "a long password"])
            XCTAssertEqual(status, 200, "the answer does not depend on the delivery: \(answer)")
            // Without a task owner the delivery is over before the answer: its warning is logged.
            let warnings = logs.lines.withLock { $0.filter { $0.level == .warning && $0.message == "an email message was not delivered" } }
            XCTAssertEqual(warnings.count, 1, "\(logs.lines.withLock { $0.map(\.message) })")
            let error = warnings.first.map { "\($0.metadata["error"] ?? "")" } ?? ""
            XCTAssertTrue(error.contains("TLS handshake") && error.contains("STRATUS_SMTP_CA_FILE"), error)
            let logged = logs.lines.withLock { $0.map { "\($0.message) \($0.metadata)" }.joined(separator: "\n") }
            XCTAssertFalse(logged.contains("relay password"), logged)
            XCTAssertNil(logged.firstMatch(of: /[0-9a-f]{64}/), "no code in the log: \(logged)")
        }
        XCTAssertEqual(try smtp.messages().count, 0, "nothing was handed to the relay")

        let plain = try await SMTPServer()
        defer { plain.stop() }
        let refused = SMTPSender(settings: SMTPSettings(host: "127.0.0.1", port: plain.port, from: "stratus@example.com"))
        do {
            try await refused.send(Self.message(to: "ada@example.com"))
            XCTFail("a relay without STARTTLS took the message")
        } catch {
            XCTAssertTrue("\(error)".contains("does not offer STARTTLS"), "\(error)")
        }
        XCTAssertEqual(try plain.messages().count, 0)
    }

    static func message(to address: String) -> EmailMessage {
        EmailMessage(to: address, subject: "A test", text: "code: " + String(repeating: "0", count: 64), purpose: "verify", container: container,
                     token: String(repeating: "0", count: 64), link: "https://stratus.example/")
    }

    func testOpenSignUpVerifiesOnceResetsOnceAndAnswersEveryAddressAlike() async throws {
        try await withSMTP { fixture, smtp in
            // Off by default: refused, nothing stored, nothing sent.
            Self.assertRefused(
                try await fixture.post("signup", ["email": "ada@example.com", "password": "a long password"]), 403, "ACCESS_DENIED", "does not let users sign up",
                "sign-up off")
            let none = try await fixture.stored()
            XCTAssertEqual(none, [0, 0, 0])

            try await fixture.setMode(.open)
            // Hostile input: refused with a reason, nothing stored.
            let refusals: [(String, String, Any, Bool, Int, String)] = [
                ("no API token", "signup", ["email": "ada@example.com", "password": "a long password"], false, 401, "AUTHENTICATION_FAILED"),
                ("not an address", "signup", ["email": "ada", "password": "a long password"], true, 400, "BAD_REQUEST"),
                ("a long address", "signup", ["email": String(repeating: "a", count: 300) + "@example.com", "password": "a long password"], true, 400, "BAD_REQUEST"),
                ("short password", "signup", ["email": "ada@example.com", "password": "short"], true, 400, "BAD_REQUEST"),
                ("long password", "signup", ["email": "ada@example.com", "password": String(repeating: "p", count: 2000)], true, 400, "BAD_REQUEST"),
                ("password a number", "signup", ["email": "ada@example.com", "password": 12_345_678], true, 400, "BAD_REQUEST"),
                ("broken JSON", "signup", Data("{".utf8), true, 400, "BAD_REQUEST"),
                ("a large body", "signup", Data(String(repeating: " ", count: 20_000).utf8), true, 400, "LIMIT_EXCEEDED"),
                ("token not hex", "signup/verify", ["token": "zz"], false, 400, "BAD_REQUEST"),
                ("unknown token", "signup/verify", ["token": EmailToken.generate()], false, 401, "AUTHENTICATION_FAILED"),
                ("reset without password", "password/reset/confirm", ["token": EmailToken.generate()], false, 400, "BAD_REQUEST"),
            ]
            for (what, path, body, app, status, code) in refusals {
                let (actual, answer) = try await fixture.post(path, app: app, body)
                XCTAssertEqual(actual, status, "\(what): \(answer)")
                XCTAssertEqual(answer["serverErrorCode"] as? String, code, what)
                XCTAssertFalse((answer["reason"] as? String ?? "").isEmpty, what)
            }
            let refused = try await fixture.stored()
            XCTAssertEqual(refused, [0, 0, 0], "refused requests store nothing")

            // Sign up: a message with a single-use code; the user exists once it is confirmed.
            let (status, requested) = try await fixture.post("signup", ["email": "Ada@example.com", "password": "a long password"])
            XCTAssertEqual(status, 200, "\(requested)")
            let message = try await smtp.message(1)
            XCTAssertTrue(message.contains("X-Envelope-To: Ada@example.com"), message)
            XCTAssertTrue(message.contains("Subject: Confirm your address"), message)
            let code = try Self.code(message)
            XCTAssertTrue(message.contains("https://stratus.example/auth/1/\(Self.container)/signin/page#verify=\(code)"), message)
            let pending = try await fixture.stored()
            XCTAssertEqual(pending, [0, 1, 0], "only the token is stored until the address is confirmed")
            let digests = try await TestSupport.count(
                fixture.store, "SELECT count(*)::bigint FROM email_tokens WHERE token_digest = \(Data(EmailToken.digest(code)))")
            XCTAssertEqual(digests, 1, "the token is stored as its digest")

            let (verified, signedIn) = try await fixture.post("signup/verify", app: false, ["token": code])
            XCTAssertEqual(verified, 200, "\(signedIn)")
            XCTAssertEqual(signedIn["created"] as? Bool, true)
            let user = try XCTUnwrap(signedIn["userRecordName"] as? String)
            let firstToken = try XCTUnwrap(signedIn["ckWebAuthToken"] as? String)
            let (callerStatus, caller) = try await fixture.caller(firstToken)
            XCTAssertEqual(callerStatus, 200, "\(caller)")
            XCTAssertEqual(caller["userRecordName"] as? String, user)
            Self.assertRefused(try await fixture.post("signup/verify", app: false, ["token": code]), 401, "AUTHENTICATION_FAILED", "used already", "verified twice")
            let (passwordStatus, byPassword) = try await fixture.post("signin", ["login": "ada@example.com", "password": "a long password"])
            XCTAssertEqual(passwordStatus, 200, "\(byPassword)")
            XCTAssertEqual(byPassword["userRecordName"] as? String, user, "the address, in lower case, is the login")

            // The address is taken now: answered exactly as a new one, and no message goes out.
            let (takenStatus, taken) = try await fixture.post("signup", ["email": "ada@EXAMPLE.com", "password": "another password"])
            XCTAssertEqual(takenStatus, status)
            XCTAssertEqual(taken as NSDictionary, requested as NSDictionary, "a taken address is answered as a new one")
            // An unknown address's reset is answered as a user's.
            let (unknownStatus, unknown) = try await fixture.post("password/reset", ["email": "nobody@example.com"])
            let (resetStatus, reset) = try await fixture.post("password/reset", ["email": "ada@example.com"])
            XCTAssertEqual(unknownStatus, 200, "\(unknown)")
            XCTAssertEqual(resetStatus, unknownStatus)
            XCTAssertEqual(unknown as NSDictionary, reset as NSDictionary, "an unknown address is answered as a user's")
            let resetMessage = try await smtp.message(2)
            XCTAssertTrue(resetMessage.contains("X-Envelope-To: ada@example.com") && resetMessage.contains("Subject: Reset your password"), resetMessage)
            XCTAssertEqual(try smtp.messages().count, 2, "neither the taken address nor the unknown one got a message")

            // The reset: a new password, every earlier token of the user ended, single use.
            let resetCode = try Self.code(resetMessage)
            Self.assertRefused(
                try await fixture.post("signup/verify", app: false, ["token": resetCode]), 401, "AUTHENTICATION_FAILED", "not valid", "a reset code as a sign-up's")
            let (confirmed, afterReset) = try await fixture.post("password/reset/confirm", app: false, ["token": resetCode, "password": "a new long password"])
            XCTAssertEqual(confirmed, 200, "\(afterReset)")
            XCTAssertEqual(afterReset["userRecordName"] as? String, user)
            let (oldStatus, _) = try await fixture.caller(firstToken)
            XCTAssertEqual(oldStatus, 401, "a reset ends the tokens issued before it")
            let (newStatus, _) = try await fixture.caller(try XCTUnwrap(afterReset["ckWebAuthToken"] as? String))
            XCTAssertEqual(newStatus, 200)
            Self.assertRefused(
                try await fixture.post("password/reset/confirm", app: false, ["token": resetCode, "password": "yet another password"]), 401,
                "AUTHENTICATION_FAILED", "used already", "reset twice")
            let (oldPassword, _) = try await fixture.post("signin", ["login": "ada@example.com", "password": "a long password"])
            XCTAssertEqual(oldPassword, 401)
            let (newPassword, _) = try await fixture.post("signin", ["login": "ada@example.com", "password": "a new long password"])
            XCTAssertEqual(newPassword, 200)
        }
    }

    func testInviteOnlySendsOnlyToInvitedAddressesAndTokensExpire() async throws {
        try await withSMTP(lifetimes: try EmailTokenLifetimes(verify: 1, reset: 1)) { fixture, smtp in
            try await fixture.setMode(.inviteOnly)
            let signUps = EmailSignUpStore(store: fixture.store)
            let invited = try await signUps.invite(container: Self.container, email: "Dave@Example.com", logger: TestSupport.logger)
            XCTAssertTrue(invited)
            let (carolStatus, carol) = try await fixture.post("signup", ["email": "carol@example.com", "password": "a long password"])
            let (daveStatus, dave) = try await fixture.post("signup", ["email": "dave@example.com", "password": "a long password"])
            XCTAssertEqual(carolStatus, 200, "\(carol)")
            XCTAssertEqual(daveStatus, 200, "\(dave)")
            XCTAssertEqual(carol as NSDictionary, dave as NSDictionary, "an uninvited address is answered as an invited one")
            let message = try await smtp.message(1)
            XCTAssertTrue(message.contains("X-Envelope-To: dave@example.com"), message)
            XCTAssertEqual(try smtp.messages().count, 1, "the uninvited address got no message")

            // A token of a one-second lifetime, once that second has passed, is refused and
            // creates nothing.
            let code = try Self.code(message)
            let expiresAt = try await TestSupport.count(
                fixture.store, "SELECT extract(epoch FROM expires_at)::bigint FROM email_tokens WHERE token_digest = \(Data(EmailToken.digest(code)))")
            try await TestSupport.eventually(timeout: .seconds(10), "the token's lifetime passes") { Int64(Date().timeIntervalSince1970) > expiresAt }
            Self.assertRefused(try await fixture.post("signup/verify", app: false, ["token": code]), 401, "AUTHENTICATION_FAILED", "expired", "an expired token")
            let stored = try await fixture.stored()
            XCTAssertEqual(stored, [0, 1, 0], "an expired token creates no user")

            // Tokens expired more than a week ago are deleted as new ones are stored; younger ones stay.
            try await fixture.store.withConnection { connection in
                try await connection.query(
                    "UPDATE email_tokens SET expires_at = now() - interval '8 days' WHERE token_digest = \(Data(EmailToken.digest(code)))", logger: TestSupport.logger)
            }
            let (again, _) = try await fixture.post("signup", ["email": "dave@example.com", "password": "a long password"])
            XCTAssertEqual(again, 200)
            _ = try await smtp.message(2)
            let old = try await TestSupport.count(
                fixture.store, "SELECT count(*)::bigint FROM email_tokens WHERE token_digest = \(Data(EmailToken.digest(code)))")
            XCTAssertEqual(old, 0, "a token a week past its expiry is deleted")
            let kept = try await fixture.stored()
            XCTAssertEqual(kept, [0, 1, 0], "the new token is kept")
        }
    }

    func testWebhookDeliveryIsSignedWithTheSecret() async throws {
        let secret = Data("a webhook secret of the operator's".utf8)
        try await WebhookReceiver.with(reply: { _ in .answer(status: 204) }) { receiver in
            var configuration = WebhookSenderConfiguration()
            configuration.allowInsecureLoopback = true
            let sender = WebhookSender(configuration: configuration, logger: TestSupport.logger)
            do {
                let courier = EmailWebhookSender(url: receiver.url("/mail"), secret: secret, sender: sender)
                // Sent off the request by the application's task owner, as stratus-api sends them.
                try await withFixture(courier: courier, ownedDeliveries: true) { fixture in
                    try await fixture.setMode(.open)
                    let (status, answer) = try await fixture.post("signup", ["email": "eve@example.com", "password": "a long password"])
                    XCTAssertEqual(status, 200, "\(answer)")
                    try await TestSupport.eventually(timeout: .seconds(30), "the webhook is called") { receiver.requests.count == 1 }
                    let request = receiver.requests[0]
                    let signature = try XCTUnwrap(request.headers.first(name: "X-Stratus-Signature"))
                    let timestamp = try XCTUnwrap(request.headers.first(name: "X-Stratus-Timestamp").flatMap { Int64($0) })
                    XCTAssertTrue(WebhookSignature.verify(body: request.body, timestamp: timestamp, secret: secret, signature: signature))
                    XCTAssertFalse(WebhookSignature.verify(body: request.body, timestamp: timestamp, secret: Data("another secret".utf8), signature: signature))
                    let body = try XCTUnwrap(try JSONSerialization.jsonObject(with: request.body) as? Body)
                    XCTAssertEqual(body["to"] as? String, "eve@example.com")
                    XCTAssertEqual(body["purpose"] as? String, "verify")
                    let token = try XCTUnwrap(body["token"] as? String)
                    XCTAssertEqual(body["link"] as? String, "https://stratus.example/auth/1/\(Self.container)/signin/page#verify=\(token)")
                    let (verified, signedIn) = try await fixture.post("signup/verify", app: false, ["token": token])
                    XCTAssertEqual(verified, 200, "\(signedIn)")
                }
                try await sender.shutdown()
            } catch {
                try? await sender.shutdown()
                throw error
            }
        }
    }

    func testAuthenticationRequiredSendsToTheHostedPageForTheCallingOrigin() async throws {
        try await withSMTP { fixture, _ in
            try await fixture.setMode(.open)
            var headers = HTTPFields()
            headers[.origin] = "https://App.Example:8443"
            let (status, required) = try await fixture.send(
                AuthTests.path("users/caller", database: "private", container: Self.container) + "?ckAPIToken=\(fixture.apiToken)", method: .get,
                headers: headers, Data())
            XCTAssertEqual(status, 421, "\(required)")
            let redirectURL = try XCTUnwrap(required["redirectURL"] as? String)
            XCTAssertTrue(redirectURL.hasPrefix("https://stratus.example/auth/1/\(Self.container)/signin/page?request="), redirectURL)
            XCTAssertFalse(redirectURL.contains(fixture.apiToken), "no API token in redirectURL")
            let request = try XCTUnwrap(URLComponents(string: redirectURL)?.queryItems?.first { $0.name == "request" }?.value)

            // The page: its settings name the origin the token goes to, and its script runs under a nonce.
            let page = "/auth/1/\(Self.container)/signin/page?request=\(request)"
            let (html, policy) = try await fixture.client.execute(uri: page, method: .get) { response in
                (String(buffer: response.body), response.headers[.init("Content-Security-Policy")!] ?? "")
            }
            XCTAssertTrue(html.contains(#""origin":"https:\/\/app.example:8443""#), html)
            XCTAssertTrue(html.contains(#""signUp":"open""#), html)
            XCTAssertTrue(html.contains("postMessage({ ckWebAuthToken"), "the page hands the token back as CloudKit JS expects")
            let nonce = try XCTUnwrap(policy.firstMatch(of: /script-src 'nonce-([0-9a-f]+)'/)?.1, policy)
            XCTAssertTrue(html.contains("<script nonce=\"\(nonce)\">"))
            XCTAssertTrue(policy.contains("frame-ancestors 'none'"))
            // A tampered request: the page says so and offers no sign-in.
            let tampered = try await fixture.client.execute(uri: page + "x", method: .get) { String(buffer: $0.body) }
            XCTAssertTrue(tampered.contains(#""request":null"#) || !tampered.contains(#""request":""#), tampered)
            XCTAssertTrue(tampered.contains("not valid"), tampered)
            // Client text in the page is escaped out of the markup.
            let hostile = try await fixture.client.execute(uri: "/auth/1/%3Cscript%3Ealert(1)%3C%2Fscript%3E/signin/page", method: .get) { String(buffer: $0.body) }
            XCTAssertFalse(hostile.contains("<script>alert(1)"), hostile)

            // The page signs in and signs up with its request in place of the API token.
            let users = UserStore(store: fixture.store, rounds: 1000)
            _ = try await users.create(container: Self.container, login: "grace@example.com", password: "a long password", logger: TestSupport.logger)
            let (signedIn, answer) = try await fixture.send(
                "/auth/1/\(Self.container)/signin?ckSignInRequest=\(request)", ["login": "grace@example.com", "password": "a long password"])
            XCTAssertEqual(signedIn, 200, "\(answer)")
            let (signUp, _) = try await fixture.send(
                "/auth/1/\(Self.container)/signup?ckSignInRequest=\(request)", ["email": "hedy@example.com", "password": "a long password"])
            XCTAssertEqual(signUp, 200)
            let (forged, forgedAnswer) = try await fixture.send(
                "/auth/1/\(Self.container)/signin?ckSignInRequest=\(request)x", ["login": "grace@example.com", "password": "a long password"])
            XCTAssertEqual(forged, 401, "\(forgedAnswer)")

            // A call from no page (no Origin) still gets a request; an Origin that is no origin is left out.
            headers[.origin] = "javascript:alert(1)"
            let (_, noOrigin) = try await fixture.send(
                AuthTests.path("users/caller", database: "private", container: Self.container) + "?ckAPIToken=\(fixture.apiToken)", method: .get,
                headers: headers, Data())
            let other = try XCTUnwrap(URLComponents(string: try XCTUnwrap(noOrigin["redirectURL"] as? String))?.queryItems?.first { $0.name == "request" }?.value)
            let otherPage = try await fixture.client.execute(uri: "/auth/1/\(Self.container)/signin/page?request=\(other)", method: .get) { String(buffer: $0.body) }
            XCTAssertTrue(otherPage.contains(#""origin":null"#) || !otherPage.contains(#""origin":"#), otherPage)
        }
    }
}
