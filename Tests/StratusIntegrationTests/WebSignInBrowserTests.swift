import Foundation
import Hummingbird
import HummingbirdTesting
import StratusAPI
import StratusCore
import StratusPostgres
import StratusPushTestSupport
import StratusTesting
import Synchronization
import XCTest

/// A web app signs in through the hosted sign-in page in headless Chromium
/// (scripts/web_sign_in_browser_test.py): answered 421, it opens `redirectURL`, the user signs in
/// with a password, the page hands the web auth token back to the app's window, and the app calls
/// the API with it. Then it signs in again through a trusted issuer's button, calling the API on
/// its own origin (CORS): the test's OpenID provider (its own keys, an authorization endpoint that
/// answers at once with a form posting a signed ID token to Stratus's callback) on a loopback
/// port. Then a third time through an issuer with a token endpoint: the authorization-code flow
/// with PKCE, the provider redirecting the window back with a code, which Stratus exchanges at the
/// provider's token endpoint with the S256 verifier and the client secret (stored sealed); the
/// provider checks both. Against a live API over the real PostgreSQL.
final class WebSignInBrowserTests: XCTestCase {
    static let container = "iCloud.com.example.web"
    static let webClient = "web.example.signin"
    /// The issuer the hosted page signs in with through the authorization-code flow.
    static let codeIssuer = "https://pkce.example"
    static let clientSecret = "a browser client secret/+="

    /// The test's provider's answer to a code request (`response_type=code`, an S256 challenge): it
    /// remembers the challenge, nonce and redirect URL under a fresh code, and sends the window
    /// back to the redirect URL with the code and the state, as an OpenID provider does.
    static func authorizeCode(_ request: ReceivedRequest, grants: borrowing Mutex<[String: HostedProviderSignInTests.Grant]>) -> ReceiverReply {
        let query = Dictionary((URLComponents(string: request.uri)?.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { $1 })
        guard query["response_type"] == "code", query["code_challenge_method"] == "S256", query["client_id"] == webClient,
              let challenge = query["code_challenge"], challenge.count == 43, query["code_verifier"] == nil,
              let redirect = query["redirect_uri"], var back = URLComponents(string: redirect), let nonce = query["nonce"], let state = query["state"]
        else { return .answer(status: 400, body: "not a code request with PKCE") }
        let code = "code-" + UUID().uuidString
        grants.withLock { $0[code] = HostedProviderSignInTests.Grant(challenge: challenge, nonce: nonce, redirectURL: redirect) }
        back.queryItems = [URLQueryItem(name: "code", value: code), URLQueryItem(name: "state", value: state)]
        back.percentEncodedQuery = back.percentEncodedQuery?.replacingOccurrences(of: "+", with: "%2B")
        return .answer(status: 302, headers: [("Location", back.string ?? redirect), ("Cache-Control", "no-store")])
    }

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
        let grants = Mutex<[String: HostedProviderSignInTests.Grant]>([:])
        try await WebhookReceiver.with(reply: { request in
            if request.uri.hasPrefix("/code/authorize") { return Self.authorizeCode(request, grants: grants) }
            if request.uri.hasPrefix("/code/token") {
                return HostedProviderSignInTests.tokenEndpoint(
                    request, grants: grants, issuer: issuer, secret: Self.clientSecret, client: Self.webClient,
                    claims: ["iss": Self.codeIssuer, "email": "kai@example.com", "is_private_email": NSNull()])
            }
            return request.uri.hasPrefix("/authorize") ? Self.authorize(request, issuer: issuer)
                : .answer(status: 200, headers: [("Content-Type", "application/json")], body: issuer.keySet)
        }) { provider in
        try await TestSupport.withMigratedStore { store, _ in
            let apiToken = try await ContainerStore(store: store).create(container: Self.container, label: "web", logger: TestSupport.logger)
            let user = try await UserStore(store: store, rounds: 1000).create(
                container: Self.container, login: "grace@example.com", password: "a long password", logger: TestSupport.logger)
            try await IdentityStore(store: store).trust(container: Self.container, TrustedIssuer(
                issuer: IdentityTests.issuer, keySetURL: provider.url("/keys"), audiences: ["com.example.app", Self.webClient],
                webClientID: Self.webClient, authorizationURL: provider.url("/authorize")), logger: TestSupport.logger)
            let key = SecretKey.generate()
            try await IdentityStore(store: store).trust(container: Self.container, TrustedIssuer(
                issuer: Self.codeIssuer, keySetURL: provider.url("/keys"), audiences: [Self.webClient], webClientID: Self.webClient,
                authorizationURL: provider.url("/code/authorize"), tokenURL: provider.url("/code/token"), clientSecret: Self.clientSecret),
                sealingWith: key, logger: TestSupport.logger)
            // The app's origin, where the script serves the page and passes the API through.
            let appPort = try Broker.freePort()
            var configuration = APIConfiguration(secretKey: key)
            configuration.port = 0
            configuration.publicURL = "http://127.0.0.1:\(appPort)"
            configuration.keySets.allowPrivateAddresses = true
            let app = buildApplication(APIDependencies(store: store, readiness: [], metrics: { "" }), configuration: configuration, services: [], logger: TestSupport.logger)
            try await app.test(.live) { client in
                let apiPort = try XCTUnwrap(client.port)
                let (status, output) = try await ConsoleBrowserTests.runBrowser([
                    "WEB_API_URL": "http://127.0.0.1:\(apiPort)", "WEB_APP_PORT": "\(appPort)", "WEB_CONTAINER": Self.container,
                    "WEB_API_TOKEN": apiToken, "WEB_LOGIN": "grace@example.com", "WEB_PASSWORD": "a long password", "WEB_USER": user,
                    "WEB_PROVIDER_LABEL": ProviderSignIn.label(of: IdentityTests.issuer), "WEB_CODE_PROVIDER_LABEL": ProviderSignIn.label(of: Self.codeIssuer),
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
                // The code flow: one exchange at the provider's token endpoint, whose verifier is the
                // one the window's challenge was made from (the provider refused any other), with the
                // client secret; the account it names signed in as a user of its own.
                let codeUser = try XCTUnwrap(output.firstMatch(of: /code flow user (_[0-9a-f]+)/).map { String($0.1) }, output)
                let codeLinked = try await IdentityStore(store: store).linkedAccounts(container: Self.container, userRecordName: codeUser, logger: TestSupport.logger)
                XCTAssertEqual(codeLinked.map(\.issuer), [Self.codeIssuer])
                XCTAssertEqual(codeLinked.map(\.subject), ["code-subject"])
                let exchanges = provider.requests.filter { $0.uri.hasPrefix("/code/token") }
                XCTAssertEqual(exchanges.count, 1, "one code, exchanged once")
                let exchanged = try XCTUnwrap(exchanges.first)
                let verifier = try XCTUnwrap(String(decoding: exchanged.body, as: UTF8.self).firstMatch(of: /code_verifier=([A-Za-z0-9_-]{43})/).map { String($0.1) })
                let granted = grants.withLock { Array($0.values) }
                XCTAssertEqual(granted.map(\.challenge), [ProviderSignIn.codeChallenge(of: verifier)], "S256 of the verifier is the window's challenge")
                XCTAssertEqual(granted.map(\.used), [true])
            }
        }
        }
    }
}
