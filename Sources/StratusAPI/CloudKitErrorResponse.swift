import Foundation
import Hummingbird
import StratusCore

/// Renders a `StratusError` as CloudKit's error dictionary with its HTTP status.
struct CloudKitErrorResponse: HTTPResponseError {
    let error: StratusError
    let requestID: String

    var status: HTTPResponse.Status { .init(code: error.code.httpStatus) }

    func response(from request: Request, context: some RequestContext) throws -> Response {
        let body = ErrorDictionary(error, uuid: requestID)
        var headers = HTTPFields()
        headers[.contentType] = "application/json; charset=utf-8"
        if let retryAfter = error.retryAfter { headers[.retryAfter] = "\(retryAfter)" }
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(data: EventCoding.encode(body))))
    }
}

/// CloudKit's error dictionary, alone or inside a batch result (then with `zoneID` or `recordName`).
struct ErrorDictionary: Encodable {
    var uuid: String
    var serverErrorCode: String
    var reason: String
    var retryAfter: Int?
    var redirectURL: String?
    var zoneID: WireZoneID?

    init(_ error: StratusError, uuid: String, zoneID: WireZoneID? = nil) {
        self.uuid = uuid
        self.serverErrorCode = error.code.rawValue
        self.reason = error.reason
        self.retryAfter = error.retryAfter
        self.redirectURL = error.redirectURL
        self.zoneID = zoneID
    }
}

/// Turns anything thrown by a route into a CloudKit error: client errors keep their reason;
/// everything else becomes INTERNAL_ERROR without details (they go to the log only).
struct CloudKitErrorMiddleware<Context: StratusRequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as StratusError {
            throw CloudKitErrorResponse(error: error, requestID: context.requestID)
        } catch let error as CloudKitErrorResponse {
            throw error
        } catch let error as HTTPError {
            let code: ServerErrorCode = switch error.status.code {
            case 404: .notFound
            case 413: .quotaExceeded
            case 429: .throttled
            case 503: .tryAgainLater
            case 400..<500: .badRequest
            default: .internalError
            }
            if code == .internalError { context.logger.error("request failed", metadata: ["error": "\(String(reflecting: error))"]) }
            throw CloudKitErrorResponse(error: StratusError(code, code == .internalError ? "Internal error" : (error.body ?? "\(error.status.reasonPhrase)")), requestID: context.requestID)
        } catch {
            context.logger.error("request failed", metadata: ["error": "\(String(reflecting: error))"])
            throw CloudKitErrorResponse(error: StratusError(.internalError, "Internal error"), requestID: context.requestID)
        }
    }
}
