import StratusConnections
import XCTest

/// The waiting leases' bookkeeping: waiting, deadlines armed or refused, taking, early cancellations.
final class LeaseWaitersTests: XCTestCase {
    typealias Waiters = LeaseWaiters<String, String>

    func testALeaseWaitsArmsItsDeadlineAndIsTakenOnce() {
        var waiters = Waiters()
        XCTAssertTrue(waiters.begin(1))
        waiters.wait(1, "lease 1")
        XCTAssertTrue(waiters.isWaiting(1))
        XCTAssertTrue(waiters.arm(1, "deadline 1"))
        let taken = waiters.take(1)
        XCTAssertEqual(taken?.waiter, "lease 1")
        XCTAssertEqual(taken?.deadline, "deadline 1", "its deadline is cancelled with it")
        XCTAssertNil(waiters.take(1), "once")
        XCTAssertEqual(waiters.count, 0)
    }

    func testALeaseServedBeforeItsDeadlineIsArmedRefusesTheDeadline() {
        var waiters = Waiters()
        XCTAssertTrue(waiters.begin(1))
        waiters.wait(1, "lease 1")
        let served = waiters.take(1)
        XCTAssertEqual(served?.waiter, "lease 1")
        XCTAssertNil(served?.deadline, "no deadline yet")
        XCTAssertFalse(waiters.arm(1, "deadline 1"), "served meanwhile: the caller cancels the timer")
        XCTAssertFalse(waiters.arm(2, "deadline 2"), "a lease that never waited")
    }

    /// A cancellation's effect by when it comes.
    func testACancellationBeforeTheLeaseWaitsIsRememberedAndRefusesIt() {
        let cases: [(cancelBeforeBegin: Bool, waiting: Bool, begins: Bool, remembered: Int)] = [
            (true, false, false, 0),  // remembered, then consumed by the refused begin
            (false, true, true, 0),  // while it waits: nothing to remember (the pool takes it instead)
            (false, false, true, 1),  // after it was served: a stale entry, bounded
        ]
        for test in cases {
            var waiters = Waiters()
            if test.cancelBeforeBegin { waiters.cancelledEarly(7) }
            if test.cancelBeforeBegin {
                XCTAssertEqual(waiters.begin(7), test.begins, "\(test)")
            } else {
                XCTAssertTrue(waiters.begin(7))
                waiters.wait(7, "lease")
                if !test.waiting { _ = waiters.take(7) }
                waiters.cancelledEarly(7)
            }
            XCTAssertEqual(waiters.remembered, test.remembered, "\(test)")
        }
    }

    func testEarlyCancellationsAreBounded() {
        var waiters = Waiters(maxRemembered: 3)
        for id in 1...3 { waiters.cancelledEarly(id) }
        XCTAssertEqual(waiters.remembered, 3)
        waiters.cancelledEarly(4)
        XCTAssertEqual(waiters.remembered, 1, "full: forgotten at once, then the new one kept")
        XCTAssertTrue(waiters.begin(1), "a forgotten one is no longer refused")
        XCTAssertFalse(waiters.begin(4))
        XCTAssertEqual(Waiters(maxRemembered: 0).maxRemembered, 1)
        XCTAssertEqual(Waiters().maxRemembered, 1024)
    }
}
