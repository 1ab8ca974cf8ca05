import Crypto
import Foundation

/// Which APNs servers to talk to.
public struct APNsEnvironment: Sendable, Hashable, CustomStringConvertible {
    /// The servers' base URL, without a trailing slash.
    public var baseURL: String

    /// Apple's production servers, for apps from the App Store and TestFlight.
    public static let production = APNsEnvironment(baseURL: "https://api.push.apple.com")
    /// Apple's development servers, for apps signed for development.
    public static let development = APNsEnvironment(baseURL: "https://api.sandbox.push.apple.com")

    /// Any other server that speaks APNs's HTTP/2 protocol (tests).
    public init(baseURL: String) {
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
    }

    /// The base URL.
    public var description: String { baseURL }
}

/// Token-based APNs authentication: the team, the signing key (.p8) and its id, the app's topic
/// and the servers to use.
public struct APNsCredentials: Sendable, CustomStringConvertible {
    /// The Apple Developer team id, the provider token's issuer.
    public var teamID: String
    /// The id of the signing key, the provider token's `kid`.
    public var keyID: String
    // The key's 32 raw bytes rather than the key itself, which is not `Sendable`.
    private var privateKeyBytes: Data
    /// The app's bundle id (the `apns-topic`).
    public var topic: String
    /// The servers to use.
    public var environment: APNsEnvironment

    /// Creates credentials from the .p8 file's PEM text; throws when it is not a P-256 private key.
    public init(teamID: String, keyID: String, privateKeyPEM: String, topic: String, environment: APNsEnvironment) throws(APNsCredentialsError) {
        let key: P256.Signing.PrivateKey
        do {
            key = try P256.Signing.PrivateKey(pemRepresentation: privateKeyPEM)
        } catch {
            // The key text itself never goes into the error.
            throw APNsCredentialsError(message: "the private key of key id \(keyID) is not a PEM-encoded P-256 key (\(type(of: error)))")
        }
        self.init(teamID: teamID, keyID: keyID, privateKey: key, topic: topic, environment: environment)
    }

    /// Creates credentials from an already parsed key.
    public init(teamID: String, keyID: String, privateKey: P256.Signing.PrivateKey, topic: String, environment: APNsEnvironment) {
        self.teamID = teamID
        self.keyID = keyID
        self.privateKeyBytes = privateKey.rawRepresentation
        self.topic = topic
        self.environment = environment
    }

    /// The P-256 signing key from the .p8 file.
    func signingKey() throws -> P256.Signing.PrivateKey {
        try P256.Signing.PrivateKey(rawRepresentation: privateKeyBytes)
    }

    /// The credentials without the private key.
    public var description: String {
        "APNsCredentials(teamID: \(teamID), keyID: \(keyID), topic: \(topic), environment: \(environment), privateKey: <redacted>)"
    }
}

/// Credentials that cannot be used.
public struct APNsCredentialsError: Error, Sendable, CustomStringConvertible {
    /// What is wrong; never contains key material.
    public var message: String
    /// The message.
    public var description: String { "APNsCredentialsError: \(message)" }
}
