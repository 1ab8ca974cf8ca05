import Logging
import NIOCore
import NIOPosix
import PostgresNIO
import StratusConnections
import Synchronization

/// A process's PostgreSQL connections as one pool per SwiftNIO event loop.
///
/// Every connection belongs to one event loop, and so does every HTTP connection. Leasing from a
/// single pool hands out whichever connection is free, so a request often runs its statements on
/// another loop than its HTTP connection's and crosses between the two threads twice (a wake and a
/// context switch each time). Here a task on an event loop leases from that loop's own pool, whose
/// connections all live on the same loop: a request's bytes, its statements and its answer stay on
/// one thread (docs/benchmarks.md, "A pool per event loop").
///
/// The connection limit is shared out between the pools, so the process never opens more than it:
/// with 20 and two loops, ten each; so are the connections kept open (`minConnections`), which the
/// pool opens at its start and never closes for being idle (`ConnectionPool`, whose release arms no
/// timer of any kind). A request still waits only when every connection of the process
/// is taken: when its own loop's pool has none to spare, it leases from the pool with the most to
/// spare. Long-lived connections (listeners, the relay's lock) are never leased from these pools:
/// they are opened apart (`PostgresStore.withDedicatedConnection`), so they cannot starve requests. With fewer
/// connections than loops only as many pools are made as there are connections; a task on no
/// event loop, or on a loop without a pool of its own, leases from the pool with the most to spare,
/// the pools taking turns when they tie.
final class LoopPools: Sendable {
    /// The pools, the i-th on the i-th loop.
    let pools: [ConnectionPool]
    /// How many connections each pool may open.
    let limits: [Int]
    /// Each pooled loop's index into `pools`.
    private let indexByLoop: [ObjectIdentifier: Int]
    /// How many leases each pool has running or waiting.
    private let leases: Mutex<[Int]>
    /// Where the search for the pool with most to spare starts, for a task on no pooled loop.
    private let turn = Atomic<Int>(0)

    init(
        configuration: PostgresConnection.Configuration, maxConnections: Int, minConnections: Int = 0, group: any EventLoopGroup,
        retryAfterSeconds: Int = 1, logger: Logger
    ) {
        let loops = Array(group.makeIterator())
        let limits = Self.limits(maxConnections: maxConnections, loops: loops.count)
        let kept = Self.shares(of: min(max(0, minConnections), limits.reduce(0, +)), pools: limits.count)
        var pools: [ConnectionPool] = []
        var indexByLoop: [ObjectIdentifier: Int] = [:]
        for (index, limit) in limits.enumerated() {
            let loop = loops.isEmpty ? group.next() : loops[index]
            pools.append(ConnectionPool(
                settings: PoolState.Settings(maxConnections: limit, minConnections: kept[index]), configuration: configuration, loop: loop,
                retryAfterSeconds: retryAfterSeconds, logger: logger))
            indexByLoop[ObjectIdentifier(loop)] = index
        }
        self.pools = pools
        self.limits = limits
        self.indexByLoop = indexByLoop
        self.leases = Mutex(Array(repeating: 0, count: limits.count))
    }

    /// How many connections each pool may open: `maxConnections` (at least one) shared out as
    /// evenly as it goes between at most `loops` pools, the first taking one more each for the
    /// remainder; never a pool without a connection.
    static func limits(maxConnections: Int, loops: Int) -> [Int] {
        let total = max(1, maxConnections)
        return shares(of: total, pools: max(1, min(loops, total)))
    }

    /// `total` shared out between `pools` as evenly as it goes, the first taking one more each for
    /// the remainder: the maximum's and the minimum's shares alike, so a pool's minimum never
    /// passes its maximum.
    static func shares(of total: Int, pools: Int) -> [Int] {
        (0..<pools).map { total / pools + ($0 < total % pools ? 1 : 0) }
    }

    /// Runs `work` with the pool to lease from: the calling task's loop's when it has a connection
    /// to spare, else the one with the most to spare (see the type's notes).
    func withPool<T>(_ work: (ConnectionPool) async throws -> T) async rethrows -> T {
        if pools.count == 1 { return try await work(pools[0]) }
        let own = MultiThreadedEventLoopGroup.currentEventLoop.flatMap { indexByLoop[ObjectIdentifier($0)] }
        let index = reserve(own: own)
        defer { leases.withLock { $0[index] -= 1 } }
        return try await work(pools[index])
    }

    /// Picks the pool for one lease and counts the lease against it.
    func reserve(own: Int?) -> Int {
        let start = own ?? Int(UInt(bitPattern: turn.wrappingAdd(1, ordering: .relaxed).oldValue) % UInt(pools.count))
        return leases.withLock { leases in
            var chosen = start
            if own == nil || leases[start] >= limits[start] {
                for step in 1..<limits.count {
                    let index = (start + step) % limits.count
                    if limits[index] - leases[index] > limits[chosen] - leases[chosen] { chosen = index }
                }
            }
            leases[chosen] += 1
            return chosen
        }
    }

    /// Runs every pool until the task is cancelled.
    func run() async {
        await withDiscardingTaskGroup { group in
            for pool in pools {
                group.addTask { await pool.run() }
            }
        }
    }
}
