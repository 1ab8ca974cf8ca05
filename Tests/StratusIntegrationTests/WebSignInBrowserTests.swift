import Foundation
import Hummingbird
import HummingbirdTesting
import StratusAPI
import StratusCore
import StratusPostgres
import StratusTesting
import XCTest

/// A web app signs in through the hosted sign-in page in headless Chromium
/// (scripts/web_sign_in_browser_test.py): answered 421, it opens `redirectURL`, the user signs in
/// with a password, the page hands the web auth token back to the app's window, and the app calls
/// the API with it. Against a live API over the real PostgreSQL.
final class WebSignInBrowserTests: XCTestCase {
    static let container = "iCloud.com.example.web"

    func testAWebAppSignsInThroughTheHostedPageAndCallsTheAPIWithTheTokenItWasHanded() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let apiToken = try await ContainerStore(store: store).create(container: Self.container, label: "web", logger: TestSupport.logger)
            let user = try await UserStore(store: store, rounds: 1000).create(
                container: Self.container, login: "grace@example.com", password: "a long password", logger: TestSupport.logger)
            // The app's origin, where the script serves the page and passes the API through.
            let appPort = try Broker.freePort()
            var configuration = APIConfiguration(secretKey: SecretKey.generate())
            configuration.port = 0
            configuration.publicURL = "http://127.0.0.1:\(appPort)"
            let app = buildApplication(APIDependencies(store: store, readiness: [], metrics: { "" }), configuration: configuration, services: [], logger: TestSupport.logger)
            try await app.test(.live) { client in
                let apiPort = try XCTUnwrap(client.port)
                let (status, output) = try await ConsoleBrowserTests.runBrowser([
                    "WEB_API_URL": "http://127.0.0.1:\(apiPort)", "WEB_APP_PORT": "\(appPort)", "WEB_CONTAINER": Self.container,
                    "WEB_API_TOKEN": apiToken, "WEB_LOGIN": "grace@example.com", "WEB_PASSWORD": "a long password", "WEB_USER": user,
                ], timeout: .seconds(120), script: "scripts/web_sign_in_browser_test.py")
                let failure = output.split(separator: "\n").last { $0.contains("FAILED") }.map(String.init) ?? "no FAILED line"
                guard status == 0, output.contains("all checks held") else {
                    return XCTFail("the browser run ended with status \(status): \(failure)\n\(output)")
                }
                // The sign-in began a session of the user's, by password.
                let sessions = try await SessionStore(store: store).list(container: Self.container, userRecordName: user, logger: TestSupport.logger)
                XCTAssertEqual(sessions.map(\.method), [.password])
            }
        }
    }
}
