import Foundation
import StratusPush
import StratusPushTestSupport
import XCTest

/// The webhook sender against a real HTTP/1.1 receiver on a loopback port (`WebhookReceiver`).
final class WebhookSenderTests: XCTestCase {
    static let secret = Data("whsec-0123456789-do-not-leak".utf8)
    static let secretText = "whsec-0123456789-do-not-leak"
    let body = Data(#"{"subscriptionID":"s1","recordName":"r1","reason":"recordUpdated"}"#.utf8)

    private func withSender<T>(
        _ configure: (inout WebhookSenderConfiguration) -> Void = { _ in },
        _ run: (WebhookSender) async throws -> T
    ) async throws -> T {
        var configuration = WebhookSenderConfiguration()
        configuration.allowInsecureLoopback = true
        configure(&configuration)
        let sender = WebhookSender(configuration: configuration)
        do {
            let result = try await run(sender)
            try await sender.shutdown()
            return result
        } catch {
            try? await sender.shutdown()
            throw error
        }
    }

    private func delivery(_ url: String, attempt: Int = 1, timeout: Duration = .seconds(5)) -> WebhookDelivery {
        WebhookDelivery(url: url, secret: Self.secret, body: body, idempotencyKey: "event-7-sub-3", attempt: attempt, timeout: timeout)
    }

    private func assertNoSecret(_ outcome: WebhookOutcome, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertFalse("\(outcome)".contains(Self.secretText), "the secret leaked: \(outcome)", file: file, line: line)
    }

    func testDeliveredRequestCarriesTheHeadersAndAVerifiableSignature() async throws {
        try await WebhookReceiver.with(reply: { _ in .answer(status: 200) }) { receiver in
            let before = Int64(Date().timeIntervalSince1970)
            let outcome = try await withSender { await $0.deliver(delivery(receiver.url("/hooks/stratus"), attempt: 3)) }
            let after = Int64(Date().timeIntervalSince1970)
            XCTAssertEqual(outcome, .delivered(status: 200))
            let requests = receiver.requests
            XCTAssertEqual(requests.count, 1)
            let request = try XCTUnwrap(requests.first)
            XCTAssertEqual(request.method, .POST)
            XCTAssertEqual(request.uri, "/hooks/stratus")
            XCTAssertEqual(request.body, body)
            XCTAssertEqual(request.headers["Content-Type"], ["application/json"])
            XCTAssertEqual(request.headers["User-Agent"], ["Stratus-Webhooks/1"])
            XCTAssertEqual(request.headers["X-Stratus-Idempotency-Key"], ["event-7-sub-3"])
            XCTAssertEqual(request.headers["X-Stratus-Delivery-Attempt"], ["3"])
            let timestamp = try XCTUnwrap(request.headers.first(name: "X-Stratus-Timestamp").flatMap { Int64($0) })
            XCTAssertTrue((before...after).contains(timestamp), "timestamp \(timestamp) not in \(before)...\(after)")
            let signature = try XCTUnwrap(request.headers.first(name: "X-Stratus-Signature"))
            XCTAssertTrue(signature.hasPrefix("v1="))
            XCTAssertEqual(signature.dropFirst(3).count, 64)
            XCTAssertEqual(String(signature.dropFirst(3)), signature.dropFirst(3).lowercased())
            XCTAssertTrue(WebhookSignature.verify(body: request.body, timestamp: timestamp, secret: Self.secret, signature: signature))
            XCTAssertFalse(WebhookSignature.verify(body: request.body, timestamp: timestamp, secret: Data("wrong".utf8), signature: signature))
            XCTAssertFalse(request.headers.contains { $0.value.contains(Self.secretText) }, "the secret was sent")
        }
    }

    func testAny2xxIsDelivered() async throws {
        try await WebhookReceiver.with(reply: { _ in .answer(status: 204) }) { receiver in
            let outcome = try await withSender { await $0.deliver(delivery(receiver.url())) }
            XCTAssertEqual(outcome, .delivered(status: 204))
        }
    }

    func testServerErrorIsRetried() async throws {
        try await WebhookReceiver.with(reply: { _ in .answer(status: 500, body: "database down") }) { receiver in
            let outcome = try await withSender { await $0.deliver(delivery(receiver.url())) }
            guard case .retry(let reason, let retryAfter) = outcome else { return XCTFail("\(outcome)") }
            XCTAssertTrue(reason.contains("500") && reason.contains("database down"), reason)
            XCTAssertNil(retryAfter)
            assertNoSecret(outcome)
        }
    }

    func testRequestTimeoutStatusIsRetried() async throws {
        try await WebhookReceiver.with(reply: { _ in .answer(status: 408) }) { receiver in
            let outcome = try await withSender { await $0.deliver(delivery(receiver.url())) }
            guard case .retry(let reason, _) = outcome else { return XCTFail("\(outcome)") }
            XCTAssertTrue(reason.contains("408"), reason)
        }
    }

    func testTooManyRequestsHonoursRetryAfterWithinTheBound() async throws {
        try await WebhookReceiver.with(reply: { request in
            .answer(status: 429, headers: [("Retry-After", request.uri == "/long" ? "86400" : "7")])
        }) { receiver in
            let (short, long) = try await withSender({ $0.maximumRetryAfter = .seconds(600) }) { sender in
                (await sender.deliver(delivery(receiver.url("/short"))), await sender.deliver(delivery(receiver.url("/long"))))
            }
            guard case .retry(let reason, let retryAfter) = short else { return XCTFail("\(short)") }
            XCTAssertTrue(reason.contains("429"), reason)
            XCTAssertEqual(retryAfter, .seconds(7))
            guard case .retry(_, let bounded) = long else { return XCTFail("\(long)") }
            XCTAssertEqual(bounded, .seconds(600))
        }
    }

    func testRetryAfterThatIsNotSecondsIsIgnored() async throws {
        try await WebhookReceiver.with(reply: { _ in .answer(status: 503, headers: [("Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT")]) }) { receiver in
            let outcome = try await withSender { await $0.deliver(delivery(receiver.url())) }
            XCTAssertEqual(outcome, .retry(reason: "HTTP 503", retryAfter: nil))
        }
    }

    func testClientErrorIsRejected() async throws {
        try await WebhookReceiver.with(reply: { _ in .answer(status: 404, body: "no such hook") }) { receiver in
            let outcome = try await withSender { await $0.deliver(delivery(receiver.url())) }
            guard case .rejected(let reason) = outcome else { return XCTFail("\(outcome)") }
            XCTAssertTrue(reason.contains("404"), reason)
            assertNoSecret(outcome)
        }
    }

    func testRedirectIsRejectedAndNotFollowed() async throws {
        try await WebhookReceiver.with(reply: { request in
            request.uri == "/moved" ? .answer(status: 302, headers: [("Location", "/elsewhere")]) : .answer(status: 200)
        }) { receiver in
            let outcome = try await withSender { await $0.deliver(delivery(receiver.url("/moved"))) }
            guard case .rejected(let reason) = outcome else { return XCTFail("\(outcome)") }
            XCTAssertTrue(reason.contains("302"), reason)
            XCTAssertEqual(receiver.requests.map(\.uri), ["/moved"])
        }
    }

    func testRefusedConnectionIsRetried() async throws {
        let port = try await WebhookReceiver.closedPort()
        let outcome = try await withSender { await $0.deliver(delivery("http://127.0.0.1:\(port)/hook")) }
        guard case .retry(let reason, nil) = outcome else { return XCTFail("\(outcome)") }
        XCTAssertTrue(reason.contains("network error"), reason)
        assertNoSecret(outcome)
    }

    func testReceiverThatNeverAnswersTimesOutAndIsRetried() async throws {
        try await WebhookReceiver.with(reply: { _ in .never }) { receiver in
            let clock = ContinuousClock()
            let start = clock.now
            let outcome = try await withSender { await $0.deliver(delivery(receiver.url(), timeout: .milliseconds(500))) }
            let elapsed = clock.now - start
            guard case .retry(let reason, nil) = outcome else { return XCTFail("\(outcome)") }
            XCTAssertTrue(reason.contains("no answer"), reason)
            XCTAssertGreaterThanOrEqual(elapsed, .milliseconds(450))
            XCTAssertLessThan(elapsed, .seconds(5))
            XCTAssertEqual(receiver.requests.count, 1)
        }
    }

    func testLargeResponseBodiesAreCutInTheReason() async throws {
        let huge = String(repeating: "x", count: 200_000)
        try await WebhookReceiver.with(reply: { _ in .answer(status: 400, body: huge) }) { receiver in
            let outcome = try await withSender { await $0.deliver(delivery(receiver.url())) }
            guard case .rejected(let reason) = outcome else { return XCTFail("\(outcome)") }
            XCTAssertTrue(reason.hasPrefix("HTTP 400: xxx"), reason)
            XCTAssertLessThan(reason.count, 300)
        }
    }

    func testURLsThePolicyRefusesAreRejectedWithoutARequest() async throws {
        try await WebhookReceiver.with(reply: { _ in .answer(status: 200) }) { receiver in
            let (insecure, userInfo) = try await withSender({ $0.allowInsecureLoopback = false }) { sender in
                (await sender.deliver(delivery(receiver.url())),
                 await sender.deliver(delivery("https://user:\(Self.secretText)@127.0.0.1:\(receiver.port)/hook")))
            }
            guard case .rejected(let reason) = insecure else { return XCTFail("\(insecure)") }
            XCTAssertTrue(reason.contains("https"), reason)
            guard case .rejected = userInfo else { return XCTFail("\(userInfo)") }
            assertNoSecret(userInfo)
            XCTAssertTrue(receiver.requests.isEmpty)
        }
    }

    func testDescriptionsLeaveTheSecretOut() {
        let delivery = delivery("https://hooks.example.com/a")
        XCTAssertFalse("\(delivery)".contains(Self.secretText))
        XCTAssertFalse(String(reflecting: delivery).contains(Self.secretText))
    }
}
