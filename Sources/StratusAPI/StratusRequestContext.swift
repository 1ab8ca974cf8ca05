import Hummingbird
import Logging

/// What every Stratus route needs of its request context.
public protocol StratusRequestContext: RequestContext {
    /// The id of the request: in logs, in `X-Request-ID` and in the events the request appends.
    var requestID: String { get }
}

/// The request context of the HTTP API.
public struct APIRequestContext: StratusRequestContext {
    public var coreContext: CoreRequestContextStorage

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
    }

    public var requestID: String { id }
}

/// Echoes the request id in a response header so clients can quote it — on errors too, which the
/// server would otherwise render after the middleware chain, without the header.
struct RequestIDMiddleware<Context: StratusRequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var response: Response
        do {
            response = try await next(request, context)
        } catch let error as HTTPResponseError {
            response = try error.response(from: request, context: context)
        }
        response.headers[.init("X-Request-ID")!] = context.requestID
        return response
    }
}
