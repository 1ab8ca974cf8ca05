/// A CloudKit `serverErrorCode`. A struct rather than an enum so new codes never break a caller's `switch`.
public struct ServerErrorCode: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The code as it appears on the wire.
    public var rawValue: String
    /// The HTTP status CloudKit answers with for this code.
    public var httpStatus: Int

    /// Creates a code.
    public init(_ rawValue: String, httpStatus: Int) {
        self.rawValue = rawValue
        self.httpStatus = httpStatus
    }

    public var description: String { rawValue }

    public static let accessDenied = ServerErrorCode("ACCESS_DENIED", httpStatus: 403)
    public static let atomicError = ServerErrorCode("ATOMIC_ERROR", httpStatus: 400)
    public static let authenticationFailed = ServerErrorCode("AUTHENTICATION_FAILED", httpStatus: 401)
    public static let authenticationRequired = ServerErrorCode("AUTHENTICATION_REQUIRED", httpStatus: 421)
    public static let badRequest = ServerErrorCode("BAD_REQUEST", httpStatus: 400)
    public static let conflict = ServerErrorCode("CONFLICT", httpStatus: 409)
    public static let exists = ServerErrorCode("EXISTS", httpStatus: 409)
    public static let limitExceeded = ServerErrorCode("LIMIT_EXCEEDED", httpStatus: 400)
    public static let internalError = ServerErrorCode("INTERNAL_ERROR", httpStatus: 500)
    public static let notFound = ServerErrorCode("NOT_FOUND", httpStatus: 404)
    public static let quotaExceeded = ServerErrorCode("QUOTA_EXCEEDED", httpStatus: 413)
    public static let throttled = ServerErrorCode("THROTTLED", httpStatus: 429)
    public static let tryAgainLater = ServerErrorCode("TRY_AGAIN_LATER", httpStatus: 503)
    public static let validatingReferenceError = ServerErrorCode("VALIDATING_REFERENCE_ERROR", httpStatus: 412)
    public static let zoneNotFound = ServerErrorCode("ZONE_NOT_FOUND", httpStatus: 404)

    /// The codes a client should send the same request again for, after `retryAfter` seconds:
    /// a passing condition on the server's side, not a problem with the request.
    public var isRetryable: Bool { self == .tryAgainLater || self == .throttled }

    /// The `retryAfter` (seconds) of a retryable error that names none.
    public static let defaultRetryAfter = 1
}

/// An error a client may see: a CloudKit code, a reason safe to show, and optional retry or sign-in hints.
///
/// The reason never carries SQL, secrets or internal identifiers.
public struct StratusError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The CloudKit error code.
    public var code: ServerErrorCode
    /// A human-readable reason, safe to return to the client.
    public var reason: String
    /// Seconds the client should wait before retrying: always set for retryable codes.
    public var retryAfter: Int?
    /// Where to sign in, for AUTHENTICATION_REQUIRED.
    public var redirectURL: String?

    /// Creates an error.
    public init(_ code: ServerErrorCode, _ reason: String, retryAfter: Int? = nil, redirectURL: String? = nil) {
        self.code = code
        self.reason = reason
        // Every retryable error tells the client when to retry.
        self.retryAfter = retryAfter ?? (code.isRetryable ? ServerErrorCode.defaultRetryAfter : nil)
        self.redirectURL = redirectURL
    }

    public var description: String { "\(code.rawValue): \(reason)" }
}
