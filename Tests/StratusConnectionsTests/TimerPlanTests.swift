import StratusConnections
import XCTest

/// When the runtime's timers run.
final class TimerPlanTests: XCTestCase {
    func testAPoolSweepsIdleConnectionsOnlyWhenItCanCloseOne() {
        let cases: [(max: Int, min: Int, idle: Duration, sweep: TimerPlan.Repeating?)] = [
            (4, 0, .seconds(60), .init(initialDelay: .seconds(60), interval: .seconds(30))),
            (4, 3, .seconds(10), .init(initialDelay: .seconds(10), interval: .seconds(5))),
            (4, 4, .seconds(60), nil),
            (1, 1, .seconds(60), nil),
            (2, 0, .milliseconds(3), .init(initialDelay: .milliseconds(3), interval: .microseconds(1500))),
            (2, 0, .seconds(-1), .init(initialDelay: .zero, interval: .zero)),
        ]
        for test in cases {
            let settings = PoolState.Settings(maxConnections: test.max, minConnections: test.min, idleTimeout: test.idle)
            XCTAssertEqual(TimerPlan.idleSweep(settings), test.sweep, "\(test)")
        }
    }

    func testATimersDelayIsWholeNanosecondsNeverNegativeAndClamped() {
        let cases: [(Duration, Int64)] = [
            (.milliseconds(1500), 1_500_000_000), (.zero, 0), (.seconds(-1), 0), (.nanoseconds(-1), 0),
            (.nanoseconds(1), 1), (.seconds(2) + .nanoseconds(3), 2_000_000_003),
            (Duration(secondsComponent: 0, attosecondsComponent: 999_999_999), 0),
            (Duration(secondsComponent: 1, attosecondsComponent: 1_500_000_000), 1_000_000_001),
            (.seconds(Int64.max / 1_000_000_000), Int64.max / 1_000_000_000 * 1_000_000_000),
            (.seconds(Int64.max / 1_000_000_000) + .seconds(1), .max), (.seconds(Int64.max), .max),
        ]
        for (duration, nanoseconds) in cases {
            XCTAssertEqual(TimerPlan.nanoseconds(duration), nanoseconds, "\(duration)")
        }
    }
}
