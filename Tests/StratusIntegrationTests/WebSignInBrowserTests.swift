import Foundation
import Hummingbird
import HummingbirdTesting
import StratusAPI
import StratusCore
import StratusPostgres
import StratusPushTestSupport
import StratusTesting
import XCTest

/// A web app signs in through the hosted sign-in page in headless Chromium
/// (scripts/web_sign_in_browser_test.py): answered 421, it opens `redirectURL`, the user signs in
/// with a password, the page hands the web auth token back to the app's window, and the app calls
/// the API with it. Then it signs in again through a trusted issuer's button, calling the API on
/// its own origin (CORS): the test's OpenID provider (its own keys, an authorization endpoint that
/// answers at once with a form posting a signed ID token to Stratus's callback) on a loopback
/// port. Against a live API over the real PostgreSQL.
final class WebSignInBrowserTests: XCTestCase {
    static let container = "iCloud.com.example.web"
    static let webClient = "web.example.signin"

    /// The test's provider's answer to an authorization request: a page that posts an ID token for
    /// the request's client id and nonce, with its state, to the redirect URL at once.
    static func authorize(_ request: ReceivedRequest, issuer: IdentityTests.TestIssuer) -> ReceiverReply {
        let query = Dictionary((URLComponents(string: request.uri)?.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { $1 })
        guard query["response_type"] == "id_token", query["response_mode"] == "form_post", let redirect = query["redirect_uri"],
              let client = query["client_id"], let nonce = query["nonce"], let state = query["state"]
        else { return .answer(status: 400, body: "not an ID-token request") }
        let token = issuer.token(["aud": client, "nonce": nonce, "sub": "browser-subject", "email": "lin@example.com", "is_private_email": NSNull()])
        func attribute(_ text: String) -> String {
            text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "\"", with: "&quot;").replacingOccurrences(of: "<", with: "&lt;")
        }
        let page = """
            <!doctype html><html><body><form method="post" action="\(attribute(redirect))">
            <input type="hidden" name="id_token" value="\(attribute(token))"><input type="hidden" name="state" value="\(attribute(state))">
            </form><script>document.forms[0].submit()</script></body></html>
            """
        return .answer(status: 200, headers: [("Content-Type", "text/html; charset=utf-8")], body: page)
    }

    func testAWebAppSignsInThroughTheHostedPageAndCallsTheAPIWithTheTokenItWasHanded() async throws {
        let issuer = IdentityTests.TestIssuer()
        try await WebhookReceiver.with(reply: { request in
            request.uri.hasPrefix("/authorize") ? Self.authorize(request, issuer: issuer)
                : .answer(status: 200, headers: [("Content-Type", "application/json")], body: issuer.keySet)
        }) { provider in
        try await TestSupport.withMigratedStore { store, _ in
            let apiToken = try await ContainerStore(store: store).create(container: Self.container, label: "web", logger: TestSupport.logger)
            let user = try await UserStore(store: store, rounds: 1000).create(
                container: Self.container, login: "grace@example.com", password: "a long password", logger: TestSupport.logger)
            try await IdentityStore(store: store).trust(container: Self.container, TrustedIssuer(
                issuer: IdentityTests.issuer, keySetURL: provider.url("/keys"), audiences: ["com.example.app", Self.webClient],
                webClientID: Self.webClient, authorizationURL: provider.url("/authorize")), logger: TestSupport.logger)
            // The app's origin, where the script serves the page and passes the API through.
            let appPort = try Broker.freePort()
            var configuration = APIConfiguration(secretKey: SecretKey.generate())
            configuration.port = 0
            configuration.publicURL = "http://127.0.0.1:\(appPort)"
            configuration.keySets.allowPrivateAddresses = true
            let app = buildApplication(APIDependencies(store: store, readiness: [], metrics: { "" }), configuration: configuration, services: [], logger: TestSupport.logger)
            try await app.test(.live) { client in
                let apiPort = try XCTUnwrap(client.port)
                let (status, output) = try await ConsoleBrowserTests.runBrowser([
                    "WEB_API_URL": "http://127.0.0.1:\(apiPort)", "WEB_APP_PORT": "\(appPort)", "WEB_CONTAINER": Self.container,
                    "WEB_API_TOKEN": apiToken, "WEB_LOGIN": "grace@example.com", "WEB_PASSWORD": "a long password", "WEB_USER": user,
                    "WEB_PROVIDER_LABEL": ProviderSignIn.label(of: IdentityTests.issuer),
                ], timeout: .seconds(120), script: "scripts/web_sign_in_browser_test.py")
                let failure = output.split(separator: "\n").last { $0.contains("FAILED") }.map(String.init) ?? "no FAILED line"
                guard status == 0, output.contains("all checks held") else {
                    return XCTFail("the browser run ended with status \(status): \(failure)\n\(output)")
                }
                // The sign-in began a session of the user's, by password.
                let sessions = try await SessionStore(store: store).list(container: Self.container, userRecordName: user, logger: TestSupport.logger)
                XCTAssertEqual(sessions.map(\.method), [.password])
                // The provider sign-in created a user linked to the provider's account, with a session of its own.
                let providerUser = try XCTUnwrap(output.firstMatch(of: /provider user (_[0-9a-f]+)/).map { String($0.1) }, output)
                let linked = try await IdentityStore(store: store).linkedAccounts(container: Self.container, userRecordName: providerUser, logger: TestSupport.logger)
                XCTAssertEqual(linked.map(\.subject), ["browser-subject"])
                let providerSessions = try await SessionStore(store: store).list(container: Self.container, userRecordName: providerUser, logger: TestSupport.logger)
                XCTAssertEqual(providerSessions.map(\.method), [.idToken])
            }
        }
        }
    }
}
