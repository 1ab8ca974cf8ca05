/// What became of one webhook request, in the three classes the delivery loop acts on.
public enum WebhookOutcome: Sendable, Equatable {
    /// The receiver answered 2xx.
    case delivered(status: Int)
    /// Worth trying again: a network error, a timeout, 408, 429 or 5xx; `retryAfter` is the
    /// receiver's bounded `Retry-After`, when it gave one.
    case retry(reason: String, retryAfter: Duration?)
    /// Trying again cannot help: another 4xx, a redirect (never followed), or a URL the policy refuses.
    case rejected(reason: String)
}
