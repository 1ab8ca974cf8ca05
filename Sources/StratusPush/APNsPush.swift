import Foundation

/// The kind of notification, sent as `apns-push-type`.
public enum APNsPushType: String, Sendable, Hashable {
    /// A visible notification (alert, sound or badge).
    case alert
    /// A silent, content-available notification; always sent at priority 5.
    case background
}

/// How urgently APNs should deliver, sent as `apns-priority`.
public enum APNsPriority: Int, Sendable, Hashable {
    /// Deliver at once (10).
    case immediate = 10
    /// Deliver when it suits the device's power (5).
    case powerConsiderate = 5
}

/// One notification for one device.
public struct APNsPush: Sendable {
    /// The device token in hex, 64 to 200 characters.
    public var deviceToken: String
    /// The JSON payload, at most `APNsPush.maximumPayloadSize` bytes.
    public var payload: Data
    /// Alert or background.
    public var pushType: APNsPushType
    /// The requested priority; background pushes are always sent at `.powerConsiderate`.
    public var priority: APNsPriority
    /// Notifications with the same collapse id replace one another on the device; at most 64 bytes.
    public var collapseID: String?
    /// Until when APNs should keep trying to reach the device; nil means once, not stored.
    public var expiration: Date?
    /// The notification's id, echoed by APNs.
    public var apnsID: UUID

    /// The largest payload APNs accepts for alert and background pushes.
    public static let maximumPayloadSize = 4096
    /// The longest collapse id, in UTF-8 bytes.
    public static let maximumCollapseIDSize = 64
    /// The accepted lengths of a device token, in hex characters.
    public static let deviceTokenLengths = 64...200

    /// Creates a push.
    public init(
        deviceToken: String, payload: Data, pushType: APNsPushType = .alert, priority: APNsPriority = .immediate,
        collapseID: String? = nil, expiration: Date? = nil, apnsID: UUID = UUID()
    ) {
        self.deviceToken = deviceToken
        self.payload = payload
        self.pushType = pushType
        self.priority = priority
        self.collapseID = collapseID
        self.expiration = expiration
        self.apnsID = apnsID
    }

    /// The priority actually sent.
    public var effectivePriority: APNsPriority { pushType == .background ? .powerConsiderate : priority }

    /// Why the token can never be delivered to, or nil when its format is right.
    var deviceTokenProblem: String? {
        guard Self.deviceTokenLengths.contains(deviceToken.utf8.count), Hex.isHex(deviceToken) else {
            return "the device token is not \(Self.deviceTokenLengths.lowerBound)–\(Self.deviceTokenLengths.upperBound) hex characters (\(deviceToken.utf8.count) characters given)"
        }
        return nil
    }

    /// Why APNs would refuse this push whatever its state, or nil.
    var requestProblem: String? {
        if payload.count > Self.maximumPayloadSize {
            return "the payload is \(payload.count) bytes; APNs accepts at most \(Self.maximumPayloadSize)"
        }
        if let collapseID, collapseID.utf8.count > Self.maximumCollapseIDSize {
            return "the collapse id is \(collapseID.utf8.count) bytes; APNs accepts at most \(Self.maximumCollapseIDSize)"
        }
        return nil
    }
}
