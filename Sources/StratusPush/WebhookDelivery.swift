import Foundation

/// One webhook request to make: where, what, signed with which secret, and which attempt it is.
public struct WebhookDelivery: Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The receiver's endpoint, checked by `WebhookURLPolicy` before every request.
    public var url: String
    /// The per-webhook signing secret; never logged, never part of a reason or a description.
    public var secret: Data
    /// The JSON body, sent and signed byte for byte.
    public var body: Data
    /// Stable across attempts of one delivery ("<eventID>-<subscriptionID>"), so receivers can drop repeats.
    public var idempotencyKey: String
    /// 1 for the first try, counting up with each retry.
    public var attempt: Int
    /// The whole request, from connecting to the last byte of the response.
    public var timeout: Duration

    /// Creates a delivery.
    public init(url: String, secret: Data, body: Data, idempotencyKey: String, attempt: Int, timeout: Duration = .seconds(10)) {
        self.url = url
        self.secret = secret
        self.body = body
        self.idempotencyKey = idempotencyKey
        self.attempt = attempt
        self.timeout = timeout
    }

    // Deliveries end up in log lines and error messages: the secret must not go with them.
    /// The delivery without its secret or body.
    public var description: String {
        "WebhookDelivery(url: \(url), idempotencyKey: \(idempotencyKey), attempt: \(attempt), body: \(body.count) bytes, secret: <redacted>)"
    }

    /// The same as `description`: the secret stays out of debug output too.
    public var debugDescription: String { description }
}
