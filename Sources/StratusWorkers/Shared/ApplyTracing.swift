import Logging
import StratusCore
import StratusPostgres
import Tracing

/// The spans of a worker's apply: one in each trace the applied events carry (a batch may hold
/// several requests' events, each of which must find the worker in its own trace), at most
/// `maximumTraces`; the apply's database transaction runs under the first. Events that carry no
/// trace (tracing off where they were written) start none, so with tracing off an apply costs a
/// look at each event's causation.
enum ApplyTracing {
    /// Traces one apply joins at most (a batch may hold hundreds of requests' events); the spans
    /// beyond the first are linked to it.
    static let maximumTraces = 32

    static func span<T>(_ worker: String, _ events: some Collection<EventEnvelope>, _ body: () async throws -> T) async throws -> T {
        guard events.contains(where: { $0.causation.traceParent != nil }) else { return try await body() }
        var traces: Set<String> = []
        var spans: [any Span] = []
        for event in events {
            guard spans.count < maximumTraces, let trace = event.causation.traceParent, traces.insert(trace).inserted,
                  let context = TraceContext.context(continuing: trace) else { continue }
            let span = startSpan("\(worker) apply", context: context, ofKind: .consumer)
            if span.isRecording {
                span.attributes["stratus.worker"] = worker
                span.attributes["stratus.events"] = events.count
                span.attributes["stratus.event.id"] = event.id
                span.attributes["stratus.event.type"] = event.type.rawValue
                if let first = spans.first { span.addLink(SpanLink(context: first.context, attributes: [:])) }
            }
            spans.append(span)
        }
        guard let first = spans.first else { return try await body() }
        defer { for span in spans { span.end() } }
        do {
            return try await InstrumentationContext.$current.withValue(first.context) { try await body() }
        } catch {
            for span in spans { span.setStatus(SpanStatus(code: .error, message: PostgresStore.describe(error))) }
            throw error
        }
    }
}
