import Foundation

/// A container's own limits (`stratus container set`, the console), kept in its row of `containers`
/// and shared by every API process. Each is nil (the process's setting applies: `STRATUS_RATE_*`,
/// `STRATUS_USER_QUOTA_BYTES`, the subscription limit), 0 (no limit for this container) or the
/// container's own value.
public struct ContainerLimits: Sendable, Hashable {
    /// Requests per second to the container from all its callers, anonymous ones included.
    public var requestRate: Double?
    /// The most requests the container may receive at once after a quiet spell.
    public var requestBurst: Double?
    /// Requests per second from each user of the container.
    public var userRequestRate: Double?
    /// The most requests a user may send at once after a quiet spell.
    public var userRequestBurst: Double?
    /// Bytes of records and assets each user may keep per environment (the storage quota).
    public var userQuotaBytes: Int64?
    /// Subscriptions each user may keep per database.
    public var maxSubscriptionsPerUser: Int?
    /// Records the whole container may hold (`ContainerQuota`); nil or 0: no container-wide limit
    /// (there is no process setting), as for the three below.
    public var maxRecords: Int64?
    /// Live custom zones the whole container may hold.
    public var maxZones: Int64?
    /// Bytes of records and assets the whole container may hold.
    public var quotaBytes: Int64?
    /// Bytes of assets the whole container may hold.
    public var assetQuotaBytes: Int64?

    /// Creates limits; nothing given: the process's settings everywhere.
    public init(
        requestRate: Double? = nil, requestBurst: Double? = nil, userRequestRate: Double? = nil, userRequestBurst: Double? = nil,
        userQuotaBytes: Int64? = nil, maxSubscriptionsPerUser: Int? = nil,
        maxRecords: Int64? = nil, maxZones: Int64? = nil, quotaBytes: Int64? = nil, assetQuotaBytes: Int64? = nil
    ) {
        self.maxRecords = maxRecords
        self.maxZones = maxZones
        self.quotaBytes = quotaBytes
        self.assetQuotaBytes = assetQuotaBytes
        self.requestRate = requestRate
        self.requestBurst = requestBurst
        self.userRequestRate = userRequestRate
        self.userRequestBurst = userRequestBurst
        self.userQuotaBytes = userQuotaBytes
        self.maxSubscriptionsPerUser = maxSubscriptionsPerUser
    }

    /// The largest rate or burst a container may set (requests per second, or requests).
    public static let maxRate: Double = 1_000_000

    /// A limit by the name `stratus container set` and the console give it.
    public enum Setting: String, Sendable, CaseIterable {
        case requestRate = "request-rate"
        case requestBurst = "request-burst"
        case userRequestRate = "user-request-rate"
        case userRequestBurst = "user-request-burst"
        case userQuotaBytes = "user-quota-bytes"
        case maxSubscriptionsPerUser = "max-subscriptions-per-user"
        case maxRecords = "max-records"
        case maxZones = "max-zones"
        case quotaBytes = "quota-bytes"
        case assetQuotaBytes = "asset-quota-bytes"
    }

    /// The container-wide quotas these limits set.
    public var quota: ContainerQuota {
        ContainerQuota(maxRecords: maxRecords ?? 0, maxZones: maxZones ?? 0, quotaBytes: quotaBytes ?? 0, assetQuotaBytes: assetQuotaBytes ?? 0)
    }

    /// The text of a limit's value: `default` for the process's setting, else the number.
    public func text(of setting: Setting) -> String {
        func number(_ value: Double?) -> String {
            guard let value else { return "default" }
            return value == value.rounded() ? String(Int64(value)) : String(value)
        }
        switch setting {
        case .requestRate: return number(requestRate)
        case .requestBurst: return number(requestBurst)
        case .userRequestRate: return number(userRequestRate)
        case .userRequestBurst: return number(userRequestBurst)
        case .userQuotaBytes: return userQuotaBytes.map(String.init) ?? "default"
        case .maxSubscriptionsPerUser: return maxSubscriptionsPerUser.map(String.init) ?? "default"
        case .maxRecords: return maxRecords.map(String.init) ?? "default"
        case .maxZones: return maxZones.map(String.init) ?? "default"
        case .quotaBytes: return quotaBytes.map(String.init) ?? "default"
        case .assetQuotaBytes: return assetQuotaBytes.map(String.init) ?? "default"
        }
    }

    /// Sets a limit from text: `default` (the process's setting), or a number of 0 or more (0: no
    /// limit), bounded. Refuses anything else with BAD_REQUEST naming the limit.
    public mutating func set(_ setting: Setting, _ text: String) throws(StratusError) {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if trimmed == "default" || trimmed.isEmpty {
            switch setting {
            case .requestRate: requestRate = nil
            case .requestBurst: requestBurst = nil
            case .userRequestRate: userRequestRate = nil
            case .userRequestBurst: userRequestBurst = nil
            case .userQuotaBytes: userQuotaBytes = nil
            case .maxSubscriptionsPerUser: maxSubscriptionsPerUser = nil
            case .maxRecords: maxRecords = nil
            case .maxZones: maxZones = nil
            case .quotaBytes: quotaBytes = nil
            case .assetQuotaBytes: assetQuotaBytes = nil
            }
            return
        }
        func refused(_ what: String) -> StratusError {
            StratusError(.badRequest, "\(setting.rawValue) must be \(what) or 'default', got '\(ClientText.excerpt(text))'")
        }
        switch setting {
        case .requestRate, .requestBurst, .userRequestRate, .userRequestBurst:
            guard trimmed.utf8.count <= 32, let value = Double(trimmed), value.isFinite, value >= 0, value <= Self.maxRate else {
                throw refused("a number of requests from 0 to \(Int(Self.maxRate))")
            }
            switch setting {
            case .requestRate: requestRate = value
            case .requestBurst: requestBurst = value
            case .userRequestRate: userRequestRate = value
            default: userRequestBurst = value
            }
        case .userQuotaBytes:
            guard trimmed.utf8.count <= 20, let value = Int64(trimmed), value >= 0 else { throw refused("a number of bytes, 0 or more") }
            userQuotaBytes = value
        case .maxSubscriptionsPerUser:
            guard trimmed.utf8.count <= 10, let value = Int32(trimmed), value >= 0 else { throw refused("a number from 0 to \(Int32.max)") }
            maxSubscriptionsPerUser = Int(value)
        case .maxRecords, .maxZones, .quotaBytes, .assetQuotaBytes:
            let what = setting == .maxRecords || setting == .maxZones ? "a count, 0 or more" : "a number of bytes, 0 or more"
            guard trimmed.utf8.count <= 20, let value = Int64(trimmed), value >= 0 else { throw refused(what) }
            switch setting {
            case .maxRecords: maxRecords = value
            case .maxZones: maxZones = value
            case .quotaBytes: quotaBytes = value
            default: assetQuotaBytes = value
            }
        }
    }

    /// What a request rate comes to: the container's own when set (0: none), else the process's.
    public enum Rate: Sendable, Equatable {
        /// No limit.
        case off
        /// The process's own setting, counted in each process.
        case process
        /// The container's, shared by every process: `perSecond` tokens flow in, up to `burst`.
        case shared(perSecond: Double, burst: Double)
    }

    /// The container's request rate for all its callers.
    public var containerRate: Rate { Self.rate(requestRate, burst: requestBurst) }
    /// The container's request rate for each of its users.
    public var userRate: Rate { Self.rate(userRequestRate, burst: userRequestBurst) }

    /// A rate from its settings. Without a burst, a second's worth of requests may come at once;
    /// a burst is never below one lease's slice, so a lease can take a whole slice.
    static func rate(_ perSecond: Double?, burst: Double?) -> Rate {
        guard let perSecond else { return .process }
        guard perSecond > 0 else { return .off }
        let burst = max(burst ?? perSecond, Double(RequestLease.slice(perSecond: perSecond)), 1)
        return .shared(perSecond: perSecond, burst: burst)
    }

    /// The storage quota of each user: the container's when set, else the process's (0: none).
    public func userQuota(default process: Int64) -> Int64 { userQuotaBytes ?? process }

    /// The subscriptions each user may keep per database: the container's when set (0: no limit),
    /// else the process's.
    public func subscriptionsPerUser(default process: Int) -> Int {
        guard let own = maxSubscriptionsPerUser else { return process }
        return own == 0 ? Int.max : own
    }
}

/// An API process's share of a shared request bucket (`ContainerLimits.Rate.shared`): whole
/// tokens leased from the bucket in PostgreSQL at once and spent by this process's requests without
/// asking again, until they run out or the lease lapses. After a lease that got nothing, requests
/// are refused here, with no round trip, until a slice will have flowed in again.
///
/// Pure: instants are given, so tests drive it with their own.
public struct RequestLease: Sendable, Equatable {
    /// How long leased tokens may be spent: tokens a process leased and did not spend go unused
    /// (the processes together admit less, never more, than the rate).
    public static let lifetime: Duration = .seconds(1)

    /// Tokens held.
    public private(set) var tokens = 0
    /// When the held tokens lapse.
    public private(set) var expiresAt: ContinuousClock.Instant?
    /// Until when requests are refused without asking the bucket.
    public private(set) var refusedUntil: ContinuousClock.Instant?
    /// The `retryAfter` of those refusals (whole seconds, at least 1).
    public private(set) var retryAfter = 1

    /// An empty share: the first request leases.
    public init() {}

    /// How many tokens a lease asks for: a tenth of a second's worth (at least 1, at most 10,000),
    /// so that a busy process asks about ten times a second whatever the rate.
    public static func slice(perSecond: Double) -> Int {
        Int(max(1, min(10_000, (perSecond / 10).rounded(.up))))
    }

    /// What a request gets.
    public enum Decision: Sendable, Equatable {
        /// A held token: admitted.
        case admit
        /// The bucket had nothing a moment ago: refused, retry after this many seconds.
        case refuse(retryAfter: Int)
        /// Nothing held: lease from the bucket.
        case lease
    }

    /// Spends a held token, if there is one.
    public mutating func take(now: ContinuousClock.Instant) -> Decision {
        if let expiresAt, now >= expiresAt {
            tokens = 0
            self.expiresAt = nil
        }
        if tokens > 0 {
            tokens -= 1
            return .admit
        }
        if let refusedUntil, now < refusedUntil { return .refuse(retryAfter: retryAfter) }
        refusedUntil = nil
        return .lease
    }

    /// Keeps what a lease granted (`granted` tokens; `wait`: seconds until a slice will be there,
    /// when the bucket had too few). A lease that got nothing refuses requests for `wait`.
    public mutating func leased(_ granted: Int, wait: Double, now: ContinuousClock.Instant) {
        tokens = max(0, granted)
        expiresAt = now + Self.lifetime
        if granted > 0 {
            refusedUntil = nil
        } else {
            let seconds = wait.isFinite ? min(max(wait, 0.001), 3_600) : 3_600
            refusedUntil = now + .milliseconds(Int64((seconds * 1000).rounded(.up)))
            retryAfter = max(1, Int(seconds.rounded(.up)))
        }
    }

    /// Gives back a token a request took and did not use (another limit refused the request).
    public mutating func giveBack(now: ContinuousClock.Instant) {
        guard let expiresAt, now < expiresAt else { return }
        tokens += 1
    }

    /// Whether the share holds nothing worth keeping: it may be dropped (a new one leases again).
    public func isIdle(now: ContinuousClock.Instant) -> Bool {
        (tokens == 0 || expiresAt.map { now >= $0 } ?? true) && (refusedUntil.map { now >= $0 } ?? true)
    }
}
