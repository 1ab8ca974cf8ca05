import Foundation
import Logging
import OTel
import ServiceLifecycle
import Synchronization
import Tracing

/// Whether a process exports traces: on only when `OTEL_TRACES_EXPORTER` is `otlp` (and
/// `OTEL_SDK_DISABLED` is not `true`). Unlike the standard's default, tracing is off unless asked
/// for: with it off, no exporter runs and every span the code would start is a no-op that is never
/// even started (docs/configuration.md, "Tracing"). Everything else — endpoint, protocol, service
/// name, batching, sampling — is read by the exporter from the standard `OTEL_*` variables.
public struct TracingSettings: Sendable, Equatable {
    /// Whether spans are recorded and exported.
    public var enabled: Bool

    /// Tracing off.
    public static let off = TracingSettings(enabled: false)

    /// Creates settings.
    public init(enabled: Bool) { self.enabled = enabled }

    /// Reads the settings; a value this build cannot honour (another exporter, the gRPC protocol,
    /// which is not built in) is refused at start rather than ignored.
    public init(environment: [String: String]) throws {
        func shown(_ text: String) -> String { String(text.prefix(64)) }
        if environment["OTEL_SDK_DISABLED"]?.lowercased() == "true" {
            enabled = false
            return
        }
        switch environment["OTEL_TRACES_EXPORTER"]?.lowercased() ?? "" {
        case "", "none": enabled = false
        case "otlp": enabled = true
        case let other:
            throw ConfigurationProblem("OTEL_TRACES_EXPORTER must be 'otlp' or 'none' (unset: tracing is off), got '\(shown(other))'")
        }
        guard enabled else { return }
        for name in ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"] {
            if let value = environment[name], !["http/protobuf", "http/json"].contains(value) {
                throw ConfigurationProblem("\(name) must be 'http/protobuf' or 'http/json' (OTLP over HTTP), got '\(shown(value))'")
            }
        }
    }
}

/// The process's tracer: bootstrapped once, when tracing is on, and exported by a service that runs
/// first in the process's service group (so it stops last and sends what the others recorded).
public enum ProcessTracing {
    private static let bootstrapped = Mutex(false)

    /// The services that export the process's spans — none when tracing is off, and then nothing
    /// is bootstrapped: the tracer stays the no-op one. The service name defaults to the process's
    /// (the logger's label, e.g. `stratus-indexer`); `OTEL_SERVICE_NAME` overrides it.
    public static func services(_ settings: TracingSettings, logger: Logger) throws -> [any Service] {
        guard settings.enabled else { return [] }
        guard bootstrapped.withLock({ done in defer { done = true }; return !done }) else {
            throw ConfigurationProblem("tracing is set up once per process")
        }
        var configuration = OTel.Configuration.default
        configuration.serviceName = logger.label
        // The exporter logs each OTEL_* variable it reads with its value; a header's value may be a
        // collector's credential, so values are never logged.
        var diagnostics = logger
        diagnostics.handler = ValuesRedacted(wrapped: logger.handler)
        configuration.diagnosticLogger = .custom(diagnostics)
        configuration.logs.enabled = false
        configuration.metrics.enabled = false
        let backend = try OTel.makeTracingBackend(configuration: configuration)
        InstrumentationSystem.bootstrap(backend.factory)
        logger.info("tracing on: spans are exported over OTLP")
        return [backend.service]
    }
}

/// The exporter's diagnostic log without the values of the settings it read (`environment_value`,
/// `previous_value`, `new_value`): which variables were read stays visible, what they held never
/// reaches the log (`OTEL_EXPORTER_OTLP_HEADERS` may hold a credential).
struct ValuesRedacted: LogHandler {
    static let hidden: Set<String> = ["environment_value", "previous_value", "new_value"]
    var wrapped: any LogHandler

    var metadata: Logger.Metadata {
        get { wrapped.metadata }
        set { wrapped.metadata = newValue.filter { !Self.hidden.contains($0.key) } }
    }

    var logLevel: Logger.Level {
        get { wrapped.logLevel }
        set { wrapped.logLevel = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { wrapped[metadataKey: key] }
        set { wrapped[metadataKey: key] = Self.hidden.contains(key) ? newValue.map { _ in "<redacted>" } : newValue }
    }

    var metadataProvider: Logger.MetadataProvider? {
        get { wrapped.metadataProvider }
        set { wrapped.metadataProvider = newValue }
    }

    func log(event: LogEvent) {
        var event = event
        event.metadata = event.metadata?.filter { !Self.hidden.contains($0.key) }
        wrapped.log(event: event)
    }
}
