import Foundation

/// What became of one push, in the classes the delivery loop acts on.
public enum APNsOutcome: Sendable, Equatable {
    /// APNs accepted the push (200); the id is the one APNs echoed.
    case delivered(apnsID: UUID)
    /// The device token is no good for this app (410, `BadDeviceToken`, `Unregistered`,
    /// `DeviceTokenNotForTopic`, or a token that is not hex of the right length): drop it.
    case unregistered(reason: String)
    /// Worth trying again later: 429, 5xx, network errors, a provider token refused twice.
    case retry(reason: String)
    /// APNs refuses this push as it is (another 4xx, an oversized payload or collapse id).
    case rejected(reason: String)
}
