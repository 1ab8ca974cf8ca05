import Foundation
import Hummingbird
import StratusCore
import Synchronization

/// The latest error answers of this process, for the console's request-id search: when, the
/// request id, method, path (never the query, which carries tokens), status, and the CloudKit code
/// and reason the client got. Kept in memory, the last `capacity`.
final class RecentErrors: Sendable {
    struct Entry: Sendable {
        var at: Date
        var requestID: String
        var method: String
        var path: String
        var status: Int
        var code: String
        var reason: String
    }

    static let capacity = 500
    private let entries = Mutex<[Entry]>([])

    func record(_ entry: Entry) {
        entries.withLock { entries in
            entries.append(entry)
            if entries.count > Self.capacity { entries.removeFirst(entries.count - Self.capacity) }
        }
    }

    /// Newest first, at most `limit`, those whose request id starts with `requestID` when given.
    func search(requestID: String?, limit: Int) -> [Entry] {
        let all = entries.withLock { $0 }
        let matching = all.reversed().filter { entry in requestID.map { entry.requestID.hasPrefix($0) } ?? true }
        return Array(matching.prefix(limit))
    }
}

/// Records every error answer the API gives (thrown as CloudKit's error dictionary, or a response
/// of status 400 or more) in `RecentErrors`, then lets it through unchanged.
struct RecentErrorsMiddleware<Context: StratusRequestContext>: RouterMiddleware {
    let recent: RecentErrors

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let path = String(request.uri.path.prefix(512))
        do {
            let response = try await next(request, context)
            if response.status.code >= 400 {
                recent.record(.init(at: Date(), requestID: context.requestID, method: request.method.rawValue, path: path,
                                    status: Int(response.status.code), code: "", reason: response.status.reasonPhrase))
            }
            return response
        } catch let error as CloudKitErrorResponse {
            recent.record(.init(at: Date(), requestID: context.requestID, method: request.method.rawValue, path: path,
                                status: error.error.code.httpStatus, code: error.error.code.rawValue, reason: String(error.error.reason.prefix(500))))
            throw error
        }
    }
}
