import Hummingbird
import HummingbirdCore
import HummingbirdWebSocket
import Logging
import NIOCore
import NIOHTTP1

/// The API's connections: HTTP/1.1 that may upgrade to the WebSocket courier, with the idle timeout
/// running from the moment a connection opens, as on a plain HTTP/1.1 connection.
///
/// The WebSocket upgrade channel adds its HTTP connection handler — the one that closes idle
/// connections — only once a whole request head has arrived and it has decided not to upgrade,
/// so a connection that sends nothing, or a head that stops half-way, would be held for ever.
/// `FirstRequestHeadTimeout` covers that stretch: it closes the connection when no request head
/// has come within the idle timeout, and leaves the pipeline with the first head, when the
/// HTTP handler (or the WebSocket) takes over.
struct APIServerChannel: ServerChildChannel {
    typealias Value = HTTP1WebSocketUpgradeChannel.Value

    let upgrade: HTTP1WebSocketUpgradeChannel
    let idleTimeout: TimeAmount?

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        let timeout = idleTimeout
        return upgrade.setup(channel: channel, logger: logger).flatMapThrowing { value in
            if let timeout {
                let operations = channel.pipeline.syncOperations
                let upgrader = try operations.handler(type: NIOTypedHTTPServerUpgradeHandler<HTTP1WebSocketUpgradeChannel.UpgradeResult>.self)
                try operations.addHandler(FirstRequestHeadTimeout(timeout: timeout), position: .before(upgrader))
            }
            return value
        }
    }

    func handle(value: Value, logger: Logger) async {
        await upgrade.handle(value: value, logger: logger)
    }
}

extension HTTPServerBuilder {
    /// HTTP/1.1 with the WebSocket routes of `webSocketRouter`, every connection idle-timed from its start.
    static func http1WithWebSocket(
        webSocketRouter: Router<BasicWebSocketRequestContext>, idleTimeout: TimeAmount?
    ) -> HTTPServerBuilder {
        let webSocketResponder = webSocketRouter.buildResponder()
        return .init { responder in
            APIServerChannel(
                upgrade: HTTP1WebSocketUpgradeChannel(
                    responder: responder, webSocketResponder: webSocketResponder,
                    configuration: .init(http1: .init(idleTimeout: idleTimeout), ws: .init(autoPing: .enabled(timePeriod: .seconds(30))))),
                idleTimeout: idleTimeout)
        }
    }
}

/// Closes the connection when no request head has arrived within `timeout` of its opening; removes
/// itself when the first head passes (between the HTTP decoder and the upgrade handler).
final class FirstRequestHeadTimeout: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart

    private let timeout: TimeAmount
    private var scheduled: Scheduled<Void>?

    init(timeout: TimeAmount) { self.timeout = timeout }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { schedule(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        schedule(context)
        context.fireChannelActive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        scheduled?.cancel()
        scheduled = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .head = unwrapInboundIn(data) else { return context.fireChannelRead(data) }
        scheduled?.cancel()
        scheduled = nil
        context.fireChannelRead(data)
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }

    private func schedule(_ context: ChannelHandlerContext) {
        guard scheduled == nil else { return }
        scheduled = context.eventLoop.assumeIsolated().scheduleTask(in: timeout) {
            // Told as the end of the input, the upgrade handler closes the connection and ends its
            // wait quietly (a bare close would be logged as a failed upgrade, an error, each time).
            context.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
            context.close(promise: nil)
        }
    }
}
