import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOSSL

/// Settings of an `APNsSender`.
public struct APNsSenderConfiguration: Sendable {
    /// PEM certificates to trust instead of the system's roots (a test server's CA); empty means
    /// the system's roots. Verification is never turned off.
    public var trustedCertificatesPEM: [String] = []
    /// The whole request, from connecting to the end of the response.
    public var timeout: Duration = .seconds(30)
    /// How long connecting may take.
    public var connectTimeout: Duration = .seconds(10)
    /// How long a provider token is used before a new one is made (APNs refuses them after an
    /// hour and throttles refreshing more often than every 20 minutes).
    public var tokenRefreshInterval: Duration = .seconds(50 * 60)

    /// Creates the default configuration.
    public init() {}
}

/// Sends notifications to APNs over HTTP/2 with token-based authentication, one shared client
/// and one cached provider token. Call `shutdown()` once when done.
public final class APNsSender: Sendable {
    private let client: HTTPClient
    private let credentials: APNsCredentials
    private let configuration: APNsSenderConfiguration
    private let tokens: APNsTokenCache
    private let logger: Logger

    /// Creates a sender; throws when a trusted certificate is not PEM.
    public init(
        credentials: APNsCredentials, configuration: APNsSenderConfiguration = .init(),
        logger: Logger = Logger(label: "stratus.push.apns")
    ) throws {
        var tls = TLSConfiguration.makeClientConfiguration()
        if !configuration.trustedCertificatesPEM.isEmpty {
            let certificates = try configuration.trustedCertificatesPEM.flatMap { try NIOSSLCertificate.fromPEMBytes(Array($0.utf8)) }
            tls.trustRoots = .certificates(certificates)
        }
        // APNs speaks HTTP/2 only. The client's automatic mode offers h2 first by ALPN and uses it
        // when the server picks it, which APNs always does; `send` refuses an answer over anything else.
        var http = HTTPClient.Configuration(
            tlsConfiguration: tls, redirectConfiguration: .disallow,
            timeout: .init(connect: TimeAmount(configuration.connectTimeout)))
        http.httpVersion = .automatic
        // No client spans: they would record the device token in the URL's path.
        http.tracing.tracer = nil
        self.client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: http, backgroundActivityLogger: logger)
        self.credentials = credentials
        self.configuration = configuration
        self.tokens = APNsTokenCache(credentials: credentials, refreshAfter: configuration.tokenRefreshInterval)
        self.logger = logger
    }

    /// Closes the HTTP client's connections; the sender is unusable afterwards.
    public func shutdown() async throws {
        try await client.shutdown()
    }

    /// Sends `push` and says what became of it. A provider token APNs calls expired or invalid is
    /// replaced and the push sent once more within this call. Never throws: every failure is an outcome.
    public func send(_ push: APNsPush) async -> APNsOutcome {
        if let problem = push.deviceTokenProblem { return .unregistered(reason: problem) }
        if let problem = push.requestProblem { return .rejected(reason: problem) }
        var outcome: APNsOutcome
        switch await attempt(push) {
        case .outcome(let first):
            outcome = first
        case .providerTokenRefused(let token, let reason):
            tokens.invalidate(token)
            logger.info("APNs refused the provider token; sending again with a new one", metadata: ["apns.reason": "\(reason)"])
            switch await attempt(push) {
            case .outcome(let second): outcome = second
            case .providerTokenRefused(_, let again): outcome = .retry(reason: "APNs refused a new provider token too: \(again)")
            }
        }
        logger.debug("APNs push finished", metadata: ["apns.id": "\(push.apnsID)", "apns.outcome": "\(outcome)"])
        return outcome
    }

    private enum Answer {
        case outcome(APNsOutcome)
        case providerTokenRefused(token: String, reason: String)
    }

    private func attempt(_ push: APNsPush) async -> Answer {
        let token: String
        do {
            token = try tokens.token()
        } catch {
            return .outcome(.retry(reason: "cannot sign a provider token: \(type(of: error))"))
        }
        var request = HTTPClientRequest(url: "\(credentials.environment.baseURL)/3/device/\(push.deviceToken.lowercased())")
        request.method = .POST
        request.headers.add(name: "authorization", value: "bearer \(token)")
        request.headers.add(name: "apns-push-type", value: push.pushType.rawValue)
        request.headers.add(name: "apns-topic", value: credentials.topic)
        request.headers.add(name: "apns-priority", value: String(push.effectivePriority.rawValue))
        request.headers.add(name: "apns-expiration", value: push.expiration.map { String(Int64($0.timeIntervalSince1970)) } ?? "0")
        if let collapseID = push.collapseID { request.headers.add(name: "apns-collapse-id", value: collapseID) }
        request.headers.add(name: "apns-id", value: push.apnsID.uuidString)
        request.headers.add(name: "content-type", value: "application/json")
        request.body = .bytes(ByteBuffer(bytes: push.payload))

        let response: HTTPClientResponse
        do {
            response = try await client.execute(request, timeout: TimeAmount(configuration.timeout), logger: logger)
        } catch let error as HTTPClientError where error == .deadlineExceeded || error == .readTimeout || error == .connectTimeout {
            return .outcome(.retry(reason: "no answer from APNs within \(configuration.timeout) (\(error))"))
        } catch {
            return .outcome(.retry(reason: "network error: \(error)"))
        }
        let body = await BoundedBody.read(response.body)
        guard response.version.major == 2 else {
            return .outcome(.retry(reason: "the server answered over HTTP/\(response.version.major).\(response.version.minor); APNs speaks HTTP/2 only"))
        }
        let status = Int(response.status.code)
        if status == 200 {
            let echoed = response.headers.first(name: "apns-id").flatMap(UUID.init(uuidString:))
            return .outcome(.delivered(apnsID: echoed ?? push.apnsID))
        }
        let reason = APNsReason.parse(body)
        let described = "HTTP \(status)" + (reason.map { " \($0)" } ?? "")
        switch (status, reason) {
        case (403, "ExpiredProviderToken"?), (403, "InvalidProviderToken"?):
            return .providerTokenRefused(token: token, reason: described)
        case (410, _), (_, "BadDeviceToken"?), (_, "Unregistered"?), (_, "DeviceTokenNotForTopic"?):
            return .outcome(.unregistered(reason: described))
        case (429, _), (500..<600, _):
            return .outcome(.retry(reason: described))
        default:
            return .outcome(.rejected(reason: described))
        }
    }
}

/// APNs's error body, `{"reason": "…"}`.
enum APNsReason {
    private struct Body: Decodable {
        var reason: String
    }

    /// The reason, cut to 100 characters, or nil when the body is not such JSON.
    static func parse(_ bytes: [UInt8]) -> String? {
        guard let body = try? JSONDecoder().decode(Body.self, from: Data(bytes)) else { return nil }
        return BoundedBody.excerpt(Array(body.reason.utf8), length: 100)
    }
}
