import Foundation
import Hummingbird
import HummingbirdWebSocket
import Logging
import NIOCore
import ServiceLifecycle
import StratusBlobStore
import StratusCore
import StratusIdentity
import StratusPostgres
import StratusPush

/// The API's collaborators, built by the runtime and by tests alike.
public struct APIDependencies: Sendable {
    /// The database.
    public var store: PostgresStore
    /// Checks `/ready` runs.
    public var readiness: [ReadinessCheck]
    /// Renders the process's metrics in Prometheus text format for `/metrics`.
    public var metrics: @Sendable () -> String
    /// Wakes web couriers when notifications are logged (a service of the application).
    public var hub: NotificationHub
    /// Where asset bytes live.
    public var blobs: any BlobStore
    /// Starts reindex and replay runs for the console's operations page; nil: the page cannot start them.
    public var maintenance: MaintenanceLauncher?
    /// Owns the work the API starts off its requests (sync pages read ahead), as a service of the
    /// application; nil: no such work (nothing is read ahead).
    public var tasks: TaskOwner?
    /// Where email messages (sign-up, password reset) go; nil: none is sent, and those requests
    /// are refused.
    public var email: (any EmailSending)?
    /// Usage per container as metrics (`STRATUS_METRICS_CONTAINERS`); nil: not exported.
    public var containerMetrics: ContainerMetrics? = nil

    /// Creates the dependencies; without a blob store, assets go to a fresh folder under the
    /// temporary directory (tests that do not look at assets).
    public init(
        store: PostgresStore, readiness: [ReadinessCheck], metrics: @escaping @Sendable () -> String, hub: NotificationHub? = nil,
        blobs: (any BlobStore)? = nil, maintenance: MaintenanceLauncher? = nil, tasks: TaskOwner? = nil, email: (any EmailSending)? = nil
    ) {
        self.store = store
        self.email = email
        self.maintenance = maintenance
        self.tasks = tasks
        self.blobs = blobs ?? FileSystemBlobStore(directory: FileManager.default.temporaryDirectory.appendingPathComponent("stratus-assets-\(UUID().uuidString)").path)
        self.readiness = readiness
        self.metrics = metrics
        self.hub = hub ?? NotificationHub(store: store, logger: Logger(label: "stratus-api.notifications"))
    }
}

/// Builds the router: operations endpoints and the CloudKit Web Services routes. `accessCache`:
/// recent answers about API tokens, kept true by an `AccessChangeListener` that runs beside the
/// router (`buildApplication` runs one); nil: every call reads the database.
public func buildRouter(_ dependencies: APIDependencies, configuration: APIConfiguration, accessCache: AccessCache? = nil) -> Router<APIRequestContext> {
    let router = Router(context: APIRequestContext.self)
    let recentErrors = RecentErrors()
    router.add(middleware: RequestIDMiddleware())
    if configuration.tracing { router.add(middleware: RequestTracingMiddleware()) }
    if configuration.console.enabled { router.add(middleware: RecentErrorsMiddleware(recent: recentErrors)) }
    router.add(middleware: RequestLogMiddleware())
    router.add(middleware: MetricsMiddleware())
    let containers = ContainerStore(store: dependencies.store)
    // Outside the error middleware, so errors carry the CORS headers too.
    router.add(middleware: CrossOriginMiddleware(origins: ContainerOrigins(containers: containers)))
    router.add(middleware: CloudKitErrorMiddleware())
    OperationsRoutes<APIRequestContext>(dependencies: dependencies).register(on: router)
    let authenticator = Authenticator(
        containers: containers, serverKeys: ServerKeyStore(store: dependencies.store), secretKey: configuration.secretKey,
        signInURL: configuration.signInURL, publicURL: configuration.publicURL, limiter: RequestLimiter(
            configuration.rateLimits,
            shared: SharedRequestLimiter(buckets: RequestBuckets(store: dependencies.store), capacity: configuration.rateLimits.maxBuckets)),
        accessCache: accessCache, requestMetrics: dependencies.containerMetrics,
        webAuthTokens: OpenedWebAuthTokens(key: configuration.secretKey))
    let signInLimiter = SignInLimiter(configuration.signInLimits)
    let sessions = SessionStore(store: dependencies.store)
    AuthRoutes<APIRequestContext>(
        users: UserStore(store: dependencies.store), sessions: sessions, containers: containers, authenticator: authenticator,
        limits: configuration.limits, tokenLifetime: configuration.webAuthTokenLifetime, signInLimiter: signInLimiter
    ).register(on: router)
    let issuerKeys = IssuerKeys(settings: configuration.keySets)
    ProviderSignInRoutes<APIRequestContext>(
        identities: IdentityStore(store: dependencies.store), containers: containers, authenticator: authenticator, issuerKeys: issuerKeys,
        signInLimiter: signInLimiter, tokenLifetime: configuration.webAuthTokenLifetime, publicURL: configuration.publicURL
    ).register(on: router)
    IdentityRoutes<APIRequestContext>(
        identities: IdentityStore(store: dependencies.store), sessions: sessions, containers: containers, authenticator: authenticator,
        issuerKeys: issuerKeys, tokenLifetime: configuration.webAuthTokenLifetime, signInLimiter: signInLimiter,
        deletions: UserDeletionStore(store: dependencies.store), deletionSignIn: configuration.accountDeletionSignIn,
        exports: ArchiveExport(store: dependencies.store, blobs: dependencies.blobs)
    ).register(on: router)
    EmailRoutes<APIRequestContext>(
        store: EmailSignUpStore(store: dependencies.store), containers: containers, authenticator: authenticator, signInLimiter: signInLimiter,
        tokenLifetime: configuration.webAuthTokenLifetime, lifetimes: configuration.email.lifetimes, courier: dependencies.email, tasks: dependencies.tasks,
        publicURL: configuration.publicURL
    ).register(on: router)
    SignInPage<APIRequestContext>(
        signUps: EmailSignUpStore(store: dependencies.store), identities: IdentityStore(store: dependencies.store), authenticator: authenticator,
        sendsEmail: dependencies.email != nil
    ).register(on: router)
    if configuration.console.enabled {
        ConsoleRoutes<APIRequestContext>(
            operators: OperatorStore(store: dependencies.store), settings: configuration.console, signInLimiter: signInLimiter,
            data: ConsoleData(
                store: dependencies.store, limits: configuration.limits, secretKey: configuration.secretKey, assetSettings: configuration.assets,
                accessCache: accessCache),
            recentErrors: recentErrors, maintenance: dependencies.maintenance, sendsEmail: dependencies.email != nil
        ).register(on: router)
    }
    UserRoutes<APIRequestContext>(directory: UserDirectory(store: dependencies.store), authenticator: authenticator, limits: configuration.limits)
        .register(on: router)
    let shares = ShareStore(store: dependencies.store)
    ZoneRoutes<APIRequestContext>(
        zones: ZoneStore(store: dependencies.store), shares: shares, authenticator: authenticator, limits: configuration.limits, secretKey: configuration.secretKey
    ).register(on: router)
    ShareRoutes<APIRequestContext>(
        shares: shares, authenticator: authenticator, limits: configuration.limits, secretKey: configuration.secretKey, assetSettings: configuration.assets,
        shareURL: configuration.shareURL
    ).register(on: router)
    let records = RecordStore(store: dependencies.store)
    let assets = AssetStore(store: dependencies.store)
    RecordRoutes<APIRequestContext>(
        records: records, shares: shares, shareURL: configuration.shareURL, authenticator: authenticator, limits: configuration.limits,
        assets: AssetBinding(assets: assets, records: records, settings: configuration.assets), secretKey: configuration.secretKey
    ).register(on: router)
    AssetRoutes<APIRequestContext>(
        assets: assets, records: records, blobs: dependencies.blobs, authenticator: authenticator, limits: configuration.limits, settings: configuration.assets,
        secretKey: configuration.secretKey
    ).register(on: router)
    SyncRoutes<APIRequestContext>(
        sync: SyncStore(
            store: dependencies.store,
            readAhead: dependencies.tasks.flatMap { configuration.syncReadAheadPages > 0 ? SyncReadAhead(capacity: configuration.syncReadAheadPages, owner: $0) : nil }),
        shares: shares, authenticator: authenticator, limits: configuration.limits, secretKey: configuration.secretKey,
        assetSettings: configuration.assets, shareURL: configuration.shareURL
    ).register(on: router)
    QueryRoutes<APIRequestContext>(
        queries: QueryStore(store: dependencies.store), schemas: SchemaStore(store: dependencies.store), authenticator: authenticator, limits: configuration.limits, secretKey: configuration.secretKey,
        assetSettings: configuration.assets, shareURL: configuration.shareURL
    ).register(on: router)
    SubscriptionRoutes<APIRequestContext>(subscriptions: SubscriptionStore(store: dependencies.store), authenticator: authenticator, limits: configuration.limits)
        .register(on: router)
    NotificationRoutes<APIRequestContext>(
        notifications: NotificationStore(store: dependencies.store), hub: dependencies.hub, authenticator: authenticator,
        limits: configuration.limits, secretKey: configuration.secretKey
    ).register(on: router)
    return router
}

/// Builds the HTTP application; `services` (the database pool, the relay) start before the server
/// and stop after it has drained. With a positive `authCacheTTL`, answers about API tokens are
/// cached, and the listener that keeps them true is one of the application's services.
public func buildApplication(
    _ dependencies: APIDependencies, configuration: APIConfiguration, services: [any Service], logger: Logger
) -> some ApplicationProtocol {
    var ownServices: [any Service] = [dependencies.hub]
    if let tasks = dependencies.tasks { ownServices.append(tasks) }
    var accessCache: AccessCache?
    if configuration.authCacheTTL > .zero {
        let cache = AccessCache(ttl: configuration.authCacheTTL)
        ownServices.append(AccessChangeListener(store: dependencies.store, cache: cache, logger: logger))
        accessCache = cache
    }
    let webSocketRouter = Router(context: BasicWebSocketRequestContext.self)
    CourierWebSocket(notifications: NotificationStore(store: dependencies.store), hub: dependencies.hub, limits: configuration.limits)
        .register(on: webSocketRouter)
    return Application(
        router: buildRouter(dependencies, configuration: configuration, accessCache: accessCache),
        // An idle connection is closed, so clients that open connections and send nothing (or stop
        // half-way through a request) cannot hold the server's connections for ever. The WebSocket
        // courier upgrades on the same port (APIServerChannel: how both go together).
        server: .http1WithWebSocket(webSocketRouter: webSocketRouter, idleTimeout: configuration.idleTimeout.map { TimeAmount($0) }),
        configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "stratus"),
        services: services + ownServices,
        logger: logger
    )
}
