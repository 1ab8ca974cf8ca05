import Foundation
import StratusCore

/// How many failed sign-ins are allowed, per login and per client address.
public struct SignInLimits: Sendable {
    /// `STRATUS_SIGNIN_LOGIN_FAILURES`: failed sign-ins per login (per container) in `window`; 0: no limit.
    public var perLogin: Int = 10
    /// `STRATUS_SIGNIN_ADDRESS_FAILURES`: failed sign-ins per client address in `window`; 0: no limit.
    public var perAddress: Int = 50
    /// `STRATUS_SIGNIN_WINDOW_SECONDS`: the window the counts refill over.
    public var window: Duration = .seconds(15 * 60)
    /// The most logins and addresses a process keeps counts for (each).
    public var maxBuckets: Int = 100_000

    /// The defaults: 10 failures per login and 50 per address every 15 minutes.
    public init() {}
}

/// Throttles sign-in attempts: each attempt takes a token from its login's bucket and its client
/// address's; a successful one gives them back. A bucket holds the limit and refills at limit per
/// window, so after a burst of failures one more attempt is allowed every window/limit.
///
/// While a bucket is empty every attempt — with a right password too — is refused with THROTTLED
/// and `retryAfter` before the password is checked, and the answer is the same whether or not the
/// login exists. Counts live in this process only (each `stratus-api` counts on its own).
final class SignInLimiter: Sendable {
    let logins: KeyedBuckets?
    let addresses: KeyedBuckets?

    init(_ limits: SignInLimits) {
        func buckets(_ limit: Int) -> KeyedBuckets? {
            guard limit > 0, limits.window > .zero else { return nil }
            return KeyedBuckets(rate: TokenRate(perSecond: Double(limit) / limits.window.asSeconds, burst: Double(limit)), capacity: limits.maxBuckets)
        }
        logins = buckets(limits.perLogin)
        addresses = buckets(limits.perAddress)
    }

    /// An attempt under way: tell it when it succeeds, so that it does not count as a failure.
    struct Attempt: Sendable {
        let limiter: SignInLimiter
        /// Nil for an attempt counted per address only.
        let loginKey: String?
        let addressKey: String

        /// The attempt succeeded: the login starts afresh, and the address gets its token back.
        func succeeded() {
            if let loginKey { limiter.logins?.reset(loginKey) }
            limiter.addresses?.giveBack(addressKey)
        }
    }

    /// Starts an attempt, or throws THROTTLED when the login or the address has no attempt left.
    /// `login` nil counts the attempt per address only (an ID token, whose account is not known
    /// until it is verified: counting per claimed account would let anyone lock another out).
    /// `address` is the client's IP address (nil when the connection has none: then every such
    /// client shares one count).
    func begin(container: String, login: String?, address: String?, now: ContinuousClock.Instant = .now) throws(StratusError) -> Attempt {
        // The directory matches logins trimmed; capitals are folded here too, so variants of one
        // login share its count.
        let loginKey = login.map { container + "\u{0}" + $0.trimmingCharacters(in: .whitespacesAndNewlines).lowercased() }
        let logins = loginKey == nil ? nil : self.logins
        let addressKey = address ?? "unknown"
        // Checked before any token is taken: a refused attempt uses up nothing.
        var wait = 0
        if let logins, let loginKey, case .limited(let retryAfter) = logins.check(loginKey, now: now) { wait = max(wait, retryAfter) }
        if let addresses, case .limited(let retryAfter) = addresses.check(addressKey, now: now) { wait = max(wait, retryAfter) }
        if wait == 0 {
            if let logins, let loginKey, case .limited(let retryAfter) = logins.take(loginKey, now: now) {
                wait = retryAfter
            } else if let addresses, case .limited(let retryAfter) = addresses.take(addressKey, now: now) {
                if let loginKey { logins?.giveBack(loginKey, now: now) }
                wait = retryAfter
            }
        }
        guard wait == 0 else {
            throw StratusError(.throttled, "Too many failed sign-ins; retry after \(wait) s", retryAfter: wait)
        }
        return Attempt(limiter: self, loginKey: loginKey, addressKey: addressKey)
    }
}
