import StratusConnections
import XCTest

/// How the connection limit is shared between the event loops' pools, and which pool a lease uses.
final class PoolSharesTests: XCTestCase {
    func testTheLimitIsSharedOutEvenlyNeverLeavingAPoolWithout() {
        let cases: [(max: Int, loops: Int, limits: [Int], note: String)] = [
            (20, 2, [10, 10], "even"),
            (5, 2, [3, 2], "the first takes the remainder"),
            (20, 1, [20], "one loop"),
            (3, 8, [1, 1, 1], "no pool without a connection"),
            (1, 2, [1], "one connection"),
            (0, 2, [1], "at least one connection"),
            (-4, 3, [1], "a negative limit is one"),
            (7, 0, [7], "no loops: one pool"),
        ]
        for test in cases {
            XCTAssertEqual(PoolShares.limits(maxConnections: test.max, loops: test.loops), test.limits, test.note)
            XCTAssertEqual(PoolShares(maxConnections: test.max, loops: test.loops).limits, test.limits, test.note)
            XCTAssertEqual(PoolShares(maxConnections: test.max, loops: test.loops).leases, Array(repeating: 0, count: test.limits.count))
        }
    }

    func testTheKeptConnectionsAreSharedWithinEachPoolsLimit() {
        let cases: [(max: Int, loops: Int, min: Int, kept: [Int])] = [
            (20, 2, 4, [2, 2]), (5, 2, 3, [2, 1]), (5, 2, 9, [3, 2]), (4, 2, -1, [0, 0]), (3, 8, 2, [1, 1, 0]), (1, 1, 1, [1]),
        ]
        for test in cases {
            XCTAssertEqual(PoolShares(maxConnections: test.max, loops: test.loops).kept(minConnections: test.min), test.kept, "\(test)")
        }
        for total in 1...24 {
            for loops in 1...6 {
                let shares = PoolShares(maxConnections: total, loops: loops)
                for kept in 0...total {
                    let split = shares.kept(minConnections: kept)
                    XCTAssertEqual(split.reduce(0, +), kept)
                    XCTAssertTrue(zip(split, shares.limits).allSatisfy { $0 <= $1 }, "\(kept) of \(total) over \(loops): \(split) within \(shares.limits)")
                }
            }
        }
        XCTAssertEqual(PoolShares.shares(of: 5, pools: 0), [], "no pools, no shares")
    }

    func testALeaseUsesItsOwnLoopsPoolWhileItHasOneToSpare() {
        var shares = PoolShares(maxConnections: 4, loops: 2)
        XCTAssertEqual(shares.reserve(own: 1, turn: 0), 1)
        XCTAssertEqual(shares.reserve(own: 1, turn: 0), 1)
        XCTAssertEqual(shares.leases, [0, 2])
        // Its own pool is full: the one with the most to spare.
        XCTAssertEqual(shares.reserve(own: 1, turn: 0), 0)
        XCTAssertEqual(shares.reserve(own: 1, turn: 0), 0)
        // Every pool is full: the lease still goes somewhere (it waits there), its own first.
        XCTAssertEqual(shares.reserve(own: 1, turn: 0), 1)
        XCTAssertEqual(shares.leases, [2, 3])
        shares.finish(1)
        shares.finish(1)
        XCTAssertEqual(shares.leases, [2, 1])
        XCTAssertEqual(shares.reserve(own: 0, turn: 0), 1, "the own pool full: the other, which has one to spare")
    }

    func testALeaseOnNoPooledLoopTakesThePoolWithMostToSpareTakingTurnsOnATie() {
        let cases: [(limits: (max: Int, loops: Int), held: [Int], turn: Int, chosen: Int)] = [
            ((4, 2), [0, 0], 0, 0), ((4, 2), [0, 0], 1, 1), ((4, 2), [0, 0], 7, 1), ((4, 2), [0, 0], -1, 1),
            ((4, 2), [1, 0], 0, 1), ((4, 2), [0, 1], 1, 0), ((5, 2), [1, 0], 0, 0), ((6, 3), [2, 0, 1], 0, 1),
            ((6, 3), [1, 1, 1], 2, 2), ((4, 2), [2, 2], 1, 1),
        ]
        for test in cases {
            var shares = PoolShares(maxConnections: test.limits.max, loops: test.limits.loops)
            for (pool, count) in test.held.enumerated() {
                for _ in 0..<count { _ = shares.reserve(own: pool, turn: 0) }
            }
            XCTAssertEqual(shares.leases, test.held, "set up \(test)")
            XCTAssertEqual(shares.reserve(own: nil, turn: test.turn), test.chosen, "\(test)")
        }
    }

    func testAnOwnIndexThatIsNoPoolCountsAsNone() {
        var shares = PoolShares(maxConnections: 4, loops: 2)
        XCTAssertEqual(shares.reserve(own: 5, turn: 1), 1)
        XCTAssertEqual(shares.reserve(own: -1, turn: 0), 0)
    }

    func testFinishingWhatWasNotReservedChangesNothing() {
        var shares = PoolShares(maxConnections: 4, loops: 2)
        shares.finish(0)
        shares.finish(9)
        shares.finish(-1)
        XCTAssertEqual(shares.leases, [0, 0])
    }

    func testOnePoolServesEveryLease() {
        var shares = PoolShares(maxConnections: 3, loops: 1)
        for turn in 0..<5 { XCTAssertEqual(shares.reserve(own: turn % 2 == 0 ? nil : 0, turn: turn), 0) }
        XCTAssertEqual(shares.leases, [5])
    }
}
