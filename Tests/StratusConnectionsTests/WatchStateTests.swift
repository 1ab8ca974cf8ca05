import StratusConnections
import XCTest

/// The connection watch's transitions and the one-shot result's, without a connection.
final class WatchStateTests: XCTestCase {
    func testHandlersAddedWhileOpenAreCalledOnceAtTheCloseInOrder() {
        var watch = WatchState<String>()
        XCTAssertFalse(watch.isClosed)
        XCTAssertEqual(watch.add("a"), 1)
        XCTAssertEqual(watch.add("b"), 2)
        XCTAssertEqual(watch.add("c"), 3)
        XCTAssertEqual(watch.count, 3)
        XCTAssertEqual(watch.close(), ["a", "b", "c"])
        XCTAssertTrue(watch.isClosed)
        XCTAssertEqual(watch.count, 0)
        XCTAssertEqual(watch.close(), [], "a second close calls nothing again")
    }

    func testARemovedHandlerIsNotCalled() {
        var watch = WatchState<String>()
        let first = watch.add("ended")
        _ = watch.add("running")
        XCTAssertTrue(watch.remove(first!))
        XCTAssertFalse(watch.remove(first!), "removed once")
        XCTAssertFalse(watch.remove(99), "an unknown key")
        XCTAssertEqual(watch.close(), ["running"])
    }

    func testAHandlerAddedAfterTheCloseGetsNoKeyAndIsCalledByTheCaller() {
        var watch = WatchState<String>()
        _ = watch.close()
        XCTAssertNil(watch.add("late"))
        XCTAssertEqual(watch.count, 0)
        XCTAssertFalse(watch.remove(0), "the key a late handler is given back removes nothing")
    }

    func testKeysAreNeverReused() {
        var watch = WatchState<Int>()
        var keys: Set<Int> = []
        for value in 0..<50 {
            let key = watch.add(value)!
            XCTAssertTrue(keys.insert(key).inserted)
            if value.isMultiple(of: 2) { watch.remove(key) }
        }
        XCTAssertEqual(watch.close(), Array(stride(from: 1, to: 50, by: 2)))
    }

    /// Every order of the waiter's arrival and of results: exactly one delivery, of the first result.
    func testAOneShotDeliversTheFirstResultOnceWhicheverComesFirst() {
        enum Step { case start(String), resume(Int) }
        let cases: [(steps: [Step], outcomes: [String], note: String)] = [
            ([.start("w"), .resume(1)], ["wait", "deliver w"], "the waiter first"),
            ([.resume(1), .start("w")], ["kept", "deliver 1"], "the result first"),
            ([.start("w"), .resume(1), .resume(2)], ["wait", "deliver w", "ignored"], "a second result after delivery"),
            ([.resume(1), .resume(2), .start("w")], ["kept", "ignored", "deliver 1"], "a second result before the waiter: the first wins"),
            ([.resume(1), .start("w"), .start("v")], ["kept", "deliver 1", "wait"], "delivered once: a second waiter waits"),
            ([.start("w"), .start("v"), .resume(1)], ["wait", "wait", "deliver v"], "the latest waiter is the one resumed"),
        ]
        for test in cases {
            var shot = OneShotState<String, Int>()
            var outcomes: [String] = []
            for step in test.steps {
                switch step {
                case .start(let waiter):
                    switch shot.start(waiter) {
                    case .wait: outcomes.append("wait")
                    case .deliver(let value): outcomes.append("deliver \(value)")
                    }
                case .resume(let value):
                    switch shot.resume(value) {
                    case .ignored: outcomes.append("ignored")
                    case .kept: outcomes.append("kept")
                    case .deliver(let waiter): outcomes.append("deliver \(waiter)")
                    }
                }
            }
            XCTAssertEqual(outcomes, test.outcomes, test.note)
            XCTAssertTrue(shot.hasResult, test.note)
        }
        XCTAssertFalse(OneShotState<String, Int>().hasResult)
    }
}
