import Synchronization

/// The web auth tokens a process has opened, by their text, so that a busy API process does not
/// check the same token's MAC and decode its JSON for every request (about a twelfth of the API's
/// CPU for a one-record `records/lookup`).
///
/// A token's text is signed: the same text opens to the same value for as long as the secret key
/// is the same, which for one of these is its whole life. What is kept is only what
/// `WebAuthToken.open` answered; whether the token is still good (its container, its expiry, the
/// user's credential epoch) is decided on every request by `WebAuthToken.check`, as before.
///
/// Only tokens that opened are kept (nobody without the server's key can make one), at most
/// `capacity`; a token that would go past it empties the cache first.
public final class OpenedWebAuthTokens: Sendable {
    /// The most tokens kept.
    public let capacity: Int
    private let key: SecretKey
    private let tokens = Mutex<[String: WebAuthToken]>([:])

    /// An empty cache of tokens opened with `key`.
    public init(key: SecretKey, capacity: Int = 10_000) {
        self.key = key
        self.capacity = max(1, capacity)
    }

    /// `WebAuthToken.open(text, key:)`, answered from the cache when this text opened before.
    public func open(_ text: String) -> WebAuthToken? {
        if let token = tokens.withLock({ $0[text] }) { return token }
        guard let token = WebAuthToken.open(text, key: key) else { return nil }
        tokens.withLock { tokens in
            if tokens.count >= capacity { tokens.removeAll(keepingCapacity: true) }
            tokens[text] = token
        }
        return token
    }

    /// How many tokens are kept.
    public var count: Int { tokens.withLock { $0.count } }
}
