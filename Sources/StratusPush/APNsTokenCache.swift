import Foundation
import Synchronization

/// The current provider token, shared by every request of one sender. APNs refuses tokens older
/// than an hour and throttles providers that make new ones more often than every 20 minutes, so
/// a token is kept for `refreshAfter` (50 minutes) and replaced early only when APNs calls it expired.
final class APNsTokenCache: Sendable {
    private struct Current {
        var token: String
        var issuedAt: Date
    }

    private let credentials: APNsCredentials
    private let refreshAfter: Duration
    private let now: @Sendable () -> Date
    private let current = Mutex<Current?>(nil)

    init(credentials: APNsCredentials, refreshAfter: Duration = .seconds(50 * 60), now: @escaping @Sendable () -> Date = Date.init) {
        self.credentials = credentials
        self.refreshAfter = refreshAfter
        self.now = now
    }

    /// The cached token, or a new one when there is none or it is `refreshAfter` old.
    func token() throws -> String {
        try current.withLock { current in
            let now = now()
            if let cached = current, now.timeIntervalSince(cached.issuedAt) < refreshAfter / .seconds(1) {
                return cached.token
            }
            let token = try APNsProviderToken.make(
                teamID: credentials.teamID, keyID: credentials.keyID,
                issuedAt: Int64(now.timeIntervalSince1970), privateKey: credentials.signingKey())
            current = Current(token: token, issuedAt: now)
            return token
        }
    }

    /// Forgets `token` if it is still the cached one, so the next `token()` makes a new one.
    /// Requests that failed with the same token together cause one refresh, not one each.
    func invalidate(_ token: String) {
        current.withLock { current in
            if current?.token == token { current = nil }
        }
    }
}
