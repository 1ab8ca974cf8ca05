/// How a process's connection limit is shared out between its event loops' pools, and which pool a
/// lease uses, as pure bookkeeping (`LoopPools` carries it out under one lock).
///
/// The limit is shared out as evenly as it goes between at most one pool per loop, never a pool
/// without a connection, and so are the connections kept open. A lease uses its own loop's pool
/// while that pool has a connection to spare (fewer leases running or waiting than its limit);
/// otherwise, and for a lease on no pooled loop, the pool with the most to spare, searched from
/// the lease's own pool or from `turn` so that pools take turns when they tie.
public struct PoolShares: Sendable, Equatable {
    /// How many connections each pool may open.
    public let limits: [Int]
    /// How many leases each pool has running or waiting.
    public private(set) var leases: [Int]

    /// The shares of `maxConnections` between the pools of `loops` event loops.
    public init(maxConnections: Int, loops: Int) {
        limits = Self.limits(maxConnections: maxConnections, loops: loops)
        leases = Array(repeating: 0, count: limits.count)
    }

    /// How many connections each pool may open: `maxConnections` (at least one) shared out as
    /// evenly as it goes between at most `loops` pools, the first taking one more each for the
    /// remainder; never a pool without a connection.
    public static func limits(maxConnections: Int, loops: Int) -> [Int] {
        let total = max(1, maxConnections)
        return shares(of: total, pools: max(1, min(loops, total)))
    }

    /// `total` shared out between `pools` as evenly as it goes, the first taking one more each for
    /// the remainder: the maximum's and the minimum's shares alike, so a pool's minimum never
    /// passes its maximum.
    public static func shares(of total: Int, pools: Int) -> [Int] {
        guard pools > 0 else { return [] }
        return (0..<pools).map { total / pools + ($0 < total % pools ? 1 : 0) }
    }

    /// The connections each pool keeps open: `minConnections` (0 up to the limit) shared out.
    public func kept(minConnections: Int) -> [Int] {
        Self.shares(of: min(max(0, minConnections), limits.reduce(0, +)), pools: limits.count)
    }

    /// Picks the pool for one lease and counts the lease against it: `own` (the index of the
    /// calling task's loop's pool, nil when it has none) while it has a connection to spare, else
    /// the pool with the most to spare, the search starting at `own` or at `turn`.
    public mutating func reserve(own: Int?, turn: Int) -> Int {
        let count = limits.count
        let own = own.flatMap { (0..<count).contains($0) ? $0 : nil }
        let start = own ?? Int(UInt(bitPattern: turn) % UInt(count))
        var chosen = start
        if own == nil || leases[start] >= limits[start] {
            for step in 1..<max(1, count) {
                let index = (start + step) % count
                if limits[index] - leases[index] > limits[chosen] - leases[chosen] { chosen = index }
            }
        }
        leases[chosen] += 1
        return chosen
    }

    /// A lease counted by `reserve` ended.
    public mutating func finish(_ index: Int) {
        guard leases.indices.contains(index), leases[index] > 0 else { return }
        leases[index] -= 1
    }
}
