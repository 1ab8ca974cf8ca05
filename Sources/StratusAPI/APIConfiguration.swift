import Foundation
import StratusCore
import StratusIdentity

/// Request limits, with CloudKit's published values as defaults.
public struct APILimits: Sendable {
    /// Operations per request.
    public var maxOperations: Int = 200
    /// Bytes per request body.
    public var maxRequestBytes: Int = 10 * 1024 * 1024
    /// Bytes of one record's fields.
    public var maxRecordBytes: Int = 1_000_000
    /// Bytes of the event message one record write becomes: below the broker's message limit
    /// (librdkafka's `message.max.bytes`, 1,000,000 by default), so an accepted write is always delivered.
    public var maxEventBytes: Int = 950_000
    /// Changes (records or zones) per sync response; a client's `resultsLimit` is capped by it.
    public var maxResults: Int = 200
    /// Bytes of record fields in one sync response (`records/changes`, all zones of `changes/zone`
    /// together): a page ends before the record that would pass it, with `moreComing`.
    public var maxResponseBytes: Int = 10 * 1024 * 1024
    /// Entries of a name list: `desiredKeys` and `desiredRecordTypes`.
    public var maxNames: Int = 1_000
    /// Subscriptions one user may keep in one database.
    public var maxSubscriptionsPerUser: Int = 1_000
    /// Web courier tokens and APNs device tokens kept per user (the least recently used go first).
    public var maxPushTokensPerUser: Int = 20
    /// The longest a web courier long poll waits for a notification.
    public var maxCourierWait: Duration = .seconds(60)
    /// What one `records/query` may ask for: filters, sorts, list values, search tokens and text.
    public var query = RecordQuery.Limits()
    /// `STRATUS_USER_QUOTA_BYTES`: bytes of records (their fields as stored) each user may keep per
    /// container and environment; 0: no quota.
    public var userQuotaBytes: Int64 = 0

    /// The defaults.
    public init() {}
}

/// Everything the HTTP API needs to know.
public struct APIConfiguration: Sendable {
    /// The address the API listens on unless configured otherwise.
    public static let defaultHost = "127.0.0.1"
    /// The address to listen on.
    public var host: String = defaultHost
    /// The port to listen on.
    public var port: Int = 8080
    /// Request limits.
    public var limits = APILimits()
    /// Request rates per user and per container (off by default).
    public var rateLimits = RateLimits()
    /// Failed sign-ins per login and per client address.
    public var signInLimits = SignInLimits()
    /// `STRATUS_METRICS_CONTAINERS`: how many containers `/metrics` names in its per-container
    /// usage (`ContainerMetrics`); 0: none (the default).
    public var containerMetrics = 0
    /// `STRATUS_METRICS_CONTAINERS_SECONDS`: how often the containers' usage is read for `/metrics`.
    public var containerMetricsInterval: Duration = .seconds(60)
    /// Whether each request gets a trace span (`RequestTracingMiddleware`): on when the process
    /// exports traces (`OTEL_TRACES_EXPORTER`, docs/configuration.md); off, no middleware is added.
    public var tracing = false
    /// How long a connection may stay idle (no request in progress, nothing received) before the
    /// server closes it; nil keeps idle connections open for ever.
    public var idleTimeout: Duration? = .seconds(60)
    /// The key web auth tokens are signed with.
    public var secretKey: SecretKey
    /// Where AUTHENTICATION_REQUIRED sends a client to sign in (`{container}` is replaced); nil for
    /// the hosted sign-in page `/auth/1/{container}/signin/page` under `publicURL`.
    public var signInURL: String?
    /// `STRATUS_PUBLIC_URL`: where clients reach this server (`https://host[:port]`, no path), the
    /// base of absolute addresses it hands out (the sign-in page, the links in email messages);
    /// nil: the request's own `Host`.
    public var publicURL: String?
    /// Email sign-up, verification and password reset.
    public var email = EmailSettings()
    /// The share URL a share record answers (`{container}` and `{shortGUID}` are replaced); nil for
    /// the API's own address followed by `/share/{container}/{shortGUID}`.
    public var shareURL: String?
    /// Seconds a web auth token from the sign-in endpoint stays valid.
    public var webAuthTokenLifetime: Int64 = 7 * 86_400
    /// `STRATUS_ACCOUNT_DELETION_SIGNIN_SECONDS`: how recent a user's sign-in must be for them to
    /// delete their own account (`POST /auth/1/{container}/account/delete`).
    public var accountDeletionSignIn: Int64 = UserDeletion.defaultRecentSignIn
    /// `STRATUS_AUTH_CACHE_MS`: how long the application remembers what an API token gives access
    /// to (`AccessCache`); a change ends it at once when its notification is heard, in any case
    /// after this long. Zero: every call reads the database.
    public var authCacheTTL: Duration = .seconds(1)
    /// `STRATUS_SYNC_READ_AHEAD_PAGES`: how many next pages of forward syncs the application reads
    /// ahead at once (`SyncReadAhead`: a page is served only if the zone has not changed since).
    /// Zero: none.
    public var syncReadAheadPages = 64
    /// How issuers' key sets are fetched for ID-token sign-in (`STRATUS_JWKS_*`).
    public var keySets = KeySetSettings()
    /// Asset limits and URL lifetimes.
    public var assets = AssetSettings()
    /// The web console under `/console`.
    public var console = ConsoleSettings()

    /// Creates a configuration.
    public init(secretKey: SecretKey) { self.secretKey = secretKey }
}

/// The web console's settings (`STRATUS_CONSOLE*`).
public struct ConsoleSettings: Sendable {
    /// `STRATUS_CONSOLE`: whether `/console` is served at all.
    public var enabled = true
    /// `STRATUS_CONSOLE_SESSION_SECONDS`: how long a sign-in lasts.
    public var sessionLifetime: Duration = .seconds(8 * 3600)
    /// `STRATUS_CONSOLE_SECURE_COOKIES`: cookies marked `Secure` (the console is reached over TLS,
    /// e.g. through a proxy). A request a proxy marks `X-Forwarded-Proto: https` gets them anyway.
    public var secureCookies = false
    /// The workers whose progress the operations page shows (their checkpoint names) and which it
    /// may replay: the names of the worker definitions, which the runtime sets (none by default:
    /// StratusWorkers, where the workers are defined, is not a dependency of this layer).
    public var workers: [String] = []

    /// The defaults: served, 8-hour sessions, cookies not marked `Secure`.
    public init() {}
}

/// A named readiness check: throws when the dependency is unreachable.
public struct ReadinessCheck: Sendable {
    /// What is checked, e.g. `database`.
    public var name: String
    /// The check.
    public var check: @Sendable () async throws -> Void

    /// Creates a check.
    public init(name: String, check: @escaping @Sendable () async throws -> Void) {
        self.name = name
        self.check = check
    }
}

/// Email sign-up's settings: how long its tokens last (`STRATUS_EMAIL_*_TTL_SECONDS`). Whether a
/// container lets users sign up is the container's own setting (`stratus container set --sign-up`);
/// where messages go is `APIDependencies.email`.
public struct EmailSettings: Sendable {
    public var lifetimes = EmailTokenLifetimes()

    public init() {}
}
