/// What a container holds over all its users, databases and environments, as `container_usage`
/// counts it (or what one transaction changed of it).
public struct ContainerTotals: Sendable, Hashable {
    /// Record rows.
    public var records: Int64
    /// Live custom zones.
    public var zones: Int64
    /// Bytes counted as the per-user storage quota counts them: records' fields and assets.
    public var bytes: Int64
    /// Bytes of assets alone.
    public var assetBytes: Int64

    /// Creates totals; nothing given: none.
    public init(records: Int64 = 0, zones: Int64 = 0, bytes: Int64 = 0, assetBytes: Int64 = 0) {
        self.records = records
        self.zones = zones
        self.bytes = bytes
        self.assetBytes = assetBytes
    }

    /// Whether nothing changed.
    public var isZero: Bool { self == ContainerTotals() }
}

/// A container's quotas over all its users (`ContainerLimits.maxRecords`, `maxZones`, `quotaBytes`,
/// `assetQuotaBytes`; 0: none): whether a write may commit, and which record, zone or asset to blame
/// when it may not. A write that adds nothing a quota counts (or frees it) always passes.
public struct ContainerQuota: Sendable, Hashable {
    /// Records the container may hold.
    public var maxRecords: Int64
    /// Live custom zones the container may hold.
    public var maxZones: Int64
    /// Bytes of records and assets the container may hold.
    public var quotaBytes: Int64
    /// Bytes of assets the container may hold.
    public var assetQuotaBytes: Int64

    /// Creates quotas; 0: none.
    public init(maxRecords: Int64 = 0, maxZones: Int64 = 0, quotaBytes: Int64 = 0, assetQuotaBytes: Int64 = 0) {
        self.maxRecords = maxRecords
        self.maxZones = maxZones
        self.quotaBytes = quotaBytes
        self.assetQuotaBytes = assetQuotaBytes
    }

    /// Whether a transaction that changed the container's totals by `change` must read them: only
    /// when it adds to something a quota limits.
    public func needsCheck(_ change: ContainerTotals) -> Bool {
        (maxRecords > 0 && change.records > 0) || (maxZones > 0 && change.zones > 0)
            || (quotaBytes > 0 && change.bytes > 0) || (assetQuotaBytes > 0 && change.assetBytes > 0)
    }

    /// One record command of a write: its record, and what it changed the container's records and
    /// bytes by (a save of a new record adds one; a delete takes off every record it deleted).
    public struct Applied: Sendable, Hashable {
        /// The command's record.
        public var recordName: String
        /// What it changed the container's records by.
        public var records: Int64
        /// What it changed the container's bytes by.
        public var bytes: Int64

        /// Creates an entry.
        public init(recordName: String, records: Int64, bytes: Int64) {
            self.recordName = recordName
            self.records = records
            self.bytes = bytes
        }
    }

    /// The refusal of a record write that brought the container to `total` (read in its
    /// transaction, its own `change` included), when it adds records or bytes past a quota; nil
    /// when it may commit. The record blamed is the first at which the running total passes the
    /// quota (else the last that added, else the last), as the per-user quota blames.
    public func refusal(container: String, total: ContainerTotals, change: ContainerTotals, applied: [Applied]) -> (recordName: String, error: StratusError)? {
        if maxRecords > 0, change.records > 0, total.records > maxRecords {
            let blamed = Self.blame(limit: maxRecords, total: total.records, change: change.records, applied.map { ($0.recordName, $0.records) })
            return (blamed.recordName, StratusError(.quotaExceeded,
                "Record '\(ClientText.excerpt(blamed.recordName))' would bring container '\(ClientText.excerpt(container))' to \(blamed.reached) records; its quota is \(maxRecords) records"))
        }
        if quotaBytes > 0, change.bytes > 0, total.bytes > quotaBytes {
            let blamed = Self.blame(limit: quotaBytes, total: total.bytes, change: change.bytes, applied.map { ($0.recordName, $0.bytes) })
            return (blamed.recordName, StratusError(.quotaExceeded,
                "Record '\(ClientText.excerpt(blamed.recordName))' would bring container '\(ClientText.excerpt(container))' to \(blamed.reached) stored bytes; its quota is \(quotaBytes) bytes (records and assets)"))
        }
        return nil
    }

    /// The refusal of creating custom zone `zoneName` in a container that holds `zones` live
    /// custom zones before it; nil when it may.
    public func zoneRefusal(container: String, zones: Int64, zoneName: String) -> StratusError? {
        guard maxZones > 0, zones + 1 > maxZones else { return nil }
        return StratusError(.quotaExceeded,
            "Zone '\(ClientText.excerpt(zoneName))' would bring container '\(ClientText.excerpt(container))' to \(zones + 1) zones; its quota is \(maxZones) zones")
    }

    /// The refusal of an asset upload of `size` bytes that brought the container to `total` (its
    /// own bytes included); nil when it may be kept.
    public func assetRefusal(container: String, total: ContainerTotals, size: Int64) -> StratusError? {
        guard size > 0 else { return nil }
        if assetQuotaBytes > 0, total.assetBytes > assetQuotaBytes {
            return StratusError(.quotaExceeded,
                "The asset of \(size) bytes would bring container '\(ClientText.excerpt(container))' to \(total.assetBytes) asset bytes; its asset quota is \(assetQuotaBytes) bytes; nothing was stored")
        }
        if quotaBytes > 0, total.bytes > quotaBytes {
            return StratusError(.quotaExceeded,
                "The asset of \(size) bytes would bring container '\(ClientText.excerpt(container))' to \(total.bytes) stored bytes; its quota is \(quotaBytes) bytes (records and assets); nothing was stored")
        }
        return nil
    }

    /// The entry at which the running total (from `total - change`, adding each entry's amount in
    /// order) first passes `limit`, and the total it reached there; else the last entry that added,
    /// else the last, with `total`.
    static func blame(limit: Int64, total: Int64, change: Int64, _ entries: [(String, Int64)]) -> (recordName: String, reached: Int64) {
        var running = total - change
        for (name, amount) in entries {
            running += amount
            if amount > 0, running > limit { return (name, running) }
        }
        return ((entries.last { $0.1 > 0 } ?? entries.last)?.0 ?? "", total)
    }
}
