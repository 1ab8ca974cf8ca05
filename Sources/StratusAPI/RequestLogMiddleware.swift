import Foundation
import Hummingbird
import Logging

/// Logs each request's method, path (never the query: it carries API and web auth tokens), status and duration.
struct RequestLogMiddleware<Context: StratusRequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let started = ContinuousClock.now
        var status = 500
        defer {
            let milliseconds = (ContinuousClock.now - started) / .milliseconds(1)
            context.logger.info("request", metadata: [
                "method": "\(request.method)", "path": "\(request.uri.path)", "status": "\(status)",
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
}
