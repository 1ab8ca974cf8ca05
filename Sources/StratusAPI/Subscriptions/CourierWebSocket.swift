import Foundation
import Hummingbird
import HummingbirdWebSocket
import Logging
import StratusCore
import StratusPostgres

/// The web courier over a WebSocket: `GET /device/1/{container}/{environment}/courier/{token}/websocket`
/// upgrades when the token is known, then pushes each notification as it is logged, as a text
/// message holding the dictionary the long poll answers. The push ends when the client closes.
struct CourierWebSocket: Sendable {
    /// The path under which the upgrade is offered (the long poll's path plus `/websocket`).
    static let path = "/device/1/:container/:environment/courier/:token/websocket"

    let notifications: NotificationStore
    let hub: NotificationHub
    let limits: APILimits

    /// Whether the request may upgrade: a known courier token, else no upgrade.
    func courier(token: String?, logger: Logger) async throws -> NotificationStore.Courier? {
        guard let token, token.utf8.count <= 200 else { return nil }
        return try await notifications.courier(token: token, logger: logger)
    }

    /// Pushes until the client closes (or the connection drops): a child task reads the inbound side
    /// only to see its end, and the push task, waiting in the hub, is cancelled then.
    func push(token: String, courier: NotificationStore.Courier, inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter, logger: Logger) async throws {
        let session = CourierSession(notifications: notifications, hub: hub, token: token, courier: courier, logger: logger)
        let limit = limits.maxResults
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                // The courier reads nothing from the client; its frames are drained until it closes.
                for try await _ in inbound {}
            }
            group.addTask {
                while !Task.isCancelled {
                    for logged in try await session.next(waitingUpTo: .seconds(30), limit: limit) {
                        let text = String(decoding: NotificationRoutes<APIRequestContext>.wire(logged).serialized(), as: UTF8.self)
                        try await outbound.writeTextMessage(text)
                    }
                }
            }
            defer { group.cancelAll() }
            try await group.next()
        }
    }

    /// Registers the upgrade route on the WebSocket router.
    func register(on router: Router<BasicWebSocketRequestContext>) {
        router.ws(RouterPath(stringLiteral: Self.path)) { _, context in
            try await courier(token: context.parameters.get("token"), logger: context.logger) == nil ? .dontUpgrade : .upgrade([:])
        } onUpgrade: { inbound, outbound, context in
            let parameters = context.requestContext.parameters
            guard let token = parameters.get("token"), let courier = try await courier(token: token, logger: context.logger) else { return }
            try await push(token: token, courier: courier, inbound: inbound, outbound: outbound, logger: context.logger)
        }
    }
}
