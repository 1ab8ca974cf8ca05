import StratusCore
import Tracing

/// The trace context carried through the pipeline as a W3C `traceparent` (`TraceParent`): taken
/// from the running task when an event is appended, and turned back into a context by the relay and
/// the workers. With tracing off there is no context to take and none to continue: every call here
/// is then a task-local read and nothing else.
public enum TraceContext {
    /// The running task's trace context as a `traceparent`, or nil when there is none (tracing off,
    /// or work that no traced request or apply started).
    public static func currentTraceParent() -> String? {
        guard let context = InstrumentationContext.current else { return nil }
        var carrier = Carrier()
        InstrumentationSystem.instrument.inject(context, into: &carrier, using: CarrierAccess())
        return carrier.traceParent.flatMap(TraceParent.validated)
    }

    /// `causation` carrying the running task's trace context, unless it carries one already: what
    /// an event is appended with, and what a record's event is sized with (`WriteLimits.savedEvent`),
    /// so the size checked is the size sent.
    public static func stamped(_ causation: Causation) -> Causation {
        guard causation.traceParent == nil, let trace = currentTraceParent() else { return causation }
        var stamped = causation
        stamped.traceParent = trace
        return stamped
    }

    /// The context that continues the trace `traceParent` names (the parent of a span the caller
    /// starts); nil when there is none to continue.
    public static func context(continuing traceParent: String?) -> InstrumentationContext? {
        guard let traceParent = traceParent.flatMap(TraceParent.validated) else { return nil }
        var context = InstrumentationContext.topLevel
        InstrumentationSystem.instrument.extract(Carrier(traceParent: traceParent), into: &context, using: CarrierAccess())
        return context
    }

    /// The context that continues the trace an event carries.
    public static func context(of event: EventEnvelope) -> InstrumentationContext? {
        context(continuing: event.causation.traceParent)
    }

    /// The one header the pipeline carries; other keys a propagator offers (`tracestate`, baggage)
    /// are dropped, so an event's size stays bounded.
    struct Carrier: Sendable {
        var traceParent: String?
    }

    struct CarrierAccess: Injector, Extractor {
        func inject(_ value: String, forKey key: String, into carrier: inout TraceContext.Carrier) {
            if key == "traceparent" { carrier.traceParent = value }
        }

        func extract(key: String, from carrier: TraceContext.Carrier) -> String? {
            key == "traceparent" ? carrier.traceParent : nil
        }
    }
}
