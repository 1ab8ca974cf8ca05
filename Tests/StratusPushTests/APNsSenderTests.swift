import Crypto
import Foundation
import NIOHTTP1
import StratusPush
import StratusPushTestSupport
import XCTest

/// The APNs sender against a real HTTP/2-over-TLS server on a loopback port (`APNsTestServer`),
/// whose certificate is signed by a CA made for the test and trusted by the sender alone.
final class APNsSenderTests: XCTestCase {
    let key = P256.Signing.PrivateKey()
    let teamID = "TEAM123456"
    let keyID = "KEY7654321"
    let topic = "com.example.notes"
    let token = String(repeating: "ab12", count: 16)
    let payload = Data(#"{"aps":{"alert":"New note"},"ck":{"sid":"s1"}}"#.utf8)

    private var expectation: APNsExpectation {
        APNsExpectation(publicKey: key.publicKey, teamID: teamID, keyID: keyID, topic: topic)
    }

    private func withSender<T>(
        baseURL: String, trusting caPEM: String?, timeout: Duration = .seconds(10), _ run: (APNsSender) async throws -> T) async throws -> T {
        let credentials = try APNsCredentials(
            teamID: teamID, keyID: keyID, privateKeyPEM: key.pemRepresentation, topic: topic,
            environment: APNsEnvironment(baseURL: baseURL))
        var configuration = APNsSenderConfiguration()
        configuration.trustedCertificatesPEM = caPEM.map { [$0] } ?? []
        configuration.timeout = timeout
        let sender = try APNsSender(credentials: credentials, configuration: configuration)
        do {
            let result = try await run(sender)
            try await sender.shutdown()
            return result
        } catch {
            try? await sender.shutdown()
            throw error
        }
    }

    /// Runs `run` against a fresh server answering with `reply`, and checks that no request broke APNs's rules.
    private func withServer<T>(
        reply: @escaping @Sendable (APNsReceivedRequest, Int) -> (status: Int, reason: String?),
        _ run: (APNsTestServer, APNsSender) async throws -> T
    ) async throws -> T {
        try await APNsTestServer.with(expecting: expectation, reply: reply) { server in
            let result = try await withSender(baseURL: server.baseURL, trusting: server.caPEM) { try await run(server, $0) }
            for request in server.requests { XCTAssertEqual(request.problems, [], "request \(request.path) breaks APNs's rules") }
            return result
        }
    }

    func testDeliveredOverHTTP2WithEveryHeaderAndAValidProviderToken() async throws {
        let id = UUID()
        let expiration = Date(timeIntervalSince1970: 1_900_000_000)
        let push = APNsPush(deviceToken: token.uppercased(), payload: payload, pushType: .alert, priority: .immediate,
                            collapseID: "zone-changes", expiration: expiration, apnsID: id)
        try await withServer(reply: { _, _ in (200, nil) }) { server, sender in
            let outcome = await sender.send(push)
            XCTAssertEqual(outcome, .delivered(apnsID: id))
            let request = try XCTUnwrap(server.requests.first)
            XCTAssertEqual(server.requests.count, 1)
            XCTAssertEqual(request.version, .http2, "APNs accepts HTTP/2 only")
            XCTAssertEqual(request.method, .POST)
            XCTAssertEqual(request.path, "/3/device/\(token)")
            XCTAssertEqual(request.headers["apns-push-type"], ["alert"])
            XCTAssertEqual(request.headers["apns-topic"], [topic])
            XCTAssertEqual(request.headers["apns-priority"], ["10"])
            XCTAssertEqual(request.headers["apns-expiration"], ["1900000000"])
            XCTAssertEqual(request.headers["apns-collapse-id"], ["zone-changes"])
            XCTAssertEqual(request.headers["apns-id"], [id.uuidString])
            XCTAssertEqual(request.headers["content-type"], ["application/json"])
            XCTAssertEqual(request.body, payload)
            XCTAssertEqual(request.jwtHeader, ["alg": "ES256", "kid": keyID])
            XCTAssertEqual(request.jwtClaims["iss"] as? String, teamID)
            let iat = try XCTUnwrap(request.jwtClaims["iat"] as? Int)
            XCTAssertLessThan(abs(Double(iat) - Date().timeIntervalSince1970), 60)
        }
    }

    func testBackgroundPushIsSentAtPriorityFiveWithoutCollapseIDAndExpirationZero() async throws {
        let push = APNsPush(deviceToken: token, payload: Data(#"{"aps":{"content-available":1}}"#.utf8), pushType: .background, priority: .immediate)
        try await withServer(reply: { _, _ in (200, nil) }) { server, sender in
            _ = await sender.send(push)
            let request = try XCTUnwrap(server.requests.first)
            XCTAssertEqual(request.headers["apns-push-type"], ["background"])
            XCTAssertEqual(request.headers["apns-priority"], ["5"])
            XCTAssertEqual(request.headers["apns-expiration"], ["0"])
            XCTAssertFalse(request.headers.contains(name: "apns-collapse-id"))
        }
    }

    func testOneProviderTokenIsReusedAcrossPushes() async throws {
        try await withServer(reply: { _, _ in (200, nil) }) { server, sender in
            for _ in 0..<3 { _ = await sender.send(APNsPush(deviceToken: token, payload: payload)) }
            let tokens = Set(server.requests.compactMap(\.authorization))
            XCTAssertEqual(server.requests.count, 3)
            XCTAssertEqual(tokens.count, 1)
        }
    }

    func testGoneIsUnregistered() async throws {
        try await withServer(reply: { _, _ in (410, "Unregistered") }) { _, sender in
            let outcome = await sender.send(APNsPush(deviceToken: token, payload: payload))
            XCTAssertEqual(outcome, .unregistered(reason: "HTTP 410 Unregistered"))
        }
    }

    func testBadDeviceTokenIsUnregistered() async throws {
        try await withServer(reply: { _, _ in (400, "BadDeviceToken") }) { _, sender in
            let outcome = await sender.send(APNsPush(deviceToken: token, payload: payload))
            XCTAssertEqual(outcome, .unregistered(reason: "HTTP 400 BadDeviceToken"))
        }
    }

    func testDeviceTokenNotForTopicIsUnregistered() async throws {
        try await withServer(reply: { _, _ in (400, "DeviceTokenNotForTopic") }) { _, sender in
            let outcome = await sender.send(APNsPush(deviceToken: token, payload: payload))
            XCTAssertEqual(outcome, .unregistered(reason: "HTTP 400 DeviceTokenNotForTopic"))
        }
    }

    func testExpiredProviderTokenIsRefreshedOnceAndTheSendRetriedInTheSameCall() async throws {
        try await withServer(reply: { _, index in index == 0 ? (403, "ExpiredProviderToken") : (200, nil) }) { server, sender in
            let push = APNsPush(deviceToken: token, payload: payload)
            let outcome = await sender.send(push)
            XCTAssertEqual(outcome, .delivered(apnsID: push.apnsID))
            let requests = server.requests
            XCTAssertEqual(requests.count, 2)
            XCTAssertNotEqual(requests[0].authorization, requests[1].authorization, "the second try must carry a new token")
            // The new token is kept for later pushes.
            _ = await sender.send(push)
            XCTAssertEqual(server.requests.last?.authorization, requests[1].authorization)
        }
    }

    func testProviderTokenRefusedTwiceIsRetriedLaterNotLooped() async throws {
        try await withServer(reply: { _, _ in (403, "InvalidProviderToken") }) { server, sender in
            let outcome = await sender.send(APNsPush(deviceToken: token, payload: payload))
            guard case .retry(let reason) = outcome else { return XCTFail("\(outcome)") }
            XCTAssertTrue(reason.contains("InvalidProviderToken"), reason)
            XCTAssertEqual(server.requests.count, 2)
        }
    }

    func testTooManyRequestsAndServerErrorsAreRetried() async throws {
        try await withServer(reply: { _, index in [(429, "TooManyRequests"), (500, "InternalServerError"), (503, "ServiceUnavailable")][index] }) { _, sender in
            var outcomes = [APNsOutcome]()
            for _ in 0..<3 { outcomes.append(await sender.send(APNsPush(deviceToken: token, payload: payload))) }
            XCTAssertEqual(outcomes, [
                .retry(reason: "HTTP 429 TooManyRequests"), .retry(reason: "HTTP 500 InternalServerError"),
                .retry(reason: "HTTP 503 ServiceUnavailable"),
            ])
        }
    }

    func testOtherClientErrorsAreRejected() async throws {
        try await withServer(reply: { _, _ in (400, "BadCollapseId") }) { _, sender in
            let outcome = await sender.send(APNsPush(deviceToken: token, payload: payload))
            XCTAssertEqual(outcome, .rejected(reason: "HTTP 400 BadCollapseId"))
        }
    }

    func testPayloadTooLargeIsRejectedBeforeSending() async throws {
        let large = Data(("{\"aps\":{\"alert\":\"" + String(repeating: "a", count: 4100) + "\"}}").utf8)
        let exact = Data(("{\"a\":\"" + String(repeating: "a", count: 4096 - 8) + "\"}").utf8)
        XCTAssertEqual(exact.count, 4096)
        try await withServer(reply: { _, _ in (200, nil) }) { server, sender in
            let outcome = await sender.send(APNsPush(deviceToken: token, payload: large))
            guard case .rejected(let reason) = outcome else { return XCTFail("\(outcome)") }
            XCTAssertTrue(reason.contains("4096"), reason)
            XCTAssertTrue(server.requests.isEmpty)
            let push = APNsPush(deviceToken: token, payload: exact)
            let sent = await sender.send(push)
            XCTAssertEqual(sent, .delivered(apnsID: push.apnsID))
        }
    }

    func testMalformedDeviceTokensAreUnregisteredBeforeSending() async throws {
        try await withServer(reply: { _, _ in (200, nil) }) { server, sender in
            for bad in [String(repeating: "a", count: 63), String(repeating: "a", count: 201), String(repeating: "g", count: 64), "", token + " "] {
                let outcome = await sender.send(APNsPush(deviceToken: bad, payload: payload))
                guard case .unregistered(let reason) = outcome else { XCTFail("\(bad): \(outcome)"); continue }
                XCTAssertTrue(reason.contains("hex"), reason)
            }
            XCTAssertTrue(server.requests.isEmpty)
            let longest = APNsPush(deviceToken: String(repeating: "f", count: 200), payload: payload)
            let sent = await sender.send(longest)
            XCTAssertEqual(sent, .delivered(apnsID: longest.apnsID))
        }
    }

    func testCollapseIDTooLongIsRejectedBeforeSending() async throws {
        try await withServer(reply: { _, _ in (200, nil) }) { server, sender in
            let outcome = await sender.send(APNsPush(deviceToken: token, payload: payload, collapseID: String(repeating: "c", count: 65)))
            guard case .rejected(let reason) = outcome else { return XCTFail("\(outcome)") }
            XCTAssertTrue(reason.contains("collapse id"), reason)
            XCTAssertTrue(server.requests.isEmpty)
            let push = APNsPush(deviceToken: token, payload: payload, collapseID: String(repeating: "c", count: 64))
            let sent = await sender.send(push)
            XCTAssertEqual(sent, .delivered(apnsID: push.apnsID))
        }
    }

    func testAServerTheSenderDoesNotTrustIsNotTalkedTo() async throws {
        try await APNsTestServer.with(expecting: expectation, reply: { _, _ in (200, nil) }) { server in
            // The client keeps trying to connect until the request's deadline, so that is kept short,
            // but long enough for a first handshake on a loaded machine: the unit tests run beside the
            // integration tier, and a deadline of one second once ran out before the first refusal.
            let outcome = try await withSender(baseURL: server.baseURL, trusting: nil, timeout: .seconds(4)) { await $0.send(APNsPush(deviceToken: token, payload: payload)) }
            guard case .retry(let reason) = outcome else { return XCTFail("\(outcome)") }
            XCTAssertTrue(reason.contains("network error"), reason)
            XCTAssertTrue(server.requests.isEmpty)
        }
    }

    func testAnAnswerOverHTTP1IsRefused() async throws {
        try await WebhookReceiver.with(reply: { _ in .answer(status: 200) }) { receiver in
            let outcome = try await withSender(baseURL: "http://127.0.0.1:\(receiver.port)", trusting: nil) {
                await $0.send(APNsPush(deviceToken: token, payload: payload))
            }
            guard case .retry(let reason) = outcome else { return XCTFail("\(outcome)") }
            XCTAssertTrue(reason.contains("HTTP/2 only"), reason)
        }
    }

    func testRefusedConnectionIsRetried() async throws {
        let port = try await WebhookReceiver.closedPort()
        let outcome = try await withSender(baseURL: "https://localhost:\(port)", trusting: nil, timeout: .seconds(1)) {
            await $0.send(APNsPush(deviceToken: token, payload: payload))
        }
        guard case .retry(let reason) = outcome else { return XCTFail("\(outcome)") }
        // The client tries to connect until the deadline: on a loaded machine the deadline may end
        // the tries before a refusal is reported (a fresh-clone run beside the integration tier).
        XCTAssertTrue(reason.contains("network error") || reason.contains("no answer from APNs within"), reason)
    }
}
