import Foundation
import Hummingbird
import Logging
import StratusCore
import StratusPostgres
import Synchronization

/// CORS for web apps on other origins (CloudKit JS calls the API from the app's page): a request
/// with an `Origin` to a container's paths (`/database/1/{container}/…`, `/auth/1/{container}/…`,
/// `/device/1/{container}/…`) is answered with `Access-Control-Allow-Origin` when the container
/// allows that origin (`AllowedOrigins`; any origin unless it lists some, as Apple's API tokens do),
/// errors included, so a page can read AUTHENTICATION_REQUIRED's `redirectURL`. A preflight
/// (`OPTIONS`) is answered here: 204 with the methods and headers the API takes, or ACCESS_DENIED
/// for an origin the container does not allow. Asset URLs (`/assets/1/…`), which carry their own
/// grant, allow any origin. No credentials mode: tokens travel in the URL, never in cookies.
struct CrossOriginMiddleware<Context: StratusRequestContext>: RouterMiddleware {
    let origins: ContainerOrigins

    enum Rule: Equatable {
        case container(String)
        case anyOrigin
    }

    /// Which rule a path falls under; nil: no CORS (the console, operations endpoints).
    static func rule(of path: String) -> Rule? {
        let parts = path.split(separator: "/", maxSplits: 3, omittingEmptySubsequences: true)
        guard parts.count >= 2, parts[1] == "1" else { return nil }
        switch parts[0] {
        case "assets": return .anyOrigin
        case "database", "auth", "device":
            guard parts.count >= 3, let container = String(parts[2]).removingPercentEncoding, !container.isEmpty, container.utf8.count <= 255 else { return nil }
            return .container(container)
        default: return nil
        }
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let origin = request.headers[.origin], let rule = Self.rule(of: request.uri.path) else { return try await next(request, context) }
        let allowed: Bool
        do {
            switch rule {
            case .anyOrigin: allowed = SignInPageRequest.origin(origin) != nil
            case .container(let container): allowed = try await origins.allows(origin, container: container, logger: context.logger)
            }
        } catch {
            context.logger.warning("the container's allowed origins could not be read", metadata: ["error": "\(String(reflecting: error))"])
            let failure = StratusError(.tryAgainLater, "the container's allowed origins could not be read; retry later")
            guard request.method == .options else { return try await next(request, context) }
            return try CloudKitErrorResponse(error: failure, requestID: context.requestID).response(from: request, context: context)
        }
        if request.method == .options {
            guard allowed else {
                let refusal = StratusError(.accessDenied, "the origin '\(ClientText.excerpt(origin))' may not call this container from a browser")
                return try CloudKitErrorResponse(error: refusal, requestID: context.requestID).response(from: request, context: context)
            }
            var response = Response(status: .noContent)
            Self.allow(origin, &response.headers)
            response.headers[.accessControlAllowMethods] = AllowedOrigins.allowedMethods
            response.headers[.accessControlAllowHeaders] = AllowedOrigins.allowedHeaders
            response.headers[.accessControlMaxAge] = "\(AllowedOrigins.preflightMaxAge)"
            return response
        }
        var response: Response
        do {
            response = try await next(request, context)
        } catch let error as HTTPResponseError {
            response = try error.response(from: request, context: context)
        }
        if allowed {
            Self.allow(origin, &response.headers)
            response.headers[.accessControlExposeHeaders] = "X-Request-ID, Retry-After"
        }
        return response
    }

    static func allow(_ origin: String, _ headers: inout HTTPFields) {
        headers[.accessControlAllowOrigin] = origin
        headers[.vary] = "Origin"
    }
}

/// The allowed origins of containers, read from the database and kept for a few seconds in each
/// API process (a change reaches every process within `keep`).
final class ContainerOrigins: Sendable {
    /// How long an answer is kept.
    static let keep: Duration = .seconds(5)
    /// The most containers kept; past it, everything kept is forgotten.
    static let capacity = 1_000

    private let containers: ContainerStore
    private let kept = Mutex<[String: (readAt: ContinuousClock.Instant, origins: [String]??)]>([:])

    init(containers: ContainerStore) { self.containers = containers }

    /// Whether a page of `origin` may call `container`; false for a container that does not exist.
    func allows(_ origin: String, container: String, logger: Logger) async throws -> Bool {
        let now = ContinuousClock.now
        let origins: [String]??
        if let entry = kept.withLock({ $0[container] }), now - entry.readAt < Self.keep {
            origins = entry.origins
        } else {
            origins = try await containers.allowedOrigins(container: container, logger: logger)
            kept.withLock { kept in
                if kept[container] == nil, kept.count >= Self.capacity { kept.removeAll() }
                kept[container] = (now, origins)
            }
        }
        guard case .some(let allowed) = origins else { return false }
        return AllowedOrigins.allows(origin, allowed)
    }
}
