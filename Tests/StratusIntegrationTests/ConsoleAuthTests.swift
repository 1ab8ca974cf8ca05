import Crypto
import Foundation
import Hummingbird
import HummingbirdTesting
import PostgresNIO
import StratusAPI
import StratusCore
import StratusPostgres
import StratusRuntime
import StratusTesting
import XCTest

/// The console's operator sign-in over HTTP against the real PostgreSQL: session cookies, CSRF
/// tokens on every form, expiry, sign-out, the sign-in limiter, container limits, escaping, the
/// switch that turns the console off, and `stratus operator create`.
final class ConsoleAuthTests: XCTestCase {
    static let container = "iCloud.com.example.notes"
    static let other = "iCloud.com.example.other"
    static let password = "a console password"

    /// A browser's view of the console: its cookie jar and the last page.
    final class Browser: @unchecked Sendable {
        let client: any TestClientProtocol
        var cookies: [String: String] = [:]
        init(_ client: any TestClientProtocol) { self.client = client }

        struct Page {
            var status: Int
            var html: String
            var headers: HTTPFields
            var setCookies: [String] { headers[values: .setCookie] }
            var location: String? { headers[.location] }
            /// The value of the hidden `csrf` field of the page's first form that has one.
            var csrf: String? { ConsoleAuthTests.field("csrf", in: html) }
        }

        func request(_ uri: String, method: HTTPRequest.Method = .get, form: [String: String]? = nil, headers extra: HTTPFields = [:]) async throws -> Page {
            var headers = extra
            if !cookies.isEmpty { headers[.cookie] = cookies.map { "\($0.key)=\($0.value)" }.joined(separator: "; ") }
            var body = ByteBuffer()
            if let form {
                headers[.contentType] = "application/x-www-form-urlencoded"
                body = ByteBuffer(string: ConsoleAuthTests.encode(form))
            }
            let page = try await client.execute(uri: uri, method: method, headers: headers, body: body) { response in
                Page(status: Int(response.status.code), html: String(buffer: response.body), headers: response.headers)
            }
            for cookie in page.setCookies {
                let pair = cookie.split(separator: ";")[0].split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                let value = pair.count > 1 ? String(pair[1]) : ""
                if value.isEmpty || cookie.contains("Max-Age=0") { cookies[String(pair[0])] = nil } else { cookies[String(pair[0])] = value }
            }
            return page
        }

        /// Signs in through the form; returns the answer to the post.
        func signIn(_ login: String, _ password: String) async throws -> Page {
            let form = try await request("/console/signin")
            return try await request("/console/signin", method: .post, form: ["csrf": form.csrf ?? "", "login": login, "password": password])
        }
    }

    static func encode(_ form: [String: String]) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return form.map { "\($0.key)=\($0.value.addingPercentEncoding(withAllowedCharacters: allowed)!)" }.joined(separator: "&")
    }

    /// The value of the first input named `name` in `html`.
    static func field(_ name: String, in html: String) -> String? {
        guard let range = html.range(of: "name=\"\(name)\" value=\"") else { return nil }
        return String(html[range.upperBound...].prefix { $0 != "\"" })
    }

    func withConsole(
        _ configure: (inout APIConfiguration) -> Void = { _ in }, _ body: @Sendable (PostgresStore, Browser) async throws -> Void
    ) async throws {
        var configuration = APIConfiguration(secretKey: SecretKey.generate())
        configuration.console.workers = StratusProcess.workerNames
        configure(&configuration)
        try await TestSupport.withMigratedStore { [configuration] store, _ in
            let containers = ContainerStore(store: store)
            _ = try await containers.create(container: Self.container, label: "test", logger: TestSupport.logger)
            _ = try await containers.create(container: Self.other, label: "test", logger: TestSupport.logger)
            let router = buildRouter(APIDependencies(store: store, readiness: [], metrics: { "" }), configuration: configuration)
            try await Application(router: router, logger: TestSupport.logger).test(.router) { client in
                try await body(store, Browser(client))
            }
        }
    }

    static func addOperator(_ store: PostgresStore, _ login: String = "ops@example.com", containers: [String]? = nil) async throws {
        try await OperatorStore(store: store, rounds: 1000).create(login: login, password: password, containers: containers, logger: TestSupport.logger)
    }

    func testOperatorsSignInAndOutWithHttpOnlySameSiteCookiesAndEveryFormNeedsItsCSRFToken() async throws {
        try await withConsole { store, browser in
            try await Self.addOperator(store)
            let away = try await browser.request("/console")
            XCTAssertEqual(away.status, 303, "without a session the console sends the browser to sign in")
            XCTAssertEqual(away.location, "/console/signin")

            let form = try await browser.request("/console/signin")
            XCTAssertEqual(form.status, 200)
            XCTAssertTrue(form.html.contains("<label for=\"login\">"), "inputs are labelled")
            XCTAssertEqual(form.headers[.init("Content-Security-Policy")!]?.contains("frame-ancestors 'none'"), true)
            let csrf = try XCTUnwrap(form.csrf)
            let signInCookie = try XCTUnwrap(form.setCookies.first { $0.hasPrefix("stratus_console_signin=") })
            XCTAssertTrue(signInCookie.contains("HttpOnly") && signInCookie.contains("SameSite=Strict") && signInCookie.contains("Path=/console"), signInCookie)
            XCTAssertEqual(browser.cookies["stratus_console_signin"], csrf, "the form's token matches its cookie")

            // A post without the form's token, or from a browser without the form's cookie, is refused
            // before the password is looked at.
            let noToken = try await browser.request("/console/signin", method: .post, form: ["login": "ops@example.com", "password": Self.password])
            XCTAssertEqual(noToken.status, 403)
            XCTAssertTrue(noToken.html.contains("CSRF"), noToken.html)
            XCTAssertNil(browser.cookies["stratus_console"])
            let stranger = Browser(browser.client)
            let foreign = try await stranger.request(
                "/console/signin", method: .post, form: ["csrf": csrf, "login": "ops@example.com", "password": Self.password])
            XCTAssertEqual(foreign.status, 403, "a token without its cookie is refused")
            XCTAssertNil(stranger.cookies["stratus_console"])

            let wrong = try await browser.signIn("ops@example.com", "not the password")
            XCTAssertEqual(wrong.status, 401)
            XCTAssertTrue(wrong.html.contains("The login or the password is wrong"), wrong.html)
            XCTAssertNil(browser.cookies["stratus_console"])
            let unknown = try await browser.signIn("nobody@example.com", Self.password)
            XCTAssertEqual(unknown.status, 401)

            let signedIn = try await browser.signIn("ops@example.com", Self.password)
            XCTAssertEqual(signedIn.status, 303)
            XCTAssertEqual(signedIn.location, "/console")
            let cookie = try XCTUnwrap(signedIn.setCookies.first { $0.hasPrefix("stratus_console=") })
            for attribute in ["HttpOnly", "SameSite=Strict", "Path=/console", "Max-Age=28"] {
                XCTAssertTrue(cookie.contains(attribute), "\(attribute) in \(cookie)")
            }
            XCTAssertFalse(cookie.contains("Secure"), "plain http gets no Secure cookie: \(cookie)")
            let token = try XCTUnwrap(browser.cookies["stratus_console"])
            XCTAssertEqual(token.count, 64)
            // Only the digest is stored.
            let stored = try await store.withConnection { connection in
                let rows = try await connection.query("SELECT session_digest FROM operator_sessions", logger: TestSupport.logger)
                var digests: [Data] = []
                for try await digest in rows.decode(Data.self) { digests.append(digest) }
                return digests
            }
            XCTAssertEqual(stored, [Data(SHA256.hash(data: Data(token.utf8)))])

            let home = try await browser.request("/console")
            XCTAssertEqual(home.status, 200)
            XCTAssertTrue(home.html.contains("ops@example.com"))
            XCTAssertTrue(home.html.contains(Self.container) && home.html.contains(Self.other), home.html)
            let sessionCSRF = try XCTUnwrap(home.csrf)
            XCTAssertNotEqual(sessionCSRF, csrf)

            // Signing out needs the session's token too.
            let forged = try await browser.request("/console/signout", method: .post, form: [:])
            XCTAssertEqual(forged.status, 403)
            let wrongToken = try await browser.request("/console/signout", method: .post, form: ["csrf": csrf])
            XCTAssertEqual(wrongToken.status, 403, "the sign-in form's token is not the session's")
            let stillIn = try await browser.request("/console")
            XCTAssertEqual(stillIn.status, 200)

            let out = try await browser.request("/console/signout", method: .post, form: ["csrf": sessionCSRF])
            XCTAssertEqual(out.status, 303)
            XCTAssertEqual(out.location, "/console/signin")
            XCTAssertNil(browser.cookies["stratus_console"], "the cookie is cleared")
            browser.cookies["stratus_console"] = token
            let replayed = try await browser.request("/console")
            XCTAssertEqual(replayed.status, 303, "a signed-out session's cookie opens nothing")
        }
    }

    func testSessionsExpire() async throws {
        try await withConsole({ $0.console.sessionLifetime = .seconds(120) }) { store, browser in
            try await Self.addOperator(store)
            let signedIn = try await browser.signIn("ops@example.com", Self.password)
            let cookie = try XCTUnwrap(signedIn.setCookies.first { $0.hasPrefix("stratus_console=") })
            XCTAssertTrue(cookie.contains("Max-Age=119") || cookie.contains("Max-Age=120"), cookie)
            let home = try await browser.request("/console")
            XCTAssertEqual(home.status, 200)
            try await store.withConnection { connection in
                try await connection.query("UPDATE operator_sessions SET expires_at = now() - interval '1 second'", logger: TestSupport.logger)
            }
            let expired = try await browser.request("/console")
            XCTAssertEqual(expired.status, 303, "an ended session opens nothing")
            XCTAssertEqual(expired.location, "/console/signin")
            // The next sign-in removes sessions that have ended.
            _ = try await browser.signIn("ops@example.com", Self.password)
            let count = try await store.withConnection { connection in
                let rows = try await connection.query("SELECT count(*)::bigint FROM operator_sessions", logger: TestSupport.logger)
                for try await count in rows.decode(Int64.self) { return count }
                return -1
            }
            XCTAssertEqual(count, 1)
        }
    }

    func testCookiesAreSecureWhenServedOverTLS() async throws {
        try await withConsole({ $0.console.secureCookies = true }) { store, browser in
            try await Self.addOperator(store)
            let signedIn = try await browser.signIn("ops@example.com", Self.password)
            XCTAssertTrue(signedIn.setCookies.allSatisfy { $0.contains("Secure") }, "\(signedIn.setCookies)")
        }
        try await withConsole { store, browser in
            try await Self.addOperator(store)
            let form = try await browser.request("/console/signin", headers: [.init("X-Forwarded-Proto")!: "https"])
            XCTAssertTrue(form.setCookies.allSatisfy { $0.contains("Secure") }, "a proxy's https counts: \(form.setCookies)")
        }
    }

    func testFailedSignInsAreLimitedAsTheAPIsAre() async throws {
        try await withConsole({ $0.signInLimits.perLogin = 2 }) { store, browser in
            try await Self.addOperator(store)
            for _ in 0..<2 {
                let wrong = try await browser.signIn("ops@example.com", "wrong password")
                XCTAssertEqual(wrong.status, 401)
            }
            let throttled = try await browser.signIn("ops@example.com", "wrong password")
            XCTAssertEqual(throttled.status, 429)
            XCTAssertNotNil(throttled.headers[.retryAfter])
            XCTAssertTrue(throttled.html.contains("Too many failed sign-ins"), throttled.html)
            let right = try await browser.signIn("ops@example.com", Self.password)
            XCTAssertEqual(right.status, 429, "while locked, the right password is refused too")
            XCTAssertNil(browser.cookies["stratus_console"])
            // Another login is not locked by this one's failures.
            try await Self.addOperator(store, "second@example.com")
            let second = try await browser.signIn("second@example.com", Self.password)
            XCTAssertEqual(second.status, 303)
        }
    }

    func testOperatorsLimitedToContainersSeeAndReachOnlyThose() async throws {
        try await withConsole { store, browser in
            try await Self.addOperator(store, containers: [Self.container])
            _ = try await browser.signIn("ops@example.com", Self.password)
            let home = try await browser.request("/console")
            XCTAssertTrue(home.html.contains(Self.container))
            XCTAssertFalse(home.html.contains(Self.other), home.html)
            let mine = try await browser.request("/console/containers/\(Self.container)")
            XCTAssertEqual(mine.status, 200)
            XCTAssertTrue(mine.html.contains("<label for=\"environment\">"))
            let theirs = try await browser.request("/console/containers/\(Self.other)")
            XCTAssertEqual(theirs.status, 403)
            XCTAssertTrue(theirs.html.contains("You may not reach"), theirs.html)
            do {
                try await OperatorStore(store: store, rounds: 1000).create(
                    login: "x@example.com", password: Self.password, containers: ["iCloud.missing"], logger: TestSupport.logger)
                XCTFail("an operator was limited to a container that does not exist")
            } catch let error as StratusError {
                XCTAssertEqual(error.code, .notFound)
            }
        }
    }

    func testEveryValueShownIsEscaped() async throws {
        try await withConsole { store, browser in
            let hostile = "iCloud.<script>alert(1)</script>"
            _ = try await ContainerStore(store: store).create(container: hostile, label: "test", logger: TestSupport.logger)
            try await Self.addOperator(store, "<b>ops</b>")
            _ = try await browser.signIn("<b>ops</b>", Self.password)
            let home = try await browser.request("/console")
            XCTAssertEqual(home.status, 200)
            XCTAssertFalse(home.html.contains("<script>"), home.html)
            XCTAssertFalse(home.html.contains("<b>ops"), home.html)
            XCTAssertTrue(home.html.contains("iCloud.&lt;script&gt;alert(1)&lt;/script&gt;"), home.html)
            XCTAssertTrue(home.html.contains("/console/containers/iCloud.%3Cscript%3Ealert%281%29%3C%2Fscript%3E"), home.html)
        }
    }

    func testTheConsoleCanBeSwitchedOff() async throws {
        try await withConsole({ $0.console.enabled = false }) { store, browser in
            try await Self.addOperator(store)
            let page = try await browser.request("/console/signin")
            XCTAssertEqual(page.status, 404)
            let post = try await browser.request("/console/signin", method: .post, form: ["login": "ops@example.com", "password": Self.password])
            XCTAssertEqual(post.status, 404)
        }
        var off = try StratusConfiguration.fromEnvironment(["STRATUS_CONSOLE": "false", "STRATUS_SECRET_KEY": SecretKey.generate().hex])
        XCTAssertFalse(off.api.console.enabled)
        off = try StratusConfiguration.fromEnvironment(["STRATUS_SECRET_KEY": SecretKey.generate().hex])
        XCTAssertTrue(off.api.console.enabled)
        XCTAssertFalse(off.api.console.secureCookies)
        let production = try StratusConfiguration.fromEnvironment(["STRATUS_DEPLOYMENT": "production", "STRATUS_SECRET_KEY": SecretKey.generate().hex])
        XCTAssertTrue(production.api.console.secureCookies, "a production deployment is reached over TLS")
        XCTAssertThrowsError(try StratusConfiguration.fromEnvironment(["STRATUS_CONSOLE": "maybe", "STRATUS_SECRET_KEY": SecretKey.generate().hex]))
        XCTAssertThrowsError(try StratusConfiguration.fromEnvironment(["STRATUS_CONSOLE_SESSION_SECONDS": "5", "STRATUS_SECRET_KEY": SecretKey.generate().hex]))
    }

    func testTheOperatorCommandCreatesOperatorsWhoCanSignIn() async throws {
        try await TestSupport.withMigratedStore { store, url in
            _ = try await ContainerStore(store: store).create(container: Self.container, label: "test", logger: TestSupport.logger)
            let folder = FileManager.default.temporaryDirectory.appendingPathComponent("stratus-operator-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: folder) }
            let passwordFile = folder.appendingPathComponent("password")
            try Data("\(Self.password)\n".utf8).write(to: passwordFile)
            let short = folder.appendingPathComponent("short")
            try Data("short\n".utf8).write(to: short)
            let settings = ["STRATUS_DATABASE_URL": url]

            let created = try await StratusExecutable.run(
                "stratus", ["operator", "create", "ops@example.com", "--container", Self.container, "--password-file", passwordFile.path], settings: settings)
            XCTAssertEqual(created.status, 0, created.output)
            XCTAssertTrue(created.output.contains("operator ops@example.com created (\(Self.container))"), created.output)
            XCTAssertFalse(created.output.contains(Self.password), "the password is never printed")
            let signedIn = try await OperatorStore(store: store).authenticate(login: "ops@example.com", password: Self.password, logger: TestSupport.logger)
            XCTAssertEqual(signedIn, OperatorStore.Operator(login: "ops@example.com", containers: [Self.container]))

            let everywhere = try await StratusExecutable.run("stratus", ["operator", "create", "root@example.com", "--password-file", passwordFile.path], settings: settings)
            XCTAssertEqual(everywhere.status, 0, everywhere.output)
            let root = try await OperatorStore(store: store).authenticate(login: "root@example.com", password: Self.password, logger: TestSupport.logger)
            XCTAssertEqual(root?.containers, nil, "without --container an operator reaches every container")

            let refused: [([String], String)] = [
                (["operator", "create", "ops@example.com", "--password-file", passwordFile.path], "the operator login is taken"),
                (["operator", "create", "new@example.com", "--container", "iCloud.missing", "--password-file", passwordFile.path], "no container 'iCloud.missing'"),
                (["operator", "create", "new@example.com", "--password-file", short.path], "at least"),
            ]
            for (arguments, message) in refused {
                let result = try await StratusExecutable.run("stratus", arguments, settings: settings)
                XCTAssertNotEqual(result.status, 0, "\(arguments): \(result.output)")
                XCTAssertTrue(result.output.contains(message), "\(arguments): \(result.output)")
            }
        }
    }
}
