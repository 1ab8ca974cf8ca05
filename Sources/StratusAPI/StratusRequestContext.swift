import Hummingbird
import Logging

/// What every Stratus route needs of its request context.
public protocol StratusRequestContext: RequestContext {
    /// The id of the request: in logs, in `X-Request-ID` and in the events the request appends.
    var requestID: String { get }
    /// The client's IP address, as the connection reports it (nil when it has none).
    var clientAddress: String? { get }
}

extension StratusRequestContext {
    public var clientAddress: String? { nil }
}

/// The request context of the HTTP API.
public struct APIRequestContext: StratusRequestContext {
    public var coreContext: CoreRequestContextStorage
    /// Reads the connection's peer address, only when a route asks for it (sign-in).
    private let peer: @Sendable () -> String?

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.peer = { [channel = source.channel] in channel.remoteAddress?.ipAddress }
    }

    /// The IP address of the connection's peer: the client, or a proxy in front of the API.
    public var clientAddress: String? { peer() }

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
