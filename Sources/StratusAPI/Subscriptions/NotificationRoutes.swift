import Foundation
import Hummingbird
import Logging
import StratusCore
import StratusPostgres

/// `tokens/create` and `tokens/register` (under `/database/1/…` and `/device/1/…`), the web courier
/// long poll, and the catch-up of a device that was away: `notifications/changes` and
/// `notifications/read` (Stratus extensions).
struct NotificationRoutes<Context: StratusRequestContext>: Sendable {
    let notifications: NotificationStore
    let hub: NotificationHub
    let authenticator: Authenticator
    let limits: APILimits
    let secretKey: SecretKey

    func register(on router: Router<Context>) {
        for root in ["/database/1/:container/:environment", "/device/1/:container/:environment"] {
            router.post("\(root)/tokens/create") { request, context in try await createToken(request, context) }
            router.post("\(root)/tokens/register") { request, context in try await registerToken(request, context) }
            router.post("\(root)/notifications/changes") { request, context in try await changes(request, context) }
            router.post("\(root)/notifications/read") { request, context in try await markRead(request, context) }
        }
        router.get("/device/1/:container/:environment/courier/:token") { request, context in try await poll(request, context) }
    }

    struct CreateTokenRequest: Decodable { var apnsEnvironment: String? }
    struct RegisterTokenRequest: Decodable {
        var apnsEnvironment: String?
        var apnsToken: String
    }
    struct ChangesRequest: Decodable {
        var syncToken: String?
        var resultsLimit: Int?
    }
    struct ReadRequest: Decodable { var notificationIDs: [String] }

    /// The signed-in user of a token or notification call (which concern the user, not a database).
    private func open(_ request: Request, _ context: Context) async throws -> (DatabasePath, String, Data) {
        let opened = try await DatabaseCall.open(
            request, context: context, authenticator: authenticator, limits: limits, access: .user, defaultScope: .private)
        guard let user = opened.caller.userRecordName else {
            throw StratusError(.authenticationRequired, "Sign in to receive notifications", redirectURL: authenticator.redirectURL(for: opened.caller))
        }
        return (opened.path, user, opened.body)
    }

    static func apnsEnvironment(_ text: String?) throws(StratusError) -> String {
        switch text ?? "development" {
        case "development": "development"
        case "production": "production"
        default: throw StratusError(.badRequest, "apnsEnvironment must be 'development' or 'production'")
        }
    }

    func createToken(_ request: Request, _ context: Context) async throws -> Response {
        let (path, user, body) = try await open(request, context)
        let parsed = body.isEmpty ? CreateTokenRequest() : try RequestBody.decode(CreateTokenRequest.self, from: body)
        let apns = try Self.apnsEnvironment(parsed.apnsEnvironment)
        // A token made for a device (X-Stratus-Device-ID) is not handed that device's own changes.
        let deviceID = try DeviceHeader.deviceID(request)
        let token = try await notifications.createCourier(
            container: path.container, environment: path.environment, subscriber: user, apnsEnvironment: apns, deviceID: deviceID,
            maxPerSubscriber: limits.maxPushTokensPerUser, logger: context.logger)
        let container = path.container.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed.subtracting(CharacterSet(charactersIn: "/"))) ?? path.container
        let courierPath = "/device/1/\(container)/\(path.environment.rawValue)/courier/\(token)"
        var url = courierPath
        var webSocketURL = courierPath + "/websocket"
        if let host = request.head.authority, !host.isEmpty, host.utf8.count <= 255 {
            let secure = request.headers[.init("X-Forwarded-Proto")!] == "https"
            url = "\(secure ? "https" : "http")://\(host)\(courierPath)"
            webSocketURL = "\(secure ? "wss" : "ws")://\(host)\(courierPath)/websocket"
        }
        return json(JSONValue.object([
            "apnsEnvironment": .string(apns), "apnsToken": .string(token), "webcourierURL": .string(url),
            "webSocketURL": .string(webSocketURL),
        ]))
    }

    func registerToken(_ request: Request, _ context: Context) async throws -> Response {
        let (path, user, body) = try await open(request, context)
        let parsed = try RequestBody.decode(RegisterTokenRequest.self, from: body)
        let apns = try Self.apnsEnvironment(parsed.apnsEnvironment)
        let token = parsed.apnsToken.lowercased()
        guard (64...200).contains(token.utf8.count), token.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }) else {
            throw StratusError(.badRequest, "apnsToken must be the device token in hexadecimal (64 to 200 digits)")
        }
        try await notifications.registerDevice(
            container: path.container, environment: path.environment, subscriber: user, apnsEnvironment: apns, deviceToken: token,
            maxPerSubscriber: limits.maxPushTokensPerUser, logger: context.logger)
        return json(JSONValue.object(["apnsEnvironment": .string(apns), "apnsToken": .string(token)]))
    }

    /// The web courier. As Apple's courier answers, each answer is one notification: CloudKit's push
    /// dictionary (`ck` with `qry`, `fet` or `met` at the top level, `aps` beside it), the oldest the
    /// token has not been handed yet; the next poll gets the next. With none waiting it waits for one
    /// (up to `timeout` seconds, 30 by default, `maxCourierWait` at most) and answers `204 No Content`
    /// when none came. `format=list` (a Stratus extension) answers `{notifications: [...]}` instead:
    /// every waiting notification (at most `maxResults`), an empty list when none came. Each answer
    /// moves the token past exactly what it hands out, so nothing is handed out twice or skipped.
    func poll(_ request: Request, _ context: Context) async throws -> Response {
        guard let token = context.parameters.get("token"), let courier = try await notifications.courier(token: token, logger: context.logger) else {
            throw StratusError(.authenticationFailed, "Unknown web courier token; create one with tokens/create")
        }
        let query = request.uri.queryParameters
        var wait = Duration.seconds(30)
        if let text = query.get("timeout") {
            guard let seconds = Int(text), seconds >= 0 else { throw StratusError(.badRequest, "timeout must be a whole number of seconds") }
            wait = min(.seconds(seconds), limits.maxCourierWait)
        }
        let list: Bool
        switch query.get("format") {
        case nil: list = false
        case "list"?: list = true
        case let other?: throw StratusError(.badRequest, "format must be 'list' or absent, not '\(ClientText.excerpt(other))'")
        }
        let batch = try await CourierSession(notifications: notifications, hub: hub, token: token, courier: courier, logger: context.logger)
            .next(waitingUpTo: wait, limit: list ? limits.maxResults : 1)
        if list {
            return json(JSONValue.object(["notifications": .array(batch.map(Self.wire))]))
        }
        guard let first = batch.first else { return Response(status: .noContent) }
        return json(first.payload)
    }

    func changes(_ request: Request, _ context: Context) async throws -> Response {
        let (path, user, body) = try await open(request, context)
        let parsed = body.isEmpty ? ChangesRequest() : try RequestBody.decode(ChangesRequest.self, from: body)
        var position: Int64 = 0
        if let text = parsed.syncToken {
            guard let token = SignedToken.open(text, as: NotificationSyncToken.self, kind: .notificationSync, key: secretKey), token.u == user else {
                throw StratusError(.badRequest, "syncToken is not a notification sync token of this user")
            }
            position = token.p
        }
        let limit = min(max(parsed.resultsLimit ?? limits.maxResults, 1), limits.maxResults)
        let (found, more) = try await notifications.changes(
            container: path.container, environment: path.environment, subscriber: user, after: position, limit: limit, logger: context.logger)
        let last = found.last?.position ?? position
        return json(JSONValue.object([
            "notifications": .array(found.map(Self.wire)),
            "syncToken": .string(SignedToken.sign(NotificationSyncToken(subscriber: user, position: last), kind: .notificationSync, key: secretKey)),
            "moreComing": .bool(more),
        ]))
    }

    func markRead(_ request: Request, _ context: Context) async throws -> Response {
        let (path, user, body) = try await open(request, context)
        let parsed = try RequestBody.decode(ReadRequest.self, from: body)
        guard parsed.notificationIDs.count <= limits.maxOperations else {
            throw StratusError(.limitExceeded, "At most \(limits.maxOperations) notifications may be marked read per request")
        }
        var ids: [UUID] = []
        for (index, text) in parsed.notificationIDs.enumerated() {
            guard let id = UUID(uuidString: text) else { throw StratusError(.badRequest, "notificationIDs[\(index)] is not a notification id") }
            ids.append(id)
        }
        let marked = try await notifications.markRead(
            ids, container: path.container, environment: path.environment, subscriber: user, logger: context.logger)
        let results: [JSONValue] = zip(parsed.notificationIDs, ids).map { text, id in
            .object(["notificationID": .string(text), "isRead": .bool(true), "changed": .bool(marked.contains(id))])
        }
        return json(JSONValue.object(["notifications": .array(results)]))
    }

    /// A logged notification as clients get it: its ids and what changed, and CloudKit's push payload.
    static func wire(_ logged: NotificationStore.Logged) -> JSONValue {
        var members: [String: JSONValue] = [
            "notificationID": .string(logged.notificationID.uuidString.lowercased()),
            "notificationType": .string(logged.type),
            "subscriptionID": .string(logged.subscriptionID),
            "zoneID": .object(["zoneName": .string(logged.zoneID.zoneName), "ownerRecordName": .string(logged.zoneID.ownerRecordName)]),
            "databaseScope": .string(logged.scope),
            "isRead": .bool(logged.isRead),
            "createdAt": .int(logged.createdAt),
            "payload": logged.payload,
        ]
        members["queryNotificationReason"] = logged.reason.map(JSONValue.string)
        members["recordName"] = logged.recordName.map(JSONValue.string)
        return .object(members)
    }
}

/// What one courier (a long poll or a WebSocket) is handed next: the notifications after the
/// token's position, waiting for the hub when there are none. A courier made for a device skips
/// the notifications of that device's own changes: it moves past them without handing them out.
struct CourierSession: Sendable {
    let notifications: NotificationStore
    let hub: NotificationHub
    let token: String
    let courier: NotificationStore.Courier
    let logger: Logger

    var key: String { "\(courier.container)/\(courier.environment.rawValue)/\(courier.subscriber)" }

    /// The next notifications (at most `limit`), waiting up to `wait` for the first; empty when none came.
    func next(waitingUpTo wait: Duration, limit: Int) async throws -> [NotificationStore.Logged] {
        let deadline = ContinuousClock.now + wait
        while true {
            // Registered before the read, so a notification logged in between still wakes us.
            let wakeup = hub.register(key)
            defer { hub.cancel(wakeup, key: key) }
            let delivered = try await notifications.courier(token: token, logger: logger)?.delivered ?? courier.delivered
            let (found, _) = try await notifications.changes(
                container: courier.container, environment: courier.environment, subscriber: courier.subscriber, after: delivered,
                limit: limit, logger: logger)
            if let last = found.last {
                try await notifications.advanceCourier(token: token, to: last.position, logger: logger)
                let handed = found.filter { SubscriptionEvaluation.hands(notificationFrom: $0.deviceID, toCourierOf: courier.deviceID) }
                if !handed.isEmpty { return handed }
                // Only this device's own changes: read on, without waiting.
                continue
            }
            let left = deadline - ContinuousClock.now
            guard left > .zero, !Task.isCancelled else { return [] }
            await wakeup.wait(timeout: left)
        }
    }
}
