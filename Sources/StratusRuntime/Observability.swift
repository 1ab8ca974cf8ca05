import Foundation
import Hummingbird
import Logging
import Metrics
import Prometheus
import ServiceLifecycle

/// Process-wide logging and metrics set-up, done once at start.
public enum Observability {
    /// The registry `/metrics` renders.
    public static let registry = PrometheusCollectorRegistry()

    /// Bootstraps swift-log (key=value metadata on stderr) and swift-metrics (Prometheus). Call once.
    public static func bootstrap(level: Logger.Level) {
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
    }

    /// The metrics in Prometheus text format.
    public static func render() -> String { registry.emitToString() }
}

/// A small HTTP server with `/health` and `/metrics` for processes that have no API of their own.
public struct MetricsServer: Service {
    let host: String
    let port: Int
    let logger: Logger

    /// Creates the server.
    public init(host: String, port: Int, logger: Logger) {
        self.host = host
        self.port = port
        self.logger = logger
    }

    public func run() async throws {
        let router = Router()
        router.get("/health") { _, _ in "ok" }
        router.get("/metrics") { _, _ in Observability.render() }
        let app = Application(router: router, configuration: .init(address: .hostname(host, port: port), serverName: "stratus"), logger: logger)
        try await app.run()
    }
}
