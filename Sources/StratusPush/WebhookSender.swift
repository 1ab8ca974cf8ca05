import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// Settings of a `WebhookSender`.
public struct WebhookSenderConfiguration: Sendable {
    /// Allow plain http to loopback hosts (tests and local stacks only).
    public var allowInsecureLoopback: Bool = false
    /// The longest `Retry-After` honoured; longer ones are cut to this.
    public var maximumRetryAfter: Duration = .seconds(3600)
    /// How long connecting may take, within each delivery's own timeout.
    public var connectTimeout: Duration = .seconds(10)

    /// Creates the default configuration.
    public init() {}
}

/// Sends signed webhook requests over one shared HTTP client and classifies the answers as
/// delivered, retry or rejected. Call `shutdown()` once when done.
public final class WebhookSender: Sendable {
    /// The `User-Agent` every request carries.
    public static let userAgent = "Stratus-Webhooks/1"

    private let client: HTTPClient
    private let configuration: WebhookSenderConfiguration
    private let logger: Logger

    /// Creates a sender with its own HTTP client (redirects never followed).
    public init(configuration: WebhookSenderConfiguration = .init(), logger: Logger = Logger(label: "stratus.push.webhook")) {
        var http = HTTPClient.Configuration(
            redirectConfiguration: .disallow,
            timeout: .init(connect: TimeAmount(configuration.connectTimeout)))
        http.decompression = .disabled
        // A receiver that refuses connections fails the attempt at once: the delivery loop's
        // backoff retries it, and a dead receiver should not hold a delivery for its whole timeout.
        http.connectionPool.retryConnectionEstablishment = false
        // No client spans: they would record the receiver's whole URL, which may carry its token
        // (the dispatcher's delivery span names the notification instead).
        http.tracing.tracer = nil
        self.client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: http, backgroundActivityLogger: logger)
        self.configuration = configuration
        self.logger = logger
    }

    /// Closes the HTTP client's connections; the sender is unusable afterwards.
    public func shutdown() async throws {
        try await client.shutdown()
    }

    /// Makes one attempt at `delivery` and says what became of it. Never throws: every failure is
    /// an outcome.
    public func deliver(_ delivery: WebhookDelivery) async -> WebhookOutcome {
        let outcome = await attempt(delivery)
        var metadata: Logger.Metadata = ["webhook.idempotency_key": "\(delivery.idempotencyKey)", "webhook.attempt": "\(delivery.attempt)"]
        switch outcome {
        case .delivered(let status): metadata["webhook.status"] = "\(status)"
        case .retry(let reason, _), .rejected(let reason): metadata["webhook.reason"] = "\(reason)"
        }
        logger.debug("webhook attempt finished", metadata: metadata)
        return outcome
    }

    private func attempt(_ delivery: WebhookDelivery) async -> WebhookOutcome {
        let url: URL
        do {
            url = try WebhookURLPolicy.check(delivery.url, allowInsecureLoopback: configuration.allowInsecureLoopback)
        } catch {
            return .rejected(reason: "the endpoint is refused: \(error.message)")
        }
        let timestamp = Int64(Date().timeIntervalSince1970)
        var request = HTTPClientRequest(url: url.absoluteString)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "User-Agent", value: Self.userAgent)
        request.headers.add(name: "X-Stratus-Idempotency-Key", value: delivery.idempotencyKey)
        request.headers.add(name: "X-Stratus-Delivery-Attempt", value: String(delivery.attempt))
        request.headers.add(name: "X-Stratus-Timestamp", value: String(timestamp))
        request.headers.add(
            name: "X-Stratus-Signature",
            value: WebhookSignature.sign(body: delivery.body, timestamp: timestamp, secret: delivery.secret))
        request.body = .bytes(ByteBuffer(bytes: delivery.body))

        let response: HTTPClientResponse
        do {
            response = try await client.execute(request, timeout: TimeAmount(delivery.timeout), logger: logger)
        } catch let error as HTTPClientError where error == .deadlineExceeded || error == .readTimeout || error == .connectTimeout {
            return .retry(reason: "no answer within \(delivery.timeout) (\(error))", retryAfter: nil)
        } catch {
            return .retry(reason: "network error: \(error)", retryAfter: nil)
        }
        let status = Int(response.status.code)
        if (200..<300).contains(status) {
            // The body is not needed, but reading a little lets a short answer free its connection for reuse.
            _ = await BoundedBody.read(response.body)
            return .delivered(status: status)
        }
        let excerpt = BoundedBody.excerpt(await BoundedBody.read(response.body))
        let described = "HTTP \(status)" + (excerpt.isEmpty ? "" : ": \(excerpt)")
        switch status {
        case 408, 429, 500..<600:
            let retryAfter = RetryAfter.parse(response.headers.first(name: "Retry-After"), maximum: configuration.maximumRetryAfter)
            return .retry(reason: described, retryAfter: retryAfter)
        case 300..<400:
            return .rejected(reason: "\(described) (redirects are not followed; register the final URL)")
        default:
            return .rejected(reason: described)
        }
    }
}

/// The `Retry-After` header in its delay-seconds form.
enum RetryAfter {
    /// The delay `value` asks for, at most `maximum`; nil when absent or not a number of seconds
    /// (the HTTP-date form is not honoured: clocks disagree, and the backoff covers it).
    static func parse(_ value: String?, maximum: Duration) -> Duration? {
        guard let value, let seconds = UInt64(value.trimmingCharacters(in: .whitespaces)) else { return nil }
        let requested = Duration.seconds(min(seconds, 1_000_000_000))
        return min(requested, maximum)
    }
}
