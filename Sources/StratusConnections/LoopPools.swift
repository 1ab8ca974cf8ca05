import Logging
import NIOCore
import NIOPosix
import PostgresNIO
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
package final class LoopPools: Sendable {
    /// The pools, the i-th on the i-th loop.
    package let pools: [ConnectionPool]
    /// How many connections each pool may open.
    package let limits: [Int]
    /// Each pooled loop's index into `pools`.
    private let indexByLoop: [ObjectIdentifier: Int]
    /// The leases each pool has running or waiting (`PoolShares` decides which pool a lease uses).
    private let shares: Mutex<PoolShares>
    /// Where the search for the pool with most to spare starts, for a task on no pooled loop.
    private let turn = Atomic<Int>(0)

    package init(
        configuration: PostgresConnection.Configuration, maxConnections: Int, minConnections: Int = 0, group: any EventLoopGroup,
        retryAfterSeconds: Int = 1, logger: Logger
    ) {
        let loops = Array(group.makeIterator())
        let shares = PoolShares(maxConnections: maxConnections, loops: loops.count)
        let kept = shares.kept(minConnections: minConnections)
        var pools: [ConnectionPool] = []
        var indexByLoop: [ObjectIdentifier: Int] = [:]
        for (index, limit) in shares.limits.enumerated() {
            let loop = loops.isEmpty ? group.next() : loops[index]
            pools.append(ConnectionPool(
                settings: PoolState.Settings(maxConnections: limit, minConnections: kept[index]), configuration: configuration, loop: loop,
                retryAfterSeconds: retryAfterSeconds, logger: logger))
            indexByLoop[ObjectIdentifier(loop)] = index
        }
        self.pools = pools
        self.limits = shares.limits
        self.indexByLoop = indexByLoop
        self.shares = Mutex(shares)
    }

    /// Runs `work` with the pool to lease from: the calling task's loop's when it has a connection
    /// to spare, else the one with the most to spare (see the type's notes).
    package func withPool<T>(_ work: (ConnectionPool) async throws -> T) async rethrows -> T {
        if pools.count == 1 { return try await work(pools[0]) }
        let own = MultiThreadedEventLoopGroup.currentEventLoop.flatMap { indexByLoop[ObjectIdentifier($0)] }
        let turn = own == nil ? turn.wrappingAdd(1, ordering: .relaxed).oldValue : 0
        let index = shares.withLock { $0.reserve(own: own, turn: turn) }
        defer { shares.withLock { $0.finish(index) } }
        return try await work(pools[index])
    }

    /// Runs every pool until the task is cancelled.
    package func run() async {
        await withDiscardingTaskGroup { group in
            for pool in pools {
                group.addTask { await pool.run() }
            }
        }
    }
}
