import Foundation
import Logging
import StratusAPI
import StratusCore
import StratusKafka
import StratusPostgres
import StratusRelay
import StratusWorkers

/// The configuration of every Stratus process, read from environment variables (documented in the
/// README with their defaults). Flags of the admin CLI override the same values.
public struct StratusConfiguration: Sendable {
    /// `STRATUS_DATABASE_URL`.
    public var databaseURL: String
    /// `STRATUS_DATABASE_MAX_CONNECTIONS`.
    public var databaseMaxConnections: Int
    /// `STRATUS_SERIALIZABLE_ATTEMPTS`: tries of a transaction that loses serialization races.
    public var serializableAttempts: Int
    /// `STRATUS_KAFKA_BROKERS`, `STRATUS_KAFKA_SESSION_TIMEOUT_MS`, `STRATUS_KAFKA_HEARTBEAT_MS`, `STRATUS_KAFKA_FETCH_WAIT_MS`.
    public var kafka: KafkaClientConfiguration
    /// `STRATUS_TOPIC` and `STRATUS_TOPIC_PARTITIONS`.
    public var relay: RelayConfiguration
    /// `STRATUS_RELAY`: `embedded` (run the relay inside stratus-api) or `off`.
    public var embeddedRelay: Bool
    /// The worker settings (topic from `STRATUS_TOPIC`).
    public var worker: WorkerConfiguration
    /// `STRATUS_HTTP_HOST`, `STRATUS_HTTP_PORT`, `STRATUS_HTTP_IDLE_TIMEOUT_SECONDS`, `STRATUS_MAX_OPERATIONS`,
    /// `STRATUS_MAX_REQUEST_BYTES`, `STRATUS_MAX_RECORD_BYTES`, `STRATUS_MAX_EVENT_BYTES`.
    public var api: APIConfiguration
    /// `STRATUS_METRICS_PORT`: where a worker serves `/health` and `/metrics` (0 = off).
    public var metricsPort: Int
    /// `STRATUS_LOG_LEVEL`.
    public var logLevel: Logger.Level
    /// `STRATUS_TOMBSTONE_RETENTION_DAYS`: how long deleted records stay visible to sync (then tokens
    /// older than that must reset).
    public var tombstoneRetention: Duration
    /// `STRATUS_DATA_DIR`: where locally generated development secrets live.
    public var dataDirectory: String
    /// `STRATUS_STATEMENT_TIMEOUT_MS`, `STRATUS_LOCK_TIMEOUT_MS`, `STRATUS_IDLE_IN_TRANSACTION_TIMEOUT_MS`:
    /// the limits every database connection runs under.
    public var databaseTimeouts = PostgresStore.Timeouts()

    /// Reads the configuration; a missing secret key is generated once under the data folder and
    /// marked as a development secret.
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
        kafka.fetchWaitMilliseconds = try int("STRATUS_KAFKA_FETCH_WAIT_MS", 50)
        var relay = RelayConfiguration()
        relay.topic = environment["STRATUS_TOPIC"] ?? relay.topic
        relay.partitions = try int("STRATUS_TOPIC_PARTITIONS", relay.partitions)
        var worker = WorkerConfiguration()
        worker.topic = relay.topic
        var api = APIConfiguration(secretKey: try secretKey(environment, dataDirectory: dataDirectory))
        api.host = environment["STRATUS_HTTP_HOST"] ?? api.host
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
        api.webAuthTokenLifetime = Int64(try int("STRATUS_WEB_AUTH_TOKEN_TTL", Int(api.webAuthTokenLifetime)))
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
            kafka: kafka, relay: relay, embeddedRelay: relayMode == "embedded", worker: worker, api: api,
            metricsPort: try int("STRATUS_METRICS_PORT", 0), logLevel: level,
            tombstoneRetention: .seconds(86_400 * (try int("STRATUS_TOMBSTONE_RETENTION_DAYS", 30))), dataDirectory: dataDirectory)
        func milliseconds(_ name: String, _ fallback: Duration) throws -> Duration {
            let value = try int(name, Int(fallback / .milliseconds(1)))
            guard value > 0 else { throw ConfigurationProblem("\(name) must be a positive number of milliseconds, got \(value)") }
            return .milliseconds(value)
        }
        configuration.databaseTimeouts.statement = try milliseconds("STRATUS_STATEMENT_TIMEOUT_MS", configuration.databaseTimeouts.statement)
        configuration.databaseTimeouts.lock = try milliseconds("STRATUS_LOCK_TIMEOUT_MS", configuration.databaseTimeouts.lock)
        configuration.databaseTimeouts.idleInTransaction = try milliseconds(
            "STRATUS_IDLE_IN_TRANSACTION_TIMEOUT_MS", configuration.databaseTimeouts.idleInTransaction)
        return configuration
    }

    /// `STRATUS_SECRET_KEY` (hex or base64, ≥ 32 bytes), else `STRATUS_SECRET_KEY_FILE`, else a development
    /// key generated once into `<data dir>/dev-secret-key` (mode 600).
    static func secretKey(_ environment: [String: String], dataDirectory: String) throws -> SecretKey {
        if let text = environment["STRATUS_SECRET_KEY"] { return try SecretKey(text: text) }
        let path = environment["STRATUS_SECRET_KEY_FILE"] ?? dataDirectory + "/dev-secret-key"
        if let text = try? String(contentsOfFile: path, encoding: .utf8) { return try SecretKey(text: text) }
        guard environment["STRATUS_SECRET_KEY_FILE"] == nil else {
            throw ConfigurationProblem("STRATUS_SECRET_KEY_FILE names a file that cannot be read")
        }
        let key = SecretKey.generate()
        try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: path, contents: Data((key.hex + "\n").utf8), attributes: [.posixPermissions: 0o600])
        return key
    }
}

/// A configuration value that cannot be used.
public struct ConfigurationProblem: Error, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}
