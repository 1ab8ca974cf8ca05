/// How stratus-api takes and serves assets (`STRATUS_MAX_ASSET_BYTES`, `STRATUS_ASSET_URL_TTL_SECONDS`,
/// `STRATUS_ASSET_GRACE_SECONDS`).
public struct AssetSettings: Sendable {
    /// Bytes of one asset: Apple's 50 MB by default. A larger upload is refused with LIMIT_EXCEEDED (413).
    public var maxBytes: Int64 = 50 * 1024 * 1024
    /// How long an upload URL takes an upload and a `downloadURL` serves its asset.
    public var urlLifetime: Duration = .seconds(3600)
    /// How long after its upload a receipt may be bound to its field for the first time: half of
    /// stratus-gc's grace period, so an upload is never collected while a write may still bind it.
    public var bindWindow: Duration = .seconds(12 * 3600)

    /// The defaults.
    public init() {}
}
