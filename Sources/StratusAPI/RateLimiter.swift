import Foundation
import Logging
import StratusCore
import Synchronization

/// A token bucket's settings: `perSecond` tokens flow in, up to `burst`; a request takes one.
/// A rate of 0 (or less) turns the bucket off.
public struct TokenRate: Sendable, Hashable {
    /// Tokens added per second.
    public var perSecond: Double
    /// The most tokens a bucket holds: how many requests may come at once after a quiet spell.
    public var burst: Double

    /// Creates a rate; a burst below 1 is raised to 1, so that a bucket can ever admit a request.
    public init(perSecond: Double, burst: Double) {
        self.perSecond = perSecond
        self.burst = max(1, burst)
    }

    /// No limit.
    public static let off = TokenRate(perSecond: 0, burst: 1)

    /// Whether the rate limits anything.
    public var isOn: Bool { perSecond > 0 }
}

/// One token bucket: pure arithmetic over instants of `ContinuousClock`, so tests drive it with
/// instants of their own.
struct TokenBucket: Sendable {
    var tokens: Double
    var updated: ContinuousClock.Instant

    /// A full bucket.
    init(rate: TokenRate, now: ContinuousClock.Instant) {
        tokens = rate.burst
        updated = now
    }

    /// Adds what flowed in since the last update.
    mutating func refill(rate: TokenRate, now: ContinuousClock.Instant) {
        guard now > updated else { return }
        tokens = min(rate.burst, tokens + (now - updated).asSeconds * rate.perSecond)
        updated = now
    }

    /// Takes `cost` tokens if the bucket holds them; otherwise says how many whole seconds (at
    /// least 1) until it will.
    mutating func take(_ cost: Double = 1, rate: TokenRate, now: ContinuousClock.Instant) -> RateDecision {
        refill(rate: rate, now: now)
        if tokens >= cost {
            tokens -= cost
            return .allowed
        }
        return .limited(retryAfter: Self.seconds(until: cost - tokens, rate: rate))
    }

    /// Whole seconds (at least 1) until `missing` tokens have flowed in.
    static func seconds(until missing: Double, rate: TokenRate) -> Int {
        let seconds = (missing / rate.perSecond).rounded(.up)
        return seconds >= Double(Int32.max) ? Int(Int32.max) : max(1, Int(seconds))
    }

    /// Whether the bucket is full at `now`: then it is the same as a new one and may be dropped.
    func isFull(rate: TokenRate, now: ContinuousClock.Instant) -> Bool {
        tokens + max(.zero, now - updated).asSeconds * rate.perSecond >= rate.burst
    }
}

/// What a bucket answers.
enum RateDecision: Sendable, Equatable {
    case allowed
    case limited(retryAfter: Int)
}

extension Duration {
    /// The duration in seconds, as a Double.
    var asSeconds: Double { self / .seconds(1) }
}

/// Token buckets by key (a user, a container, a login, an address), held in this process only.
///
/// Memory is bounded: at most `capacity` buckets. A full bucket is dropped when room is needed —
/// it is the same as a new one, so nothing is lost. When every bucket is in use (a client minting
/// keys faster than buckets refill), the least recently used eighth goes: those keys start again
/// with a full bucket, which errs on the side of admitting requests, never of refusing them.
///
/// Buckets are spread over 16 shards by key, each behind its own `Mutex` whose critical section
/// is a dictionary lookup and a little arithmetic (a sweep when the shard is full); nothing waits
/// on anything slower, and no thread is ever blocked for longer.
final class KeyedBuckets: Sendable {
    let rate: TokenRate
    let capacity: Int
    private let shards: [Shard]

    /// One shard: its buckets behind their own lock.
    final class Shard: Sendable {
        let buckets = Mutex<[String: TokenBucket]>([:])
    }

    /// Buckets of `rate`, at most `capacity` of them in all (at least one per shard).
    init(rate: TokenRate, capacity: Int) {
        self.rate = rate
        let shardCount = 16
        self.capacity = max(shardCount, capacity)
        shards = (0..<shardCount).map { _ in Shard() }
    }

    private var shardCapacity: Int { capacity / shards.count }

    private func shard(_ key: String) -> Int {
        // Swift's hashing is seeded per process, so a client cannot aim its keys at one shard.
        Int(UInt(bitPattern: key.hashValue) % UInt(shards.count))
    }

    /// Takes `cost` tokens from `key`'s bucket.
    func take(_ key: String, cost: Double = 1, now: ContinuousClock.Instant = .now) -> RateDecision {
        let rate = rate
        let limit = shardCapacity
        return shards[shard(key)].buckets.withLock { buckets in
            if var bucket = buckets[key] {
                let decision = bucket.take(cost, rate: rate, now: now)
                buckets[key] = bucket
                return decision
            }
            if buckets.count >= limit { Self.makeRoom(&buckets, limit: limit, rate: rate, now: now) }
            var bucket = TokenBucket(rate: rate, now: now)
            let decision = bucket.take(cost, rate: rate, now: now)
            buckets[key] = bucket
            return decision
        }
    }

    /// Whether `key`'s bucket holds `cost` tokens now, without taking them.
    func check(_ key: String, cost: Double = 1, now: ContinuousClock.Instant = .now) -> RateDecision {
        let rate = rate
        return shards[shard(key)].buckets.withLock { buckets in
            guard var bucket = buckets[key] else { return .allowed }
            bucket.refill(rate: rate, now: now)
            return bucket.tokens >= cost ? .allowed : .limited(retryAfter: TokenBucket.seconds(until: cost - bucket.tokens, rate: rate))
        }
    }

    /// Gives `amount` tokens back to `key`'s bucket (never past its burst); a bucket that is full
    /// again is dropped.
    func giveBack(_ key: String, _ amount: Double = 1, now: ContinuousClock.Instant = .now) {
        let rate = rate
        shards[shard(key)].buckets.withLock { buckets in
            guard var bucket = buckets[key] else { return }
            bucket.refill(rate: rate, now: now)
            bucket.tokens = min(rate.burst, bucket.tokens + amount)
            buckets[key] = bucket.tokens >= rate.burst ? nil : bucket
        }
    }

    /// Drops `key`'s bucket: the key starts again with a full one.
    func reset(_ key: String) {
        _ = shards[shard(key)].buckets.withLock { buckets in buckets.removeValue(forKey: key) }
    }

    /// The number of buckets held.
    var count: Int { shards.reduce(0) { total, shard in total + shard.buckets.withLock { $0.count } } }

    /// Drops full buckets; when none is full, the least recently updated eighth (so that the sweep,
    /// which reads the whole shard, runs at most once per eighth of its capacity of new keys).
    private static func makeRoom(_ buckets: inout [String: TokenBucket], limit: Int, rate: TokenRate, now: ContinuousClock.Instant) {
        buckets = buckets.filter { !$0.value.isFull(rate: rate, now: now) }
        guard buckets.count >= limit else { return }
        let evict = max(1, limit / 8)
        let oldest = buckets.sorted { $0.value.updated < $1.value.updated }.prefix(evict).map(\.key)
        for key in oldest { buckets.removeValue(forKey: key) }
    }
}

/// The request rate limits of the API: one bucket per user and one per container.
public struct RateLimits: Sendable {
    /// `STRATUS_RATE_USER_PER_SECOND` / `STRATUS_RATE_USER_BURST`: each user's requests (a web auth
    /// token's user, or a server-to-server key's own user), per container.
    public var user: TokenRate = .off
    /// `STRATUS_RATE_CONTAINER_PER_SECOND` / `STRATUS_RATE_CONTAINER_BURST`: all requests to one
    /// container, anonymous ones included.
    public var container: TokenRate = .off
    /// `STRATUS_RATE_MAX_BUCKETS`: the most buckets of each kind a process keeps.
    public var maxBuckets: Int = 100_000

    /// No limits (the default).
    public init() {}
}

/// Admits or throttles authenticated calls, per user and per container.
///
/// A container with a rate of its own (`ContainerLimits`, `stratus container set`) is counted in
/// buckets shared by every `stratus-api` process (`SharedRequestLimiter`); one without it by the
/// process's settings (`STRATUS_RATE_*`), which each process counts on its own: with N processes
/// behind a load balancer a caller gets up to N times that rate.
final class RequestLimiter: Sendable {
    let users: KeyedBuckets?
    let containers: KeyedBuckets?
    /// The shared buckets; nil: containers' own rates are not applied (a router without a database).
    let shared: SharedRequestLimiter?

    init(_ limits: RateLimits, shared: SharedRequestLimiter? = nil) {
        users = limits.user.isOn ? KeyedBuckets(rate: limits.user, capacity: limits.maxBuckets) : nil
        containers = limits.container.isOn ? KeyedBuckets(rate: limits.container, capacity: limits.maxBuckets) : nil
        self.shared = shared
    }

    /// Takes a token for the caller from its user's bucket and its container's; throws THROTTLED
    /// with `retryAfter` when either is empty. A call refused by the container's bucket gives its
    /// user's token back, and one refused by the user's takes nothing from the container's, so one
    /// busy user does not use up the container for the others.
    func admit(_ caller: Caller, logger: Logger, now: ContinuousClock.Instant = .now) async throws(StratusError) {
        var tookUser: (() -> Void)?
        if let user = caller.userRecordName {
            let key = caller.container + "\u{0}" + user
            switch caller.limits.userRate {
            case .off: break
            case .process:
                if let users {
                    if case .limited(let retryAfter) = users.take(key, now: now) { throw Self.throttled(user: true, retryAfter) }
                    tookUser = { users.giveBack(key) }
                }
            case .shared(let perSecond, let burst):
                if let shared {
                    let bucket = SharedRequestLimiter.Key(container: caller.container, user: user)
                    if case .limited(let retryAfter) = await shared.take(bucket, perSecond: perSecond, burst: burst, logger: logger) {
                        throw Self.throttled(user: true, retryAfter)
                    }
                    tookUser = { shared.giveBack(bucket) }
                }
            }
        }
        var decision = RateDecision.allowed
        switch caller.limits.containerRate {
        case .off: break
        case .process:
            if let containers { decision = containers.take(caller.container, now: now) }
        case .shared(let perSecond, let burst):
            if let shared {
                decision = await shared.take(.init(container: caller.container, user: nil), perSecond: perSecond, burst: burst, logger: logger)
            }
        }
        if case .limited(let retryAfter) = decision {
            tookUser?()
            throw Self.throttled(user: false, retryAfter)
        }
    }

    private static func throttled(user: Bool, _ retryAfter: Int) -> StratusError {
        StratusError(
            .throttled, "Too many requests \(user ? "from this user" : "to this container"); retry after \(retryAfter) s", retryAfter: retryAfter)
    }
}
