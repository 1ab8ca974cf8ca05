import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOPosix
import StratusCore
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// How issuers' key sets are fetched (`STRATUS_JWKS_*`).
public struct KeySetSettings: Sendable {
    /// `STRATUS_JWKS_ALLOW_PRIVATE_ADDRESSES`: whether a key set may be fetched from a loopback or
    /// private address, and then over plain http (tests and local stacks). Off: only public
    /// addresses, over https.
    public var allowPrivateAddresses = false
    /// The longest one fetch may take, connection included.
    public var timeout: Duration = .seconds(10)
    /// How long a set is kept, and how often an unknown key id may fetch it again.
    public var refresh = KeySetRefresh()

    /// The defaults.
    public init() {}
}

/// The key sets of the issuers containers trust, fetched over HTTP and kept (`KeySetRefresh`
/// decides when one is fetched again). A fetch is bounded in time and size, follows no
/// redirect, and connects only to the address it checked: the host is resolved first (on NIO's
/// thread pool, never on a cooperative thread), every address it resolves to must be public
/// unless the settings allow private ones, and the connection goes to that address.
public final class IssuerKeys: Sendable {
    /// The most key set URLs kept; past it, everything kept is forgotten.
    public static let capacity = 1_000

    private struct Entry {
        var kept: KeySetRefresh.Kept
        var keys: KeySet
    }

    private let settings: KeySetSettings
    private let entries = Mutex<[String: Entry]>([:])
    /// Authorization endpoints from discovery documents, by issuer.
    private let endpoints = Mutex<[String: (fetchedAt: Int64, endpoint: String)]>([:])
    private let logger: Logger

    /// Creates an empty cache.
    public init(settings: KeySetSettings = KeySetSettings(), logger: Logger = Logger(label: "stratus.identity.keys")) {
        self.settings = settings
        self.logger = logger
    }

    /// The key `keyID` of `issuer`'s set, fetched when the kept set is missing, old, or (at most
    /// once per refetch interval) lacks the key id.
    public func key(_ keyID: String, of issuer: TrustedIssuer) async throws -> VerificationKey {
        let url = issuer.keySetURL
        let now = Int64(Date().timeIntervalSince1970)
        let refresh = settings.refresh
        let (decision, kept): (KeySetRefresh.Decision, Entry?) = entries.withLock { entries in
            let entry = entries[url]
            let decision = refresh.decide(keyID: keyID, kept: entry?.kept, now: now)
            // Recorded before the fetch: concurrent tokens with unknown key ids fetch once.
            if decision == .refetch { entries[url]?.kept.lastRefetchAt = now }
            return (decision, entry)
        }
        switch decision {
        case .use:
            if let key = kept?.keys.keys[keyID] { return key }
            throw Self.unknownKey(keyID)
        case .unknownKey:
            throw Self.unknownKey(keyID)
        case .fetch, .refetch:
            let keys = try await fetch(url)
            entries.withLock { entries in
                if entries[url] == nil, entries.count >= Self.capacity { entries.removeAll() }
                let lastRefetch = decision == .refetch ? now : entries[url]?.kept.lastRefetchAt
                entries[url] = Entry(kept: .init(fetchedAt: now, keyIDs: Set(keys.keys.keys), lastRefetchAt: lastRefetch), keys: keys)
            }
            logger.info("fetched an issuer's key set", metadata: ["issuer": "\(issuer.issuer)", "keys": "\(keys.keys.count)"])
            guard let key = keys.keys[keyID] else { throw Self.unknownKey(keyID) }
            return key
        }
    }

    static func unknownKey(_ keyID: String) -> StratusError {
        StratusError(.authenticationFailed, "idToken is signed with key '\(ClientText.excerpt(keyID))', which is not in the issuer's key set")
    }

    /// Fetches and reads a key set.
    func fetch(_ text: String) async throws -> KeySet {
        try KeySet.parse(try await download(text, what: "key set", place: "JWKS URL", maxBytes: KeySet.maxBytes))
    }

    /// The authorization endpoint of an issuer: the configured one, or the one its discovery
    /// document names (fetched as a key set is, and kept as long).
    public func authorizationEndpoint(of issuer: TrustedIssuer) async throws -> String {
        if let configured = issuer.authorizationURL { return configured }
        let now = Int64(Date().timeIntervalSince1970)
        let keep = settings.refresh.maxAge
        if let kept = endpoints.withLock({ $0[issuer.issuer] }), now - kept.fetchedAt < keep { return kept.endpoint }
        let document = try await download(
            ProviderSignIn.discoveryURL(of: issuer.issuer), what: "discovery document", place: "discovery URL", maxBytes: KeySet.maxBytes)
        let endpoint = try ProviderSignIn.authorizationEndpoint(discovery: document, issuer: issuer.issuer)
        endpoints.withLock { endpoints in
            if endpoints[issuer.issuer] == nil, endpoints.count >= Self.capacity { endpoints.removeAll() }
            endpoints[issuer.issuer] = (now, endpoint)
        }
        return endpoint
    }

    /// Exchanges an authorization code at an issuer's token endpoint (posted as the exchange says,
    /// bounded, no redirects, checked addresses as a key set's fetch) and answers the ID token it
    /// gives; the request's secret and verifier are never logged nor put in an error.
    public func exchange(_ exchange: ProviderTokenRequest, at tokenURL: String) async throws -> String {
        var headers = [("Content-Type", "application/x-www-form-urlencoded")]
        if let authorization = exchange.authorization { headers.append(("Authorization", authorization)) }
        let (status, answer) = try await request(
            tokenURL, headers: headers, body: Array(exchange.body.utf8), what: "token endpoint", place: "token URL",
            maxBytes: ProviderTokenRequest.maxAnswerBytes)
        return try ProviderTokenRequest.idToken(status: status, answer: answer)
    }

    /// Fetches a document of an issuer's (bounded, no redirects, checked addresses).
    func download(_ text: String, what: String, place: String, maxBytes: Int) async throws -> [UInt8] {
        let (status, body) = try await request(text, what: what, place: place, maxBytes: maxBytes)
        guard status == 200 else {
            throw StratusError(.tryAgainLater, "the issuer's \(what) answered HTTP \(status), not 200; retry later")
        }
        return body
    }

    /// One request to an issuer's endpoint (bounded, no redirects, checked addresses): a GET, or a
    /// POST of `body`; its status and body.
    func request(
        _ text: String, headers: [(String, String)] = [], body: [UInt8]? = nil, what: String, place: String, maxBytes: Int
    ) async throws -> (Int, [UInt8]) {
        guard let url = URL(string: text), let host = url.host, !host.isEmpty else {
            throw StratusError(.authenticationFailed, "the issuer's \(place) is not an absolute URL")
        }
        let allowPrivate = settings.allowPrivateAddresses
        try AddressPolicy.checkScheme(url, allowPrivate: allowPrivate)
        let addresses = try await Self.resolve(host)
        guard let address = addresses.first else {
            throw StratusError(.tryAgainLater, "the issuer's \(place) host could not be resolved")
        }
        if !allowPrivate, !addresses.allSatisfy(AddressPolicy.isPublic) {
            throw StratusError(.authenticationFailed, "the issuer's \(place) leads to a private or loopback address, which this server does not fetch from")
        }
        var configuration = HTTPClient.Configuration(
            redirectConfiguration: .disallow, timeout: .init(connect: TimeAmount(settings.timeout), read: TimeAmount(settings.timeout)))
        configuration.decompression = .disabled
        configuration.connectionPool.retryConnectionEstablishment = false
        // The connection goes to the address checked above, whatever the name resolves to later;
        // TLS still verifies the certificate for the name.
        configuration.dnsOverride = [host: Self.text(address)]
        let client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration, backgroundActivityLogger: logger)
        do {
            let answer = try await Self.send(
                url: text, headers: headers, body: body, client: client, timeout: settings.timeout, what: what, maxBytes: maxBytes)
            try await client.shutdown()
            return answer
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    private static func send(
        url: String, headers: [(String, String)], body: [UInt8]?, client: HTTPClient, timeout: Duration, what: String, maxBytes: Int
    ) async throws -> (Int, [UInt8]) {
        var request = HTTPClientRequest(url: url)
        request.headers.add(name: "Accept", value: "application/json")
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body {
            request.method = .POST
            request.body = .bytes(ByteBuffer(bytes: body))
        }
        let response: HTTPClientResponse
        do {
            response = try await client.execute(request, timeout: TimeAmount(timeout))
        } catch {
            throw StratusError(.tryAgainLater, "the issuer's \(what) could not be fetched; retry later")
        }
        let answer: ByteBuffer
        do {
            answer = try await response.body.collect(upTo: maxBytes)
        } catch is NIOTooManyBytesError {
            throw StratusError(.authenticationFailed, "the issuer's \(what) is larger than \(maxBytes) bytes")
        } catch {
            throw StratusError(.tryAgainLater, "the issuer's \(what) could not be read; retry later")
        }
        return (Int(response.status.code), Array(buffer: answer))
    }

    /// The addresses `host` resolves to (at most 16), resolved on NIO's thread pool.
    static func resolve(_ host: String) async throws -> [[UInt8]] {
        let addresses = try await NIOThreadPool.singleton.runIfActive { () -> [[UInt8]] in
            var hints = addrinfo()
            hints.ai_family = AF_UNSPEC
            var result: UnsafeMutablePointer<addrinfo>?
            guard getaddrinfo(host, nil, &hints, &result) == 0, let first = result else { return [] }
            defer { freeaddrinfo(first) }
            var found: [[UInt8]] = []
            var cursor: UnsafeMutablePointer<addrinfo>? = first
            while let info = cursor, found.count < 16 {
                if let sockaddr = info.pointee.ai_addr {
                    var bytes: [UInt8]?
                    if info.pointee.ai_family == AF_INET {
                        bytes = sockaddr.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { pointer in
                            withUnsafeBytes(of: pointer.pointee.sin_addr) { Array($0) }
                        }
                    } else if info.pointee.ai_family == AF_INET6 {
                        bytes = sockaddr.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { pointer in
                            withUnsafeBytes(of: pointer.pointee.sin6_addr) { Array($0) }
                        }
                    }
                    if let bytes, !found.contains(bytes) { found.append(bytes) }
                }
                cursor = info.pointee.ai_next
            }
            return found
        }
        return addresses
    }

    /// An address's text form: dotted IPv4, or IPv6 as eight hex groups.
    static func text(_ address: [UInt8]) -> String {
        if address.count == 4 { return address.map(String.init).joined(separator: ".") }
        return stride(from: 0, to: address.count, by: 2).map { String(UInt16(address[$0]) << 8 | UInt16(address[$0 + 1]), radix: 16) }
            .joined(separator: ":")
    }
}
