import StratusConnections
import XCTest

/// The pool's rules without a database: each event's actions, and the invariants under random
/// sequences of events (a PostgreSQL restart among them).
final class PoolStateTests: XCTestCase {
    let t0 = ContinuousClock.now

    func testTheKeptConnectionsOpenAtTheStartAndALeaseTakesAnIdleOne() {
        var pool = PoolState(settings: .init(maxConnections: 4, minConnections: 2))
        XCTAssertEqual(pool.start().connect, [1, 2])
        XCTAssertTrue(pool.connected(1, now: t0).isEmpty)
        XCTAssertTrue(pool.connected(2, now: t0).isEmpty)
        XCTAssertEqual(pool.lease(10), .use(2), "the most recently used idle connection")
        XCTAssertEqual(pool.lease(11), .use(1))
        guard case .wait(let actions) = pool.lease(12) else { return XCTFail("a third lease waits") }
        XCTAssertEqual(actions.connect, [3], "and a connection is opened for it")
        XCTAssertEqual(pool.connected(3, now: t0).handoffs, [.init(waiter: 12, connection: 3)])
        XCTAssertEqual(pool.count, 3)
    }

    func testALeaseWaitsForAReleaseAtTheLimit() {
        var pool = PoolState(settings: .init(maxConnections: 1))
        guard case .wait(let first) = pool.lease(1) else { return XCTFail() }
        XCTAssertEqual(first.connect, [1])
        XCTAssertEqual(pool.connected(1, now: t0).handoffs, [.init(waiter: 1, connection: 1)])
        guard case .wait(let second) = pool.lease(2) else { return XCTFail() }
        XCTAssertTrue(second.connect.isEmpty, "no connection beyond the limit")
        XCTAssertEqual(pool.release(1, reusable: true, now: t0).handoffs, [.init(waiter: 2, connection: 1)])
        XCTAssertEqual(pool.leased, [1])
        XCTAssertTrue(pool.waiters.isEmpty)
    }

    func testACancelledWaiterIsSkipped() {
        var pool = PoolState(settings: .init(maxConnections: 1))
        _ = pool.lease(1)
        _ = pool.connected(1, now: t0)
        _ = pool.lease(2)
        _ = pool.lease(3)
        XCTAssertTrue(pool.cancel(2))
        XCTAssertFalse(pool.cancel(2), "once")
        XCTAssertFalse(pool.cancel(1), "a lease that has its connection is not waiting")
        XCTAssertEqual(pool.release(1, reusable: true, now: t0).handoffs, [.init(waiter: 3, connection: 1)])
    }

    /// The sequence that stopped the process inside the database client's own pool: every kept
    /// connection closes at once (PostgreSQL restarts), the reopening fails, and a lease arrives.
    func testAPostgreSQLRestartWithEveryConnectionKeptOpen() {
        var pool = PoolState(settings: .init(maxConnections: 2, minConnections: 2))
        XCTAssertEqual(pool.start().connect, [1, 2])
        _ = pool.connected(1, now: t0)
        _ = pool.connected(2, now: t0)
        // Both close: both are replaced.
        XCTAssertEqual(pool.closed(1).connect, [3])
        XCTAssertEqual(pool.closed(2).connect, [4])
        // The server refuses while it restarts: the pool backs off and opens nothing more.
        let failed = pool.connectFailed(3)
        XCTAssertEqual(failed.retryAfter, pool.settings.backoff)
        XCTAssertTrue(failed.connect.isEmpty)
        XCTAssertEqual(pool.connectFailed(4).retryAfter, nil, "one retry scheduled at a time")
        XCTAssertEqual(pool.count, 0)
        // A lease now fails at once instead of trapping or waiting for a database that is not there.
        XCTAssertEqual(pool.lease(7), .fail(.unavailable))
        // The retry opens one connection; the second waits until one has opened.
        XCTAssertEqual(pool.retryDue().connect, [5])
        guard case .wait(let waiting) = pool.lease(8) else { return XCTFail("a lease waits for the attempt in flight") }
        XCTAssertTrue(waiting.connect.isEmpty, "one attempt at a time while attempts fail")
        let opened = pool.connected(5, now: t0)
        XCTAssertEqual(opened.handoffs, [.init(waiter: 8, connection: 5)])
        XCTAssertEqual(opened.connect, [6], "the database answers: the kept connections are opened again")
        XCTAssertEqual(pool.failures, 0)
        XCTAssertFalse(pool.backingOff)
    }

    func testWaitersFailWhenTheLastAttemptFailsWithNothingOpen() {
        var pool = PoolState(settings: .init(maxConnections: 3))
        _ = pool.lease(1)
        _ = pool.lease(2)
        let failed = pool.connectFailed(1)
        XCTAssertEqual(failed.failed, [], "an attempt is still in flight")
        let last = pool.connectFailed(2)
        XCTAssertEqual(last.failed, [1, 2])
        XCTAssertEqual(last.failure, .unavailable)
        XCTAssertTrue(pool.waiters.isEmpty)
    }

    func testALeasedConnectionThatClosedIsReplacedWhenGivenBack() {
        var pool = PoolState(settings: .init(maxConnections: 1, minConnections: 1))
        _ = pool.start()
        _ = pool.connected(1, now: t0)
        XCTAssertEqual(pool.lease(1), .use(1))
        XCTAssertTrue(pool.closed(1).isEmpty, "a leased connection's close waits for its release")
        _ = pool.lease(2)
        let released = pool.release(1, reusable: false, now: t0)
        XCTAssertEqual(released.close, [1])
        XCTAssertEqual(released.connect, [2], "the waiter gets a new connection")
        XCTAssertEqual(pool.connected(2, now: t0).handoffs, [.init(waiter: 2, connection: 2)])
    }

    func testBackoffDoublesUpToItsBound() {
        // The defaults: a restart of a few seconds is noticed within a second of its end.
        XCTAssertEqual(PoolState.Settings(maxConnections: 1).backoff, .milliseconds(50))
        XCTAssertEqual(PoolState.Settings(maxConnections: 1).maxBackoff, .seconds(1))
        let pool = PoolState(settings: .init(maxConnections: 1, backoff: .milliseconds(100), maxBackoff: .seconds(1)))
        XCTAssertEqual((1...6).map(pool.delay(afterFailures:)), [.milliseconds(100), .milliseconds(200), .milliseconds(400), .milliseconds(800), .seconds(1), .seconds(1)])
        XCTAssertEqual(pool.delay(afterFailures: Int.max), .seconds(1))
    }

    func testSettingsAreClampedToWhatCanServe() {
        XCTAssertEqual(PoolState.Settings(maxConnections: 0, minConnections: 5).maxConnections, 1)
        XCTAssertEqual(PoolState.Settings(maxConnections: 0, minConnections: 5).minConnections, 1)
        XCTAssertEqual(PoolState.Settings(maxConnections: 3, minConnections: -1).minConnections, 0)
    }

    func testIdleConnectionsBeyondTheKeptOnesCloseAfterTheTimeout() {
        var pool = PoolState(settings: .init(maxConnections: 3, minConnections: 1, idleTimeout: .seconds(60)))
        _ = pool.start()
        _ = pool.connected(1, now: t0)
        _ = pool.lease(1)
        _ = pool.lease(2)
        _ = pool.lease(3)
        _ = pool.connected(2, now: t0)
        _ = pool.connected(3, now: t0)
        _ = pool.release(1, reusable: true, now: t0)
        _ = pool.release(2, reusable: true, now: t0 + .seconds(30))
        _ = pool.release(3, reusable: true, now: t0 + .seconds(50))
        XCTAssertEqual(pool.closeIdle(now: t0 + .seconds(59)).close, [])
        XCTAssertEqual(pool.closeIdle(now: t0 + .seconds(95)).close, [1, 2], "the oldest, down to the kept one")
        XCTAssertEqual(pool.count, 1)
    }

    func testShutdownFailsWaitersAndClosesEverything() {
        var pool = PoolState(settings: .init(maxConnections: 2, minConnections: 1))
        _ = pool.start()
        _ = pool.connected(1, now: t0)
        _ = pool.lease(1)
        _ = pool.lease(2)
        _ = pool.lease(3)
        let down = pool.shutdown()
        XCTAssertEqual(down.failed, [2, 3], "the two leases waiting for the one connection being opened")
        XCTAssertEqual(down.failure, .shutDown)
        XCTAssertEqual(pool.lease(4), .fail(.shutDown))
        XCTAssertEqual(pool.release(1, reusable: true, now: t0).close, [1])
        XCTAssertEqual(pool.connected(2, now: t0).close, [2])
        XCTAssertTrue(pool.isDrained)
    }

    func testEventsItDoesNotExpectAreIgnored() {
        var pool = PoolState(settings: .init(maxConnections: 2))
        XCTAssertTrue(pool.closed(42).isEmpty)
        XCTAssertTrue(pool.connectFailed(42).isEmpty)
        XCTAssertEqual(pool.connected(42, now: t0).close, [42], "a connection it did not ask for is closed")
        XCTAssertEqual(pool.release(42, reusable: true, now: t0).close, [42])
        XCTAssertTrue(pool.release(42, reusable: false, now: t0).isEmpty)
        XCTAssertTrue(pool.retryDue().isEmpty)
        XCTAssertFalse(pool.cancel(42))
        XCTAssertEqual(pool.count, 0)
    }

    /// Random events, a driver's worth of them, in every order: the invariants hold after each, and
    /// every waiter is eventually served or failed once the database answers again.
    func testInvariantsHoldUnderRandomEvents() {
        for seed in 1...300 {
            var random = SplitMix(seed: UInt64(seed))
            let maxConnections = Int(random.next() % 4) + 1
            let settings = PoolState.Settings(maxConnections: maxConnections, minConnections: Int(random.next() % UInt64(maxConnections + 1)))
            var pool = PoolState(settings: settings)
            var model = Model()
            model.apply(pool.start())
            var nextWaiter = 0
            var now = t0
            for step in 0..<400 {
                now += .milliseconds(Int(random.next() % 1000))
                let actions: PoolState.Actions
                switch random.next() % 9 {
                case 0, 1:
                    nextWaiter += 1
                    switch pool.lease(nextWaiter) {
                    case .use(let connection): model.holders[nextWaiter] = connection; actions = .init()
                    case .wait(let waiting): model.waiting.insert(nextWaiter); actions = waiting
                    case .fail: actions = .init()
                    }
                case 2:
                    guard let (waiter, connection) = model.holders.randomElement(using: &random) else { continue }
                    model.holders[waiter] = nil
                    actions = pool.release(connection, reusable: random.next() % 4 != 0, now: now)
                case 3:
                    guard let connection = model.opening.randomElement(using: &random) else { continue }
                    model.opening.remove(connection)
                    actions = pool.connected(connection, now: now)
                case 4:
                    guard let connection = model.opening.randomElement(using: &random) else { continue }
                    model.opening.remove(connection)
                    actions = pool.connectFailed(connection)
                case 5:
                    guard let connection = Array(pool.idle.map(\.connection) + pool.leased).randomElement(using: &random) else { continue }
                    actions = pool.closed(connection)
                case 6:
                    guard model.retryScheduled else { continue }
                    model.retryScheduled = false
                    actions = pool.retryDue()
                case 7:
                    guard let waiter = model.waiting.randomElement(using: &random) else { continue }
                    if pool.cancel(waiter) { model.waiting.remove(waiter) }
                    actions = .init()
                default:
                    actions = pool.closeIdle(now: now)
                }
                model.apply(actions)
                let context = "seed \(seed) step \(step)"
                XCTAssertLessThanOrEqual(pool.count, settings.maxConnections, context)
                XCTAssertTrue(Set(pool.idle.map(\.connection)).isDisjoint(with: pool.leased), context)
                XCTAssertTrue(pool.connecting.isDisjoint(with: pool.leased), context)
                XCTAssertTrue(pool.waiters.isEmpty || pool.idle.isEmpty, "nobody waits while a connection is idle, \(context)")
                XCTAssertEqual(Set(pool.waiters), model.waiting, context)
                XCTAssertEqual(pool.connecting, model.opening, context)
                XCTAssertEqual(Set(model.holders.values), pool.leased, context)
                XCTAssertEqual(model.holders.count, pool.leased.count, "a connection is leased to one holder at a time, \(context)")
                if !pool.backingOff && pool.failures == 0 {
                    XCTAssertGreaterThanOrEqual(pool.count, settings.minConnections, "the kept connections are open or opening, \(context)")
                }
                if pool.backingOff { XCTAssertTrue(model.retryScheduled, "a pool backing off has a retry coming, \(context)") }
                XCTAssertEqual(pool.retryScheduled, model.retryScheduled, context)
                if !pool.waiters.isEmpty {
                    XCTAssertTrue(!pool.connecting.isEmpty || !pool.leased.isEmpty || model.retryScheduled, "a waiter has something coming, \(context)")
                }
            }
            // The database answers again: every waiter is served.
            for _ in 0..<100 where !model.waiting.isEmpty {
                if model.retryScheduled { model.retryScheduled = false; model.apply(pool.retryDue()) }
                for connection in model.opening { model.opening.remove(connection); model.apply(pool.connected(connection, now: now)) }
                if let (waiter, connection) = model.holders.first {
                    model.holders[waiter] = nil
                    model.apply(pool.release(connection, reusable: true, now: now))
                }
            }
            XCTAssertTrue(model.waiting.isEmpty, "seed \(seed): every waiter served")
            let down = pool.shutdown()
            model.apply(down)
            for (_, connection) in model.holders { _ = pool.release(connection, reusable: true, now: now) }
            for connection in model.opening { _ = pool.connectFailed(connection) }
            XCTAssertTrue(pool.isDrained, "seed \(seed): shut down, nothing is left open")
        }
    }

    /// What the driver knows: who holds which connection, who waits, what is opening.
    struct Model {
        var holders: [Int: Int] = [:]
        var waiting = Set<Int>()
        var opening = Set<Int>()
        var retryScheduled = false

        mutating func apply(_ actions: PoolState.Actions) {
            for handoff in actions.handoffs {
                XCTAssertNotNil(waiting.remove(handoff.waiter), "a connection goes to a waiter")
                XCTAssertFalse(holders.values.contains(handoff.connection), "a connection is never handed to two")
                holders[handoff.waiter] = handoff.connection
            }
            for waiter in actions.failed { XCTAssertNotNil(waiting.remove(waiter)) }
            if !actions.failed.isEmpty { XCTAssertNotNil(actions.failure) }
            for connection in actions.connect { XCTAssertTrue(opening.insert(connection).inserted, "a fresh id") }
            if actions.retryAfter != nil {
                XCTAssertFalse(retryScheduled, "one retry at a time")
                retryScheduled = true
            }
        }
    }
}

/// A small seeded generator, so a failing seed can be run again.
struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
