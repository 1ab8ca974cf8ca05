import Foundation

/// An error of a Stratus call: CloudKit's `serverErrorCode`, its `reason`, `retryAfter` when the
/// server says when to try again, and on `CONFLICT` (or `EXISTS`) the server's record. Errors of
/// the client itself (no network, an answer it cannot read, a key it lacks) have codes of their own.
public struct StratusKitError: Error, Sendable, Hashable, CustomStringConvertible {
    /// CloudKit's error codes, and the client's own (`NETWORK_FAILURE`, `INVALID_RESPONSE`,
    /// `MISSING_KEY`, `DECRYPTION_FAILED`, `INVALID_ARGUMENT`).
    public struct Code: RawRepresentable, Sendable, Hashable, Codable, CustomStringConvertible {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public init(_ rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        public static let accessDenied = Code("ACCESS_DENIED")
        public static let atomicError = Code("ATOMIC_ERROR")
        public static let authenticationFailed = Code("AUTHENTICATION_FAILED")
        public static let authenticationRequired = Code("AUTHENTICATION_REQUIRED")
        public static let badRequest = Code("BAD_REQUEST")
        public static let conflict = Code("CONFLICT")
        public static let exists = Code("EXISTS")
        public static let internalError = Code("INTERNAL_ERROR")
        public static let notFound = Code("NOT_FOUND")
        public static let quotaExceeded = Code("QUOTA_EXCEEDED")
        public static let throttled = Code("THROTTLED")
        public static let requestRateLimited = Code("REQUEST_RATE_LIMITED")
        public static let tryAgainLater = Code("TRY_AGAIN_LATER")
        public static let validatingReferenceError = Code("VALIDATING_REFERENCE_ERROR")
        public static let zoneNotFound = Code("ZONE_NOT_FOUND")
        public static let limitExceeded = Code("LIMIT_EXCEEDED")
        public static let changeTokenExpired = Code("CHANGE_TOKEN_EXPIRED")
        public static let zoneBusy = Code("ZONE_BUSY")
        // The client's own.
        public static let networkFailure = Code("NETWORK_FAILURE")
        public static let invalidResponse = Code("INVALID_RESPONSE")
        public static let invalidArgument = Code("INVALID_ARGUMENT")
        public static let missingKey = Code("MISSING_KEY")
        public static let decryptionFailed = Code("DECRYPTION_FAILED")
    }

    public var code: Code
    public var reason: String
    /// Seconds the server asks the client to wait before sending the same request again.
    public var retryAfter: Int?
    public var redirectURL: String?
    /// The HTTP status of the answer (0 when no answer came).
    public var httpStatus: Int
    /// The record the error is about, inside a batch.
    public var recordName: String?
    public var zoneID: ZoneID?
    /// The server's current record, on `CONFLICT` (and on `EXISTS` when the engine looked it up).
    public var serverRecord: Record?
    /// The request's id on the server (`uuid`), for its logs.
    public var uuid: String?

    public init(code: Code, reason: String, retryAfter: Int? = nil, httpStatus: Int = 0) {
        self.code = code
        self.reason = reason
        self.retryAfter = retryAfter
        self.httpStatus = httpStatus
    }

    public var description: String {
        var text = "\(code.rawValue): \(reason)"
        if let retryAfter { text += " (retry after \(retryAfter) s)" }
        if let recordName { text += " [\(recordName)]" }
        return text
    }

    /// Whether sending the same request again later may succeed: the server said so, or no
    /// answer came.
    public var isRetryable: Bool {
        [.tryAgainLater, .throttled, .requestRateLimited, .zoneBusy, .networkFailure].contains(code) || (code == .internalError && httpStatus >= 500)
    }

    /// The user is signed out or their credential ended: sign in again.
    public var isAccountFailure: Bool { code == .authenticationFailed || code == .authenticationRequired }

    static func invalidResponse(_ reason: String) -> StratusKitError { StratusKitError(code: .invalidResponse, reason: reason) }
    static func invalidArgument(_ reason: String) -> StratusKitError { StratusKitError(code: .invalidArgument, reason: reason) }

    /// Reads CloudKit's error dictionary (alone or inside a batch).
    init?(wire: JSON, httpStatus: Int, database: DatabaseScope? = nil) {
        guard let code = wire["serverErrorCode"]?.string else { return nil }
        self.init(code: Code(code), reason: wire["reason"]?.string ?? "", retryAfter: wire["retryAfter"]?.int64.map { Int(clamping: $0) }, httpStatus: httpStatus)
        redirectURL = wire["redirectURL"]?.string
        recordName = wire["recordName"]?.string
        zoneID = ZoneID(wire: wire["zoneID"])
        uuid = wire["uuid"]?.string
        if let server = wire["serverRecord"] {
            serverRecord = try? RecordCoding.decode(server, zoneID: zoneID ?? ZoneID(wire: server["zoneID"]) ?? .default)
        }
    }
}
