import Crypto
import Foundation
import NIOCore
import NIOHTTP1
import NIOHTTP2
import NIOPosix
import NIOSSL
import Synchronization
import X509

// Shared by the push senders' tests and the integration tests that send through the dispatcher.

/// A certificate authority and a `localhost` server certificate it signed, made afresh for each test.
struct TestPKI {
    let caPEM: String
    let serverCertificatePEM: String
    let serverKeyPEM: String

    init() throws {
        let now = Date()
        let caKey = P256.Signing.PrivateKey()
        let caName = try DistinguishedName { CommonName("Stratus test CA") }
        let ca = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(caKey.publicKey),
            notValidBefore: now - 3600, notValidAfter: now + 3600, issuer: caName, subject: caName,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true))
            },
            issuerPrivateKey: .init(caKey))
        let serverKey = P256.Signing.PrivateKey()
        let server = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(serverKey.publicKey),
            notValidBefore: now - 3600, notValidAfter: now + 3600, issuer: caName,
            subject: try DistinguishedName { CommonName("localhost") },
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try ExtendedKeyUsage([.serverAuth])
                SubjectAlternativeNames([.dnsName("localhost")])
            },
            issuerPrivateKey: .init(caKey))
        caPEM = try ca.serializeAsPEM().pemString
        serverCertificatePEM = try server.serializeAsPEM().pemString
        serverKeyPEM = serverKey.pemRepresentation
    }
}

/// What the server expects of every request: the provider token's key, team and key id, and the topic.
public struct APNsExpectation: Sendable {
    // The key's X9.63 bytes: the key type itself is not `Sendable`.
    public var publicKeyBytes: Data
    public var teamID: String
    public var keyID: String
    public var topic: String

    public init(publicKey: P256.Signing.PublicKey, teamID: String, keyID: String, topic: String) {
        publicKeyBytes = publicKey.x963Representation
        self.teamID = teamID
        self.keyID = keyID
        self.topic = topic
    }

    public var publicKey: P256.Signing.PublicKey? { try? P256.Signing.PublicKey(x963Representation: publicKeyBytes) }
}

/// One request as the server saw it, with every way it differs from what APNs requires.
public struct APNsReceivedRequest: Sendable {
    public var version: HTTPVersion
    public var method: HTTPMethod
    public var path: String
    public var headers: HTTPHeaders
    public var body: Data
    public var jwtHeader: [String: String]
    public var jwtClaims: [String: Any & Sendable]
    public var problems: [String]

    public var deviceToken: String { String(path.dropFirst("/3/device/".count)) }
    public var authorization: String? { headers.first(name: "authorization") }
}

/// A real HTTP/2-over-TLS server on a free loopback port that checks each request as APNs would
/// (HTTP/2, method, path, headers, the ES256 provider token, the payload) and answers as told:
/// `reply` gets the request and its index, and returns the status and the `reason`, if any.
public final class APNsTestServer: Sendable {
    public let port: Int
    public let caPEM: String
    private let server: any Channel
    private let state = Mutex<(requests: [APNsReceivedRequest], connections: [any Channel])>(([], []))

    public var requests: [APNsReceivedRequest] { state.withLock { $0.requests } }
    public var baseURL: String { "https://localhost:\(port)" }

    public static func with<T>(
        expecting expectation: APNsExpectation,
        reply: @escaping @Sendable (APNsReceivedRequest, Int) -> (status: Int, reason: String?),
        _ body: (APNsTestServer) async throws -> T
    ) async throws -> T {
        let server = try await APNsTestServer(expectation: expectation, reply: reply)
        do {
            let result = try await body(server)
            await server.stop()
            return result
        } catch {
            await server.stop()
            throw error
        }
    }

    private init(expectation: APNsExpectation, reply: @escaping @Sendable (APNsReceivedRequest, Int) -> (status: Int, reason: String?)) async throws {
        let pki = try TestPKI()
        var tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMBytes(Array(pki.serverCertificatePEM.utf8)).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(bytes: Array(pki.serverKeyPEM.utf8), format: .pem)))
        // HTTP/2 only, as APNs: a client that cannot negotiate h2 gets no answer.
        tls.applicationProtocols = ["h2"]
        let context = try NIOSSLContext(configuration: tls)
        let box = Box()
        server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                box.server?.state.withLock { $0.connections.append(channel) }
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: context))
                    _ = try channel.pipeline.syncOperations.configureHTTP2Pipeline(
                        mode: .server, connectionConfiguration: .init(), streamConfiguration: .init()
                    ) { stream in
                        stream.eventLoop.makeCompletedFuture {
                            try stream.pipeline.syncOperations.addHandler(HTTP2FramePayloadToHTTP1ServerCodec())
                            try stream.pipeline.syncOperations.addHandler(APNsStreamHandler { head, body in
                                let request = APNsCheck.inspect(head: head, body: body, expectation: expectation)
                                let index = box.server?.state.withLock { state in
                                    state.requests.append(request)
                                    return state.requests.count - 1
                                } ?? 0
                                if let problem = request.problems.first { return (400, "TestServerCheckFailed: \(problem)") }
                                return reply(request, index)
                            })
                        }
                    }
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        port = server.localAddress!.port!
        caPEM = pki.caPEM
        box.set(self)
    }

    public func stop() async {
        let connections = state.withLock { $0.connections }
        for connection in connections { try? await connection.close() }
        try? await server.close()
    }

    private final class Box: Sendable {
        private let value = Mutex<APNsTestServer?>(nil)
        var server: APNsTestServer? { value.withLock { $0 } }
        func set(_ server: APNsTestServer) { value.withLock { $0 = server } }
    }
}

private final class APNsStreamHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let onRequest: @Sendable (HTTPRequestHead, Data) -> (status: Int, reason: String?)
    private var head: HTTPRequestHead?
    private var body = Data()

    init(onRequest: @escaping @Sendable (HTTPRequestHead, Data) -> (status: Int, reason: String?)) { self.onRequest = onRequest }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head): self.head = head
        case .body(let buffer): body.append(contentsOf: buffer.readableBytesView)
        case .end:
            guard let head else { return }
            let (status, reason) = onRequest(head, body)
            var headers = HTTPHeaders()
            if let id = head.headers.first(name: "apns-id") { headers.add(name: "apns-id", value: id) }
            let text = reason.map { #"{"reason":"\#($0)"}"# } ?? ""
            if !text.isEmpty { headers.add(name: "content-type", value: "application/json") }
            headers.add(name: "content-length", value: String(text.utf8.count))
            context.write(wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: .init(statusCode: status), headers: headers))), promise: nil)
            if !text.isEmpty { context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: text)))), promise: nil) }
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        }
    }
}

/// APNs's rules for a request, as its documentation states them.
public enum APNsCheck {
    public static func inspect(head: HTTPRequestHead, body: Data, expectation: APNsExpectation) -> APNsReceivedRequest {
        var problems = [String]()
        let headers = head.headers
        if head.version != .http2 { problems.append("HTTP version \(head.version), not HTTP/2") }
        if head.method != .POST { problems.append("method \(head.method)") }
        let prefix = "/3/device/"
        let token = head.uri.hasPrefix(prefix) ? String(head.uri.dropFirst(prefix.count)) : ""
        if !head.uri.hasPrefix(prefix) || !(64...200).contains(token.count) || !token.allSatisfy({ $0.isHexDigit }) {
            problems.append("path \(head.uri)")
        }
        func one(_ name: String) -> String? {
            let values = headers[name]
            if values.count > 1 { problems.append("\(name) sent \(values.count) times") }
            return values.first
        }
        if one("apns-topic") != expectation.topic { problems.append("apns-topic \(String(describing: headers.first(name: "apns-topic")))") }
        let pushType = one("apns-push-type")
        if pushType != "alert" && pushType != "background" { problems.append("apns-push-type \(String(describing: pushType))") }
        let priority = one("apns-priority")
        if priority != "10" && priority != "5" { problems.append("apns-priority \(String(describing: priority))") }
        if pushType == "background" && priority != "5" { problems.append("background push at priority \(String(describing: priority))") }
        if one("apns-expiration").flatMap({ Int64($0) }) == nil { problems.append("apns-expiration missing or not a number") }
        if let id = one("apns-id"), UUID(uuidString: id) == nil { problems.append("apns-id \(id)") }
        if one("apns-id") == nil { problems.append("no apns-id") }
        if let collapse = one("apns-collapse-id"), collapse.utf8.count > 64 { problems.append("apns-collapse-id longer than 64 bytes") }
        if one("content-type") != "application/json" { problems.append("content-type \(String(describing: headers.first(name: "content-type")))") }
        if body.count > 4096 { problems.append("payload of \(body.count) bytes") }
        if (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] == nil { problems.append("payload is not a JSON object") }

        var jwtHeader = [String: String]()
        var jwtClaims = [String: Any & Sendable]()
        if let authorization = one("authorization"), authorization.hasPrefix("bearer ") {
            let parts = authorization.dropFirst("bearer ".count).split(separator: ".", omittingEmptySubsequences: false).map(String.init)
            if parts.count == 3, let headerData = base64URLDecode(parts[0]), let claimsData = base64URLDecode(parts[1]),
               let signature = base64URLDecode(parts[2]) {
                jwtHeader = (try? JSONSerialization.jsonObject(with: headerData)) as? [String: String] ?? [:]
                let claims = (try? JSONSerialization.jsonObject(with: claimsData)) as? [String: Any] ?? [:]
                if jwtHeader != ["alg": "ES256", "kid": expectation.keyID] { problems.append("JWT header \(jwtHeader)") }
                if Set(claims.keys) != ["iss", "iat"] { problems.append("JWT claims \(claims.keys.sorted())") }
                if claims["iss"] as? String != expectation.teamID { problems.append("JWT iss") }
                if let iat = claims["iat"] as? Int {
                    jwtClaims = ["iss": claims["iss"] as? String ?? "", "iat": iat]
                    if abs(Date().timeIntervalSince1970 - Double(iat)) > 3600 { problems.append("JWT iat \(iat) more than an hour away") }
                } else {
                    problems.append("JWT iat is not an integer")
                }
                if parts.contains(where: { $0.contains("=") }) { problems.append("JWT has base64 padding") }
                if signature.count != 64 {
                    problems.append("JWT signature of \(signature.count) bytes, not raw r‖s")
                } else if let ecdsa = try? P256.Signing.ECDSASignature(rawRepresentation: signature),
                          expectation.publicKey?.isValidSignature(ecdsa, for: Data((parts[0] + "." + parts[1]).utf8)) == true {
                    // A valid ES256 signature by the expected key.
                } else {
                    problems.append("JWT signature does not verify")
                }
            } else {
                problems.append("authorization is not a JWT")
            }
        } else {
            problems.append("no bearer authorization")
        }
        return APNsReceivedRequest(
            version: head.version, method: head.method, path: head.uri, headers: headers, body: body,
            jwtHeader: jwtHeader, jwtClaims: jwtClaims, problems: problems)
    }

    public static func base64URLDecode(_ text: String) -> Data? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64)
    }
}
