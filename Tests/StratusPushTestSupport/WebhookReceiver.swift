import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// One request as the receiver saw it.
public struct ReceivedRequest: Sendable {
    public var method: HTTPMethod
    public var uri: String
    public var version: HTTPVersion
    public var headers: HTTPHeaders
    public var body: Data
}

/// How the receiver answers a request.
public enum ReceiverReply: Sendable {
    case answer(status: Int, headers: [(String, String)] = [], body: String = "")
    /// Keeps the connection open and never answers (for timeouts).
    case never
}

/// A real HTTP/1.1 server on a free loopback port that records every request and answers as told.
public final class WebhookReceiver: Sendable {
    public let port: Int
    private let server: any Channel
    private let state = Mutex<(requests: [ReceivedRequest], connections: [any Channel])>(([], []))

    public var requests: [ReceivedRequest] { state.withLock { $0.requests } }
    public func url(_ path: String = "/hook") -> String { "http://127.0.0.1:\(port)\(path)" }

    /// Starts a receiver, runs `body` with it, and stops it whether `body` succeeded or not.
    public static func with<T>(
        reply: @escaping @Sendable (ReceivedRequest) -> ReceiverReply,
        _ body: (WebhookReceiver) async throws -> T
    ) async throws -> T {
        let receiver = try await WebhookReceiver(reply: reply)
        do {
            let result = try await body(receiver)
            await receiver.stop()
            return result
        } catch {
            await receiver.stop()
            throw error
        }
    }

    private init(reply: @escaping @Sendable (ReceivedRequest) -> ReceiverReply) async throws {
        let box = ReceiverBox()
        server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                box.receiver?.state.withLock { $0.connections.append(channel) }
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(ReceiverHandler { request in
                        box.receiver?.state.withLock { $0.requests.append(request) }
                        return reply(request)
                    })
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        port = server.localAddress!.port!
        box.set(self)
    }

    /// Closes the listening socket and every connection still open.
    public func stop() async {
        let connections = state.withLock { $0.connections }
        for connection in connections { try? await connection.close() }
        try? await server.close()
    }

    /// A free port nothing listens on: bound once, then released.
    public static func closedPort() async throws -> Int {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(host: "127.0.0.1", port: 0).get()
        let port = channel.localAddress!.port!
        try await channel.close()
        return port
    }
}

/// Lets the child channel initializer reach the receiver that is being built.
private final class ReceiverBox: Sendable {
    private let value = Mutex<WebhookReceiver?>(nil)
    var receiver: WebhookReceiver? { value.withLock { $0 } }
    func set(_ receiver: WebhookReceiver) { value.withLock { $0 = receiver } }
}

private final class ReceiverHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let onRequest: @Sendable (ReceivedRequest) -> ReceiverReply
    private var head: HTTPRequestHead?
    private var body = Data()

    init(onRequest: @escaping @Sendable (ReceivedRequest) -> ReceiverReply) { self.onRequest = onRequest }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            body = Data()
        case .body(let buffer):
            body.append(contentsOf: buffer.readableBytesView)
        case .end:
            guard let head else { return }
            let request = ReceivedRequest(method: head.method, uri: head.uri, version: head.version, headers: head.headers, body: body)
            guard case .answer(let status, let extra, let text) = onRequest(request) else { return }
            var headers = HTTPHeaders(extra)
            headers.add(name: "Content-Length", value: String(text.utf8.count))
            context.write(wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: .init(statusCode: status), headers: headers))), promise: nil)
            context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: text)))), promise: nil)
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        }
    }
}
