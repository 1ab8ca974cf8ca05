import StratusConnections
import XCTest

/// The pool's branches the scenario tests do not reach: the lease that does not wait, events during
/// shutdown, a retry that comes after the database answered, a connection given back twice.
final class PoolStateBranchTests: XCTestCase {
    let t0 = ContinuousClock.now

    /// A pool with `kept` connections open and idle (ids 1…kept).
    func pool(max: Int, kept: Int) -> PoolState {
        var pool = PoolState(settings: .init(maxConnections: max, minConnections: kept))
        _ = pool.start()
        for id in 0..<kept { _ = pool.connected(id + 1, now: t0) }
        return pool
    }

    func testALeaseThatDoesNotWaitTakesTheMostRecentlyUsedIdleConnectionOrNothing() {
        let cases: [(kept: Int, shutDown: Bool, leases: [Int?])] = [
            (2, false, [2, 1, nil]),
            (0, false, [nil]),
            (2, true, [nil]),
        ]
        for test in cases {
            var pool = pool(max: 3, kept: test.kept)
            if test.shutDown { _ = pool.shutdown() }
            XCTAssertEqual(test.leases.map { _ in pool.leaseIdle() }, test.leases, "\(test)")
            XCTAssertTrue(pool.connecting.isEmpty, "it never opens a connection")
            XCTAssertTrue(pool.waiters.isEmpty, "nor waits")
        }
    }

    func testEventsDuringShutdown() {
        var pool = pool(max: 3, kept: 1)
        XCTAssertEqual(pool.lease(1), .use(1))
        guard case .wait(let opening) = pool.lease(2) else { return XCTFail("the second lease waits") }
        XCTAssertEqual(opening.connect, [2])
        guard case .wait(let another) = pool.lease(3) else { return XCTFail("the third lease waits") }
        XCTAssertEqual(another.connect, [3])
        let down = pool.shutdown()
        XCTAssertEqual(down.failed, [2, 3])
        XCTAssertTrue(pool.shutdown().isEmpty, "a second shutdown does nothing")
        XCTAssertTrue(pool.connectFailed(2).isEmpty, "no backoff while shutting down")
        XCTAssertFalse(pool.backingOff)
        XCTAssertEqual(pool.connected(3, now: t0).close, [3])
        XCTAssertNil(pool.leaseIdle())
        XCTAssertEqual(pool.release(1, reusable: true, now: t0).close, [1], "a usable connection given back closes")
        XCTAssertTrue(pool.isDrained)
        XCTAssertTrue(pool.retryDue().isEmpty)
    }

    func testARetryThatComesAfterTheDatabaseAnsweredOpensNothingMore() {
        var pool = PoolState(settings: .init(maxConnections: 2))
        _ = pool.lease(1)
        _ = pool.lease(2)
        XCTAssertEqual(pool.connecting, [1, 2])
        XCTAssertEqual(pool.connectFailed(1).retryAfter, pool.settings.backoff)
        XCTAssertTrue(pool.retryScheduled)
        // The other attempt succeeds: the backoff ends, the retry is still to come.
        let opened = pool.connected(2, now: t0)
        XCTAssertEqual(opened.handoffs, [.init(waiter: 1, connection: 2)])
        XCTAssertEqual(opened.connect, [3], "the second waiter gets an attempt at once")
        XCTAssertFalse(pool.backingOff)
        XCTAssertTrue(pool.retryScheduled)
        XCTAssertTrue(pool.retryDue().isEmpty, "the retry finds nothing to do")
        XCTAssertFalse(pool.retryScheduled)
    }

    func testAConnectionGivenBackTwiceIsNotClosedWhileIdle() {
        var pool = pool(max: 2, kept: 1)
        XCTAssertEqual(pool.lease(1), .use(1))
        XCTAssertTrue(pool.release(1, reusable: true, now: t0).isEmpty)
        XCTAssertTrue(pool.release(1, reusable: true, now: t0).isEmpty, "idle already: left alone")
        XCTAssertEqual(pool.idle.map(\.connection), [1])
    }

    func testAKeptConnectionThatClosesWhileIdleIsReplaced() {
        let cases: [(max: Int, kept: Int, closing: Int, connect: [Int])] = [
            (2, 2, 1, [3]), (2, 1, 1, [2]), (3, 0, 1, []),
        ]
        for test in cases {
            var pool = pool(max: test.max, kept: test.kept)
            if test.kept == 0 {
                _ = pool.lease(1)
                _ = pool.connected(1, now: t0)
                _ = pool.release(1, reusable: true, now: t0)
            }
            XCTAssertEqual(pool.closed(test.closing).connect, test.connect, "\(test)")
        }
    }

    func testALeaseFailsAtOnceOnlyWhileNothingIsOpenOrOpening() {
        var pool = PoolState(settings: .init(maxConnections: 2))
        _ = pool.lease(1)
        XCTAssertEqual(pool.connectFailed(1).failed, [1])
        XCTAssertEqual(pool.lease(2), .fail(.unavailable))
        XCTAssertEqual(pool.retryDue().connect, [], "no waiter, nothing kept: the retry opens nothing")
        guard case .wait(let waiting) = pool.lease(3) else { return XCTFail("after the retry a lease waits again") }
        XCTAssertEqual(waiting.connect, [2], "one attempt at a time")
    }
}
