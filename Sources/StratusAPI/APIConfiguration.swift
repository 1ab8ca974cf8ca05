import Foundation
import StratusCore

/// Request limits, with CloudKit's published values as defaults.
public struct APILimits: Sendable {
    /// Operations per request.
    public var maxOperations: Int = 200
    /// Bytes per request body.
    public var maxRequestBytes: Int = 10 * 1024 * 1024
    /// Bytes of one record's fields.
    public var maxRecordBytes: Int = 1_000_000
    /// Changes (records or zones) per sync response; a client's `resultsLimit` is capped by it.
    public var maxResults: Int = 200

    /// The defaults.
    public init() {}
}

/// Everything the HTTP API needs to know.
public struct APIConfiguration: Sendable {
    /// The address the API listens on unless configured otherwise.
    public static let defaultHost = "127.0.0.1"
    /// The address to listen on.
    public var host: String = defaultHost
    /// The port to listen on.
    public var port: Int = 8080
    /// Request limits.
    public var limits = APILimits()
    /// The key web auth tokens are signed with.
    public var secretKey: SecretKey
    /// Where AUTHENTICATION_REQUIRED sends a client to sign in (`{container}` is replaced); nil for
    /// the built-in sign-in endpoint `/auth/1/{container}/signin`.
    public var signInURL: String?
    /// Seconds a web auth token from the sign-in endpoint stays valid.
    public var webAuthTokenLifetime: Int64 = 7 * 86_400

    /// Creates a configuration.
    public init(secretKey: SecretKey) { self.secretKey = secretKey }
}

/// A named readiness check: throws when the dependency is unreachable.
public struct ReadinessCheck: Sendable {
    /// What is checked, e.g. `database`.
    public var name: String
    /// The check.
    public var check: @Sendable () async throws -> Void

    /// Creates a check.
    public init(name: String, check: @escaping @Sendable () async throws -> Void) {
        self.name = name
        self.check = check
    }
}
