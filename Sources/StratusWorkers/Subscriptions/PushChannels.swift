import Foundation
import Logging
import StratusCore
import StratusPostgres
import StratusPush
import Synchronization

/// Webhook deliveries: the notification as JSON, signed with the webhook's secret, POSTed to its URL.
public struct WebhookChannel: PushChannel {
    public let name = "webhook"
    let sender: WebhookSender
    let deliveries: DeliveryStore
    let logger: Logger

    /// Creates the channel over a sender (which the caller shuts down).
    public init(sender: WebhookSender, store: PostgresStore, logger: Logger) {
        self.sender = sender
        self.deliveries = DeliveryStore(store: store)
        self.logger = logger
    }

    public func send(_ delivery: DeliveryStore.Due) async -> DeliveryStore.Result {
        guard let id = UUID(uuidString: delivery.target) else { return .dead(reason: "not a webhook target") }
        let webhook: DeliveryStore.Webhook?
        do {
            webhook = try await deliveries.webhook(id, logger: logger)
        } catch {
            return .retry(reason: "the webhook could not be read: \(PostgresStore.describe(error))", delay: .zero)
        }
        guard let webhook else { return .dead(reason: "the webhook no longer exists") }
        let outcome = await sender.deliver(WebhookDelivery(
            url: webhook.url, secret: Data(webhook.secret), body: Self.body(delivery),
            idempotencyKey: delivery.notificationID.uuidString.lowercased(), attempt: delivery.attempts + 1))
        switch outcome {
        case .delivered: return .delivered
        case .retry(let reason, let retryAfter): return .retry(reason: reason, delay: retryAfter ?? .zero)
        case .rejected(let reason): return .dead(reason: reason)
        }
    }

    /// The webhook body: what the notification says, and CloudKit's push payload as `payload`.
    static func body(_ delivery: DeliveryStore.Due) -> Data {
        let payload = (try? EventCoding.decoder.decode(JSONValue.self, from: Data(delivery.payload.utf8))) ?? .object([:])
        var members: [String: JSONValue] = [
            "notificationID": .string(delivery.notificationID.uuidString.lowercased()),
            "container": .string(delivery.container), "environment": .string(delivery.environment),
            "userRecordName": .string(delivery.subscriber), "subscriptionID": .string(delivery.subscriptionID),
            "notificationType": .string(delivery.type), "databaseScope": .string(delivery.scope),
            "zoneID": .object(["zoneName": .string(delivery.zoneID.zoneName), "ownerRecordName": .string(delivery.zoneID.ownerRecordName)]),
            "payload": payload,
        ]
        members["queryNotificationReason"] = delivery.reason.map(JSONValue.string)
        members["recordName"] = delivery.recordName.map(JSONValue.string)
        return Data(JSONValue.object(members).serialized())
    }
}

/// APNs deliveries: the notification's push payload to a registered device, with the container's
/// provider key (one sender per container and APNs environment, made when first needed).
public final class APNsChannel: PushChannel, Sendable {
    public let name = "apns"
    let deliveries: DeliveryStore
    let configuration: APNsSenderConfiguration
    let logger: Logger
    /// Where each APNs environment is (overridable for tests).
    let environments: [String: APNsEnvironment]
    private let senders = Mutex<[String: (key: DeliveryStore.APNsKey, sender: APNsSender)]>([:])

    /// Creates the channel.
    public init(store: PostgresStore, configuration: APNsSenderConfiguration = .init(),
                environments: [String: APNsEnvironment] = ["development": .development, "production": .production], logger: Logger) {
        self.deliveries = DeliveryStore(store: store)
        self.configuration = configuration
        self.environments = environments
        self.logger = logger
    }

    public func send(_ delivery: DeliveryStore.Due) async -> DeliveryStore.Result {
        guard let colon = delivery.target.firstIndex(of: ":"), let environment = environments[String(delivery.target[..<colon])] else {
            return .dead(reason: "not a device target")
        }
        let deviceToken = String(delivery.target[delivery.target.index(after: colon)...])
        let sender: APNsSender
        do {
            guard let key = try await deliveries.apnsKey(container: delivery.container, logger: logger) else {
                return .dead(reason: "the container has no APNs key")
            }
            let cacheKey = "\(delivery.container)/\(delivery.target[..<colon])"
            if let cached = senders.withLock({ $0[cacheKey] }), cached.key == key {
                sender = cached.sender
            } else {
                let credentials = try APNsCredentials(teamID: key.teamID, keyID: key.keyID, privateKeyPEM: key.privateKey, topic: key.topic, environment: environment)
                sender = try APNsSender(credentials: credentials, configuration: configuration, logger: logger)
                let replaced = senders.withLock { senders in
                    defer { senders[cacheKey] = (key, sender) }
                    return senders[cacheKey]?.sender
                }
                if let replaced { try? await replaced.shutdown() }
            }
        } catch {
            return .retry(reason: "the APNs key could not be used: \(error)", delay: .zero)
        }
        let payload = (try? EventCoding.decoder.decode(JSONValue.self, from: Data(delivery.payload.utf8))) ?? .object([:])
        let aps = payload["aps"]
        let alert = aps?["alert"] != nil || aps?["sound"] != nil || aps?["badge"] != nil
        let outcome = await sender.send(APNsPush(
            deviceToken: deviceToken, payload: Data(payload.serialized()), pushType: alert ? .alert : .background,
            priority: alert ? .immediate : .powerConsiderate, collapseID: delivery.collapseID, apnsID: delivery.notificationID))
        switch outcome {
        case .delivered: return .delivered
        case .unregistered(let reason): return .unregistered(reason: reason)
        case .retry(let reason): return .retry(reason: reason, delay: .zero)
        case .rejected(let reason): return .dead(reason: reason)
        }
    }

    /// Closes every sender.
    public func shutdown() async {
        let all = senders.withLock { senders in
            defer { senders = [:] }
            return senders.values.map(\.sender)
        }
        for sender in all { try? await sender.shutdown() }
    }
}
