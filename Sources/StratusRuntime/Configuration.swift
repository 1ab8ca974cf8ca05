import Foundation
import Logging
import StratusAPI
import StratusBlobStore
import StratusCore
import StratusIdentity
import StratusKafka
import StratusPostgres
import StratusPush
import StratusRelay
import StratusWorkers

/// The configuration of every Stratus process, read from environment variables (documented in the
/// docs/configuration.md with their defaults). Flags of the admin CLI override the same values.
public struct StratusConfiguration: Sendable {
    /// `STRATUS_DATABASE_URL`.
    public var databaseURL: String
    /// `STRATUS_DATABASE_MAX_CONNECTIONS`.
    public var databaseMaxConnections: Int
    /// `STRATUS_SERIALIZABLE_ATTEMPTS`: tries of a transaction that loses serialization races.
    public var serializableAttempts: Int
    /// `STRATUS_KAFKA_BROKERS`, `STRATUS_KAFKA_SESSION_TIMEOUT_MS`, `STRATUS_KAFKA_HEARTBEAT_MS`, `STRATUS_KAFKA_FETCH_WAIT_MS`.
    public var kafka: KafkaClientConfiguration
    /// `STRATUS_KAFKA_BACKGROUND_FETCH_WAIT_MS`: the fetch wait of workers whose effects nobody waits
    /// for (`ProjectionUrgency.background`).
    public var backgroundFetchWait: Duration
    /// `STRATUS_TOPIC` and `STRATUS_TOPIC_PARTITIONS`.
    public var relay: RelayConfiguration
    /// `STRATUS_RELAY`: `embedded` (run the relay inside stratus-api) or `off`.
    public var embeddedRelay: Bool
    /// The worker settings (topic from `STRATUS_TOPIC`; `STRATUS_WORKER_IDLE_AFTER_MS`).
    public var worker: WorkerConfiguration
    /// `STRATUS_HTTP_HOST`, `STRATUS_HTTP_PORT`, `STRATUS_HTTP_IDLE_TIMEOUT_SECONDS`, `STRATUS_MAX_OPERATIONS`,
    /// `STRATUS_MAX_REQUEST_BYTES`, `STRATUS_MAX_RECORD_BYTES`, `STRATUS_MAX_EVENT_BYTES`, the rate limits
    /// (`STRATUS_RATE_*`), the sign-in limits (`STRATUS_SIGNIN_*`), `STRATUS_USER_QUOTA_BYTES` and
    /// `STRATUS_AUTH_CACHE_MS`.
    public var api: APIConfiguration
    /// `STRATUS_METRICS_PORT`: where a worker serves `/health` and `/metrics` (0 = off).
    public var metricsPort: Int
    /// `STRATUS_LOG_LEVEL`.
    public var logLevel: Logger.Level
    /// `OTEL_TRACES_EXPORTER` (and the standard `OTEL_*` variables the exporter reads): off unless `otlp`.
    public var tracing = TracingSettings.off
    /// `STRATUS_TOMBSTONE_RETENTION_DAYS`: how long deleted records stay visible to sync (then tokens
    /// older than that must reset).
    public var tombstoneRetention: Duration
    /// `STRATUS_DATA_DIR`: where locally generated development secrets live.
    public var dataDirectory: String
    /// `STRATUS_STATEMENT_TIMEOUT_MS`, `STRATUS_LOCK_TIMEOUT_MS`, `STRATUS_IDLE_IN_TRANSACTION_TIMEOUT_MS`,
    /// `STRATUS_DATABASE_LEASE_TIMEOUT_MS`:
    /// the limits every database connection runs under.
    public var databaseTimeouts = PostgresStore.Timeouts()
    /// `STRATUS_PREPARED_STATEMENTS`: how many statement texts a process prepares (0: none).
    public var preparedStatements = 256
    /// `STRATUS_DATABASE_MIN_CONNECTIONS`: connections a process keeps open (0 to
    /// `databaseMaxConnections`); the rest open on demand and close when idle. Unset (nil):
    /// `stratus-api` keeps all of them open, every other process none.
    public var databaseMinConnections: Int?
    /// The most `STRATUS_DATABASE_MAX_CONNECTIONS` may ask for.
    public static let maxDatabaseConnections = 10_000
    /// `STRATUS_SHUTDOWN_DEADLINE_SECONDS`: how long `stratus-api`'s graceful shutdown waits for the
    /// work it started off requests (sync pages read ahead, console maintenance runs) before it
    /// cancels it (`TaskOwner`); 0 to `maxShutdownDeadlineSeconds`.
    public var shutdownDeadline = TaskOwner.defaultDeadline
    /// The most `STRATUS_SHUTDOWN_DEADLINE_SECONDS` may ask for: an hour.
    public static let maxShutdownDeadlineSeconds = 3_600
    /// `STRATUS_DEPLOYMENT`: `development` (one machine) or `production`.
    public var deployment: Deployment
    /// Where the token-signing key (`api.secretKey`) came from.
    public var secretKeySource: SecretKeySource
    /// `STRATUS_WEBHOOK_ALLOW_LOOPBACK`: whether the dispatcher may call webhooks over plain http on
    /// a loopback host (tests and local stacks; `stratus webhook create --allow-insecure-loopback`).
    public var webhookAllowInsecureLoopback = false
    /// Where stratus-api sends email messages (sign-up, password reset): an SMTP relay
    /// (`STRATUS_SMTP_*`) or a signed webhook (`STRATUS_EMAIL_WEBHOOK_*`); nil: none is sent.
    public var emailDelivery: EmailDelivery?
    /// How stratus-subscriptions sends pushes: `STRATUS_DELIVERY_MAX_ATTEMPTS` (8, then a delivery is
    /// dead) and `STRATUS_DELIVERY_CONCURRENCY` (32 in flight).
    public var delivery = DeliveryConfiguration()
    /// `STRATUS_ASSET_STORE` and its settings: where asset bytes live.
    public var blobStore = BlobStoreConfiguration.fileSystem(directory: ".stratus/assets")
    /// `STRATUS_ASSET_GRACE_SECONDS`: how long an asset no record holds is kept (an upload not yet bound too).
    public var assetGrace: Duration = .seconds(86_400)
    /// `STRATUS_ASSET_GC_INTERVAL_SECONDS`: how often stratus-gc looks for orphaned assets.
    public var assetCollectionInterval: Duration = .seconds(300)
    /// How stratus-gc collects expired records: `STRATUS_GC_EXPIRE_BATCH` (2,000 per transaction),
    /// `STRATUS_GC_EXPIRE_RATE` (10,000 records per second; 0: no limit) and
    /// `STRATUS_GC_EXPIRE_CONCURRENCY` (2 zones at once).
    public var expiry = ExpiryConfiguration()
    /// How long the event log keeps events and how stratus-gc prunes it:
    /// `STRATUS_EVENT_RETENTION_SECONDS` (the window, 7 days; the topic the relay creates keeps
    /// messages as long), `STRATUS_EVENT_PARTITION_EVENTS` (event ids a partition of the log spans,
    /// 1,000,000) and `STRATUS_EVENT_RETENTION_INTERVAL_SECONDS` (how often stratus-gc prunes, 300).
    public var eventRetention = EventRetentionConfiguration()

    /// The settings above that the workers' own services read (`WorkerDefinition.services`).
    public var workerSettings: WorkerSettings {
        WorkerSettings(
            tombstoneRetention: tombstoneRetention, blobStore: blobStore, assetGrace: assetGrace,
            assetCollectionInterval: assetCollectionInterval, expiry: expiry, delivery: delivery,
            webhookAllowInsecureLoopback: webhookAllowInsecureLoopback, eventRetention: eventRetention)
    }

    /// What kind of deployment a process belongs to; decides whether a missing secret key may be
    /// generated.
    public enum Deployment: String, Sendable {
        /// Every process on one machine, sharing one data folder (`scripts/stack.sh`, a developer's shell).
        case development
        /// Processes on several machines or containers (docker compose, replicas).
        case production
    }

    /// Where the token-signing key came from. Never holds the key.
    public enum SecretKeySource: Sendable, Equatable {
        /// `STRATUS_SECRET_KEY`.
        case environment
        /// `STRATUS_SECRET_KEY_FILE`.
        case file(String)
        /// The development default: a key generated once into the data folder (`created`: by this process).
        case developmentDefault(path: String, created: Bool)
    }

    /// Reads the configuration. Without `STRATUS_SECRET_KEY` or `STRATUS_SECRET_KEY_FILE`, a
    /// development deployment listening on a loopback address uses a key generated once into the
    /// data folder (`secretKeySource` says so); anything else is refused, because processes that do
    /// not share a data folder would each make their own key and refuse each other's tokens.
    public static func fromEnvironment(_ environment: [String: String] = ProcessInfo.processInfo.environment) throws -> StratusConfiguration {
        func int(_ name: String, _ fallback: Int) throws -> Int {
            guard let text = environment[name] else { return fallback }
            guard let value = Int(text) else { throw ConfigurationProblem("\(name) must be a whole number, got '\(text)'") }
            return value
        }
        let dataDirectory = environment["STRATUS_DATA_DIR"] ?? FileManager.default.currentDirectoryPath + "/.stratus"
        var kafka = KafkaClientConfiguration(brokers: environment["STRATUS_KAFKA_BROKERS"] ?? "127.0.0.1:9092")
        kafka.sessionTimeoutMilliseconds = try int("STRATUS_KAFKA_SESSION_TIMEOUT_MS", 6000)
        kafka.heartbeatIntervalMilliseconds = try int("STRATUS_KAFKA_HEARTBEAT_MS", 1000)
        kafka.fetchWaitMilliseconds = try int("STRATUS_KAFKA_FETCH_WAIT_MS", 25)
        var relay = RelayConfiguration()
        relay.topic = environment["STRATUS_TOPIC"] ?? relay.topic
        relay.partitions = try int("STRATUS_TOPIC_PARTITIONS", relay.partitions)
        var worker = WorkerConfiguration()
        worker.topic = relay.topic
        worker.consumerGroupSuffix = environment["STRATUS_CONSUMER_GROUP_SUFFIX"].flatMap { $0.isEmpty ? nil : $0 }
        let idleAfter = try int("STRATUS_WORKER_IDLE_AFTER_MS", 1000)
        worker.idleAfter = idleAfter > 0 ? .milliseconds(idleAfter) : nil
        let linger = try int("STRATUS_WORKER_LINGER_MS", 10)
        guard (0...1000).contains(linger) else {
            throw ConfigurationProblem("STRATUS_WORKER_LINGER_MS must be 0 (off) to 1000, got \(linger)")
        }
        worker.linger = linger > 0 ? .milliseconds(linger) : nil
        let deploymentText = environment["STRATUS_DEPLOYMENT"] ?? Deployment.development.rawValue
        guard let deployment = Deployment(rawValue: deploymentText) else {
            throw ConfigurationProblem("STRATUS_DEPLOYMENT must be 'development' or 'production', not '\(deploymentText)'")
        }
        let host = environment["STRATUS_HTTP_HOST"] ?? APIConfiguration.defaultHost
        let (key, keySource) = try secretKey(environment, dataDirectory: dataDirectory, deployment: deployment, host: host)
        var api = APIConfiguration(secretKey: key)
        api.host = host
        api.port = try int("STRATUS_HTTP_PORT", api.port)
        let idleSeconds = try int("STRATUS_HTTP_IDLE_TIMEOUT_SECONDS", 60)
        guard (0...86_400).contains(idleSeconds) else {
            throw ConfigurationProblem("STRATUS_HTTP_IDLE_TIMEOUT_SECONDS must be 0 (never) to 86400, got \(idleSeconds)")
        }
        api.idleTimeout = idleSeconds == 0 ? nil : .seconds(idleSeconds)
        api.limits.maxOperations = try int("STRATUS_MAX_OPERATIONS", api.limits.maxOperations)
        api.limits.maxRequestBytes = try int("STRATUS_MAX_REQUEST_BYTES", api.limits.maxRequestBytes)
        api.limits.maxRecordBytes = try int("STRATUS_MAX_RECORD_BYTES", api.limits.maxRecordBytes)
        api.limits.maxEventBytes = try int("STRATUS_MAX_EVENT_BYTES", api.limits.maxEventBytes)
        api.limits.maxResults = try int("STRATUS_MAX_RESULTS", api.limits.maxResults)
        api.limits.maxResponseBytes = try int("STRATUS_MAX_RESPONSE_BYTES", api.limits.maxResponseBytes)
        api.signInURL = environment["STRATUS_SIGN_IN_URL"].flatMap { $0.isEmpty ? nil : $0 }
        api.shareURL = environment["STRATUS_SHARE_URL"].flatMap { $0.isEmpty ? nil : $0 }
        api.webAuthTokenLifetime = Int64(try int("STRATUS_WEB_AUTH_TOKEN_TTL", Int(api.webAuthTokenLifetime)))
        api.accountDeletionSignIn = Int64(try int("STRATUS_ACCOUNT_DELETION_SIGNIN_SECONDS", Int(api.accountDeletionSignIn)))
        guard UserDeletion.recentSignInRange.contains(api.accountDeletionSignIn) else {
            throw ConfigurationProblem("STRATUS_ACCOUNT_DELETION_SIGNIN_SECONDS must be 60 to 86400 seconds, got \(api.accountDeletionSignIn)")
        }
        let authCacheMilliseconds = try int("STRATUS_AUTH_CACHE_MS", Int(api.authCacheTTL / .milliseconds(1)))
        guard (0...60_000).contains(authCacheMilliseconds) else {
            throw ConfigurationProblem("STRATUS_AUTH_CACHE_MS must be 0 (no cache) to 60000 milliseconds, got \(authCacheMilliseconds)")
        }
        api.authCacheTTL = .milliseconds(authCacheMilliseconds)
        api.containerMetrics = try int("STRATUS_METRICS_CONTAINERS", api.containerMetrics)
        guard (0...10_000).contains(api.containerMetrics) else {
            throw ConfigurationProblem("STRATUS_METRICS_CONTAINERS must be 0 (none) to 10000, got \(api.containerMetrics)")
        }
        let containerMetricsSeconds = try int("STRATUS_METRICS_CONTAINERS_SECONDS", Int(api.containerMetricsInterval.components.seconds))
        guard (1...86_400).contains(containerMetricsSeconds) else {
            throw ConfigurationProblem("STRATUS_METRICS_CONTAINERS_SECONDS must be 1 to 86400, got \(containerMetricsSeconds)")
        }
        api.containerMetricsInterval = .seconds(containerMetricsSeconds)
        api.syncReadAheadPages = try int("STRATUS_SYNC_READ_AHEAD_PAGES", api.syncReadAheadPages)
        guard (0...10_000).contains(api.syncReadAheadPages) else {
            throw ConfigurationProblem("STRATUS_SYNC_READ_AHEAD_PAGES must be 0 (none) to 10000, got \(api.syncReadAheadPages)")
        }
        try readLimits(environment, into: &api, int: int)
        let levelText = environment["STRATUS_LOG_LEVEL"] ?? "info"
        guard let level = Logger.Level(rawValue: levelText) else {
            throw ConfigurationProblem("STRATUS_LOG_LEVEL must be one of trace, debug, info, notice, warning, error, critical")
        }
        let relayMode = environment["STRATUS_RELAY"] ?? "embedded"
        guard ["embedded", "off"].contains(relayMode) else { throw ConfigurationProblem("STRATUS_RELAY must be 'embedded' or 'off'") }
        var configuration = StratusConfiguration(
            databaseURL: environment["STRATUS_DATABASE_URL"] ?? "postgres://stratus@127.0.0.1:5432/stratus",
            databaseMaxConnections: try int("STRATUS_DATABASE_MAX_CONNECTIONS", 20),
            serializableAttempts: try int("STRATUS_SERIALIZABLE_ATTEMPTS", 8),
            kafka: kafka, backgroundFetchWait: .milliseconds(try int("STRATUS_KAFKA_BACKGROUND_FETCH_WAIT_MS", 1000)),
            relay: relay, embeddedRelay: relayMode == "embedded", worker: worker, api: api,
            metricsPort: try int("STRATUS_METRICS_PORT", 0), logLevel: level,
            tombstoneRetention: .seconds(86_400 * (try int("STRATUS_TOMBSTONE_RETENTION_DAYS", 30))), dataDirectory: dataDirectory,
            deployment: deployment, secretKeySource: keySource)
        func milliseconds(_ name: String, _ fallback: Duration) throws -> Duration {
            let value = try int(name, Int(fallback / .milliseconds(1)))
            guard value > 0 else { throw ConfigurationProblem("\(name) must be a positive number of milliseconds, got \(value)") }
            return .milliseconds(value)
        }
        configuration.databaseTimeouts.statement = try milliseconds("STRATUS_STATEMENT_TIMEOUT_MS", configuration.databaseTimeouts.statement)
        configuration.databaseTimeouts.lock = try milliseconds("STRATUS_LOCK_TIMEOUT_MS", configuration.databaseTimeouts.lock)
        configuration.databaseTimeouts.idleInTransaction = try milliseconds(
            "STRATUS_IDLE_IN_TRANSACTION_TIMEOUT_MS", configuration.databaseTimeouts.idleInTransaction)
        configuration.databaseTimeouts.lease = try milliseconds("STRATUS_DATABASE_LEASE_TIMEOUT_MS", configuration.databaseTimeouts.lease)
        guard (1...Self.maxDatabaseConnections).contains(configuration.databaseMaxConnections) else {
            throw ConfigurationProblem(
                "STRATUS_DATABASE_MAX_CONNECTIONS must be 1 to \(Self.maxDatabaseConnections), got \(configuration.databaseMaxConnections)")
        }
        if environment["STRATUS_DATABASE_MIN_CONNECTIONS"] != nil {
            let kept = try int("STRATUS_DATABASE_MIN_CONNECTIONS", 0)
            guard (0...configuration.databaseMaxConnections).contains(kept) else {
                throw ConfigurationProblem(
                    "STRATUS_DATABASE_MIN_CONNECTIONS must be 0 to STRATUS_DATABASE_MAX_CONNECTIONS (\(configuration.databaseMaxConnections)), got \(kept)")
            }
            configuration.databaseMinConnections = kept
        }
        let shutdownSeconds = try int("STRATUS_SHUTDOWN_DEADLINE_SECONDS", Int(configuration.shutdownDeadline.components.seconds))
        guard (0...Self.maxShutdownDeadlineSeconds).contains(shutdownSeconds) else {
            throw ConfigurationProblem(
                "STRATUS_SHUTDOWN_DEADLINE_SECONDS must be 0 (cancel at once) to \(Self.maxShutdownDeadlineSeconds), got \(shutdownSeconds)")
        }
        configuration.shutdownDeadline = .seconds(shutdownSeconds)
        configuration.tracing = try TracingSettings(environment: environment)
        configuration.api.tracing = configuration.tracing.enabled
        configuration.preparedStatements = try int("STRATUS_PREPARED_STATEMENTS", configuration.preparedStatements)
        guard (0...10_000).contains(configuration.preparedStatements) else {
            throw ConfigurationProblem("STRATUS_PREPARED_STATEMENTS must be 0 (none) to 10000, got \(configuration.preparedStatements)")
        }
        configuration.delivery.maxAttempts = try int("STRATUS_DELIVERY_MAX_ATTEMPTS", configuration.delivery.maxAttempts)
        guard (1...100).contains(configuration.delivery.maxAttempts) else {
            throw ConfigurationProblem("STRATUS_DELIVERY_MAX_ATTEMPTS must be 1 to 100, got \(configuration.delivery.maxAttempts)")
        }
        configuration.delivery.concurrency = try int("STRATUS_DELIVERY_CONCURRENCY", configuration.delivery.concurrency)
        guard (1...1_000).contains(configuration.delivery.concurrency) else {
            throw ConfigurationProblem("STRATUS_DELIVERY_CONCURRENCY must be 1 to 1000, got \(configuration.delivery.concurrency)")
        }
        try readAssets(environment, into: &configuration)
        configuration.expiry.batchSize = try int("STRATUS_GC_EXPIRE_BATCH", configuration.expiry.batchSize)
        guard (1...10_000).contains(configuration.expiry.batchSize) else {
            throw ConfigurationProblem("STRATUS_GC_EXPIRE_BATCH must be 1 to 10000, got \(configuration.expiry.batchSize)")
        }
        configuration.expiry.concurrency = try int("STRATUS_GC_EXPIRE_CONCURRENCY", configuration.expiry.concurrency)
        guard (1...16).contains(configuration.expiry.concurrency) else {
            throw ConfigurationProblem("STRATUS_GC_EXPIRE_CONCURRENCY must be 1 to 16, got \(configuration.expiry.concurrency)")
        }
        if let text = environment["STRATUS_GC_EXPIRE_RATE"] {
            guard let rate = Double(text), rate.isFinite, (0...1_000_000).contains(rate) else {
                throw ConfigurationProblem("STRATUS_GC_EXPIRE_RATE must be a number of records per second from 0 (no limit) to 1000000, got '\(text)'")
            }
            configuration.expiry.ratePerSecond = rate
        }
        try readConsole(environment, into: &configuration.api, deployment: deployment, int: int)
        try readEventRetention(environment, into: &configuration, int: int)
        switch environment["STRATUS_WEBHOOK_ALLOW_LOOPBACK"] ?? "false" {
        case "true", "1": configuration.webhookAllowInsecureLoopback = true
        case "false", "0": configuration.webhookAllowInsecureLoopback = false
        case let text: throw ConfigurationProblem("STRATUS_WEBHOOK_ALLOW_LOOPBACK must be true or false, got '\(text)'")
        }
        try readEmail(environment, into: &configuration, int: int)
        switch environment["STRATUS_JWKS_ALLOW_PRIVATE_ADDRESSES"] ?? "false" {
        case "true", "1": configuration.api.keySets.allowPrivateAddresses = true
        case "false", "0": configuration.api.keySets.allowPrivateAddresses = false
        case let text: throw ConfigurationProblem("STRATUS_JWKS_ALLOW_PRIVATE_ADDRESSES must be true or false, got '\(text)'")
        }
        return configuration
    }

    /// Where email messages go, how long their tokens last, and the public URL their links and the
    /// sign-in page's address start with.
    static func readEmail(_ environment: [String: String], into configuration: inout StratusConfiguration, int: (String, Int) throws -> Int) throws {
        if let text = environment["STRATUS_PUBLIC_URL"], !text.isEmpty {
            let trimmed = text.hasSuffix("/") ? String(text.dropLast()) : text
            guard trimmed.utf8.count <= 255, let url = URL(string: trimmed), ["http", "https"].contains(url.scheme ?? ""), url.host != nil,
                url.path.isEmpty, url.query == nil, url.fragment == nil
            else {
                throw ConfigurationProblem("STRATUS_PUBLIC_URL must be http(s)://host[:port] with no path, got '\(text)'")
            }
            configuration.api.publicURL = trimmed
        }
        do {
            configuration.api.email.lifetimes = try EmailTokenLifetimes(
                verify: Int64(try int("STRATUS_EMAIL_VERIFY_TTL_SECONDS", 86_400)), reset: Int64(try int("STRATUS_EMAIL_RESET_TTL_SECONDS", 3_600)))
        } catch let error as StratusError {
            throw ConfigurationProblem("STRATUS_EMAIL_VERIFY_TTL_SECONDS and STRATUS_EMAIL_RESET_TTL_SECONDS: \(error.reason)")
        }
        let smtpHost = environment["STRATUS_SMTP_HOST"].flatMap { $0.isEmpty ? nil : $0 }
        let webhookURL = environment["STRATUS_EMAIL_WEBHOOK_URL"].flatMap { $0.isEmpty ? nil : $0 }
        switch (smtpHost, webhookURL) {
        case (nil, nil):
            configuration.emailDelivery = nil
        case (.some, .some):
            throw ConfigurationProblem("set STRATUS_SMTP_HOST or STRATUS_EMAIL_WEBHOOK_URL, not both")
        case (.some(let host), nil):
            guard let from = environment["STRATUS_SMTP_FROM"], (try? EmailAddress.validate(from)) != nil else {
                throw ConfigurationProblem("STRATUS_SMTP_FROM must be the address messages come from when STRATUS_SMTP_HOST is set")
            }
            var smtp = SMTPSettings(host: host, port: try int("STRATUS_SMTP_PORT", 587), from: from)
            guard (1...65_535).contains(smtp.port) else { throw ConfigurationProblem("STRATUS_SMTP_PORT must be 1 to 65535, got \(smtp.port)") }
            switch environment["STRATUS_SMTP_STARTTLS"] ?? "true" {
            case "true", "1": smtp.startTLS = true
            case "false", "0": smtp.startTLS = false
            case let text: throw ConfigurationProblem("STRATUS_SMTP_STARTTLS must be true or false, got '\(text)'")
            }
            if let path = environment["STRATUS_SMTP_CA_FILE"], !path.isEmpty {
                guard smtp.startTLS else { throw ConfigurationProblem("STRATUS_SMTP_CA_FILE needs STRATUS_SMTP_STARTTLS=true: it is the authority of the relay's TLS certificate") }
                do {
                    smtp.trustedAuthorities = try SMTPSettings.authorities(fromPEMFile: path)
                } catch {
                    throw ConfigurationProblem("STRATUS_SMTP_CA_FILE: \(error)")
                }
            }
            smtp.username = environment["STRATUS_SMTP_USERNAME"].flatMap { $0.isEmpty ? nil : $0 }
            smtp.password = environment["STRATUS_SMTP_PASSWORD"].flatMap { $0.isEmpty ? nil : $0 }
            guard (smtp.username == nil) == (smtp.password == nil) else {
                throw ConfigurationProblem("set both STRATUS_SMTP_USERNAME and STRATUS_SMTP_PASSWORD, or neither")
            }
            guard smtp.username == nil || smtp.startTLS else {
                throw ConfigurationProblem("STRATUS_SMTP_USERNAME needs STRATUS_SMTP_STARTTLS=true: credentials are never sent in the clear")
            }
            configuration.emailDelivery = .smtp(smtp)
        case (nil, .some(let url)):
            guard let secret = environment["STRATUS_EMAIL_WEBHOOK_SECRET"], secret.utf8.count >= 16 else {
                throw ConfigurationProblem("STRATUS_EMAIL_WEBHOOK_SECRET must be at least 16 bytes when STRATUS_EMAIL_WEBHOOK_URL is set")
            }
            do {
                _ = try WebhookURLPolicy.check(url, allowInsecureLoopback: configuration.webhookAllowInsecureLoopback)
            } catch {
                throw ConfigurationProblem("STRATUS_EMAIL_WEBHOOK_URL: \(error.message)")
            }
            configuration.emailDelivery = .webhook(url: url, secret: Data(secret.utf8))
        }
    }

    /// The console's settings (`STRATUS_CONSOLE`, `STRATUS_CONSOLE_SESSION_SECONDS`,
    /// `STRATUS_CONSOLE_SECURE_COOKIES`); a production deployment marks its cookies `Secure` unless told not to.
    static func readConsole(
        _ environment: [String: String], into api: inout APIConfiguration, deployment: Deployment, int: (String, Int) throws -> Int
    ) throws {
        func flag(_ name: String, _ fallback: Bool) throws -> Bool {
            switch environment[name] {
            case nil: return fallback
            case "true", "1", "on": return true
            case "false", "0", "off": return false
            case let text?: throw ConfigurationProblem("\(name) must be true or false, got '\(text)'")
            }
        }
        api.console.enabled = try flag("STRATUS_CONSOLE", api.console.enabled)
        api.console.workers = StratusProcess.workerNames
        api.console.secureCookies = try flag("STRATUS_CONSOLE_SECURE_COOKIES", deployment == .production)
        let seconds = try int("STRATUS_CONSOLE_SESSION_SECONDS", Int(api.console.sessionLifetime.components.seconds))
        guard (60...2_592_000).contains(seconds) else {
            throw ConfigurationProblem("STRATUS_CONSOLE_SESSION_SECONDS must be 60 to 2592000 (30 days), got \(seconds)")
        }
        api.console.sessionLifetime = .seconds(seconds)
    }

    /// The rate limits, sign-in limits and storage quota (`STRATUS_RATE_*`, `STRATUS_SIGNIN_*`,
    /// `STRATUS_USER_QUOTA_BYTES`).
    /// The event log's retention (`eventRetention`), and the topic's matching retention.
    static func readEventRetention(_ environment: [String: String], into configuration: inout StratusConfiguration, int: (String, Int) throws -> Int) throws {
        var retention = configuration.eventRetention
        let window = try int("STRATUS_EVENT_RETENTION_SECONDS", Int(retention.settings.windowMilliseconds / 1000))
        guard (0...EventRetention.maxWindowSeconds).contains(Int64(window)) else {
            throw ConfigurationProblem("STRATUS_EVENT_RETENTION_SECONDS must be 0 to \(EventRetention.maxWindowSeconds) seconds, got \(window)")
        }
        retention.settings.windowMilliseconds = Int64(window) * 1000
        let partition = try int("STRATUS_EVENT_PARTITION_EVENTS", Int(retention.settings.partitionEvents))
        guard EventRetention.partitionEventsRange.contains(Int64(partition)) else {
            throw ConfigurationProblem(
                "STRATUS_EVENT_PARTITION_EVENTS must be \(EventRetention.partitionEventsRange.lowerBound) to \(EventRetention.partitionEventsRange.upperBound) event ids, got \(partition)")
        }
        retention.settings.partitionEvents = Int64(partition)
        let interval = try int("STRATUS_EVENT_RETENTION_INTERVAL_SECONDS", Int(retention.interval.components.seconds))
        guard (1...86_400).contains(interval) else {
            throw ConfigurationProblem("STRATUS_EVENT_RETENTION_INTERVAL_SECONDS must be 1 to 86400 seconds, got \(interval)")
        }
        retention.interval = .seconds(interval)
        configuration.eventRetention = retention
        // The broker keeps a message no longer than the log keeps its event (at least a minute).
        configuration.relay.retention = .seconds(max(60, window))
    }

    static func readLimits(_ environment: [String: String], into api: inout APIConfiguration, int: (String, Int) throws -> Int) throws {
        func number(_ name: String) throws -> Double? {
            guard let text = environment[name] else { return nil }
            guard let value = Double(text), value.isFinite, value >= 0 else {
                throw ConfigurationProblem("\(name) must be a number of 0 or more, got '\(text)'")
            }
            return value
        }
        func rate(_ prefix: String) throws -> TokenRate {
            let perSecond = try number("STRATUS_RATE_\(prefix)_PER_SECOND") ?? 0
            guard perSecond > 0 else { return .off }
            // Without a burst, a second's worth of requests may come at once.
            return TokenRate(perSecond: perSecond, burst: try number("STRATUS_RATE_\(prefix)_BURST") ?? perSecond)
        }
        api.rateLimits.user = try rate("USER")
        api.rateLimits.container = try rate("CONTAINER")
        func count(_ name: String, _ fallback: Int) throws -> Int {
            let value = try int(name, fallback)
            guard value >= 0 else { throw ConfigurationProblem("\(name) must be 0 or more, got \(value)") }
            return value
        }
        api.rateLimits.maxBuckets = max(1, try count("STRATUS_RATE_MAX_BUCKETS", api.rateLimits.maxBuckets))
        api.signInLimits.maxBuckets = api.rateLimits.maxBuckets
        api.signInLimits.perLogin = try count("STRATUS_SIGNIN_LOGIN_FAILURES", api.signInLimits.perLogin)
        api.signInLimits.perAddress = try count("STRATUS_SIGNIN_ADDRESS_FAILURES", api.signInLimits.perAddress)
        let window = try count("STRATUS_SIGNIN_WINDOW_SECONDS", Int(api.signInLimits.window.components.seconds))
        guard window > 0 else { throw ConfigurationProblem("STRATUS_SIGNIN_WINDOW_SECONDS must be at least 1, got \(window)") }
        api.signInLimits.window = .seconds(window)
        api.limits.userQuotaBytes = Int64(try count("STRATUS_USER_QUOTA_BYTES", Int(api.limits.userQuotaBytes)))
    }

    /// Whether `host` is a loopback address: only processes on this machine can reach it.
    static func isLoopback(_ host: String) -> Bool {
        let host = host.lowercased()
        if host == "localhost" || host == "::1" || host == "[::1]" { return true }
        let octets = host.split(separator: ".", omittingEmptySubsequences: false).map { UInt8($0) }
        return octets.count == 4 && octets.allSatisfy { $0 != nil } && octets[0] == 127
    }

    /// `STRATUS_SECRET_KEY` (hex or base64, ≥ 32 bytes), else `STRATUS_SECRET_KEY_FILE`, else — only for
    /// a development deployment listening on a loopback address — the development default: a key
    /// generated once into `<data dir>/dev-secret-key` (mode 600).
    static func secretKey(
        _ environment: [String: String], dataDirectory: String, deployment: Deployment, host: String
    ) throws -> (SecretKey, SecretKeySource) {
        if let text = environment["STRATUS_SECRET_KEY"] { return (try SecretKey(text: text), .environment) }
        if let path = environment["STRATUS_SECRET_KEY_FILE"] {
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw ConfigurationProblem("STRATUS_SECRET_KEY_FILE names a file that cannot be read: \(path)")
            }
            return (try SecretKey(text: text), .file(path))
        }
        guard deployment == .development, isLoopback(host) else {
            let why = deployment == .production ? "STRATUS_DEPLOYMENT is production" : "STRATUS_HTTP_HOST '\(host)' is not a loopback address"
            throw ConfigurationProblem(
                "no token-signing key: set STRATUS_SECRET_KEY (or STRATUS_SECRET_KEY_FILE) to the same key for every process of the deployment. "
                    + "A key is generated only for a single-machine development stack (STRATUS_DEPLOYMENT=development and a loopback "
                    + "STRATUS_HTTP_HOST); here \(why).")
        }
        let path = dataDirectory + "/dev-secret-key"
        if let text = try? String(contentsOfFile: path, encoding: .utf8) {
            return (try SecretKey(text: text), .developmentDefault(path: path, created: false))
        }
        let key = SecretKey.generate()
        try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: path, contents: Data((key.hex + "\n").utf8), attributes: [.posixPermissions: 0o600])
        return (key, .developmentDefault(path: path, created: true))
    }

    /// Logs where the token-signing key came from (never the key): a process using the development
    /// default says so, since its tokens are good only where that data folder is.
    public func logSecretKeySource(_ logger: Logger) {
        switch secretKeySource {
        case .environment, .file:
            logger.debug("token-signing key configured", metadata: ["source": "\(secretKeySource == .environment ? "STRATUS_SECRET_KEY" : "STRATUS_SECRET_KEY_FILE")"])
        case .developmentDefault(let path, let created):
            logger.notice(
                "token-signing key: the development default (single machine only; set STRATUS_SECRET_KEY for any other deployment)",
                metadata: ["file": "\(path)", "generated": "\(created ? "now" : "earlier")"])
        }
    }
}

/// A configuration value that cannot be used.
public struct ConfigurationProblem: Error, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}

/// Where stratus-api sends email messages.
public enum EmailDelivery: Sendable, CustomStringConvertible {
    case smtp(SMTPSettings)
    /// A signed POST to `url` (the secret is never logged).
    case webhook(url: String, secret: Data)

    public var description: String {
        switch self {
        case .smtp(let settings): "\(settings)"
        case .webhook(let url, _): "webhook(url: \(url), secret: <redacted>)"
        }
    }
}
