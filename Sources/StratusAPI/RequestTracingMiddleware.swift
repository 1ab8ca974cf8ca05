import Hummingbird
import StratusCore
import StratusPostgres
import Tracing

/// A server span for each request, in the trace the request's own `traceparent` header names or in
/// a new one; the database transactions it runs and the events it appends continue it
/// (`TraceContext`). It records what the request log records — method, path without the
/// credential a path may carry, status, request id — never the query (it carries API and web auth
/// tokens), a header or a body. Added only when tracing is on (`APIConfiguration.tracing`): off,
/// requests pay nothing for it.
struct RequestTracingMiddleware<Context: StratusRequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var parent = InstrumentationContext.current ?? .topLevel
        if let header = request.headers[.init("traceparent")!], let traceParent = TraceParent.validated(header),
           let incoming = TraceContext.context(continuing: traceParent) {
            parent = incoming
        }
        let span = startSpan("\(request.method.rawValue)", context: parent, ofKind: .server)
        defer { span.end() }
        if span.isRecording {
            span.attributes["http.request.method"] = request.method.rawValue
            span.attributes["url.path"] = RequestLogMiddleware<Context>.loggable(request.uri.path)
            span.attributes["stratus.request_id"] = context.requestID
        }
        do {
            let response = try await InstrumentationContext.$current.withValue(span.context) { try await next(request, context) }
            finish(span, request: request, context: context, status: Int(response.status.code))
            return response
        } catch {
            let status = Int((error as? any HTTPResponseError)?.status.code ?? 500)
            finish(span, request: request, context: context, status: status)
            throw error
        }
    }

    private func finish(_ span: any Span, request: Request, context: Context, status: Int) {
        if let route = context.endpointPath { span.operationName = "\(request.method.rawValue) \(route)" }
        span.attributes["http.route"] = context.endpointPath
        span.attributes["http.response.status_code"] = status
        if status >= 500 { span.setStatus(SpanStatus(code: .error)) }
    }
}
