import Foundation
import Hummingbird
import Logging

/// Logs each request's method, path (never the query: it carries API and web auth tokens; nor the
/// credential a path carries: an asset URL's grant, a courier's token), status and duration.
struct RequestLogMiddleware<Context: StratusRequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let started = ContinuousClock.now
        var status = 500
        defer {
            let milliseconds = (ContinuousClock.now - started) / .milliseconds(1)
            context.logger.info("request", metadata: [
                "method": "\(request.method)", "path": "\(Self.loggable(request.uri.path))", "status": "\(status)",
                "ms": "\(String(format: "%.1f", milliseconds))",
            ])
        }
        do {
            let response = try await next(request, context)
            status = response.status.code
            return response
        } catch let error as HTTPResponseError {
            status = error.status.code
            throw error
        }
    }

    /// The path without the credential it may carry: the grant of an upload or download URL, the
    /// token of a web courier.
    static func loggable(_ path: String) -> String {
        for prefix in ["/assets/1/upload/", "/assets/1/download/"] where path.hasPrefix(prefix) {
            return prefix + "…"
        }
        if let range = path.range(of: "/courier/") {
            let rest = path[range.upperBound...]
            let end = rest.firstIndex(of: "/") ?? rest.endIndex
            return String(path[..<range.upperBound]) + "…" + rest[end...]
        }
        return path
    }
}
