import StratusPush
import XCTest

/// A seeded generator (SplitMix64), so jittered delays repeat.
struct SeededRandom: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Always the same value.
struct FixedRandom: RandomNumberGenerator {
    var value: UInt64
    mutating func next() -> UInt64 { value }
}

final class WebhookBackoffTests: XCTestCase {
    func testCeilingDoublesFromBaseAndIsCapped() {
        let ceilings = (1...8).map { WebhookBackoff.ceiling(afterAttempt: $0, base: .seconds(1), maximum: .seconds(60)) }
        XCTAssertEqual(ceilings, [.seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(16), .seconds(32), .seconds(60), .seconds(60)])
        XCTAssertEqual(WebhookBackoff.ceiling(afterAttempt: 10_000, base: .seconds(1), maximum: .seconds(3600)), .seconds(3600))
        XCTAssertEqual(WebhookBackoff.ceiling(afterAttempt: 0, base: .milliseconds(500), maximum: .seconds(3600)), .milliseconds(500))
    }

    func testFullJitterSpansZeroToTheCeiling() {
        var low = FixedRandom(value: 0)
        var high = FixedRandom(value: .max)
        XCTAssertEqual(WebhookBackoff.delay(afterAttempt: 3, base: .seconds(1), maximum: .seconds(60), jitter: &low), .zero)
        let top = WebhookBackoff.delay(afterAttempt: 3, base: .seconds(1), maximum: .seconds(60), jitter: &high)
        XCTAssertLessThanOrEqual(top, .seconds(4))
        XCTAssertGreaterThan(top, .milliseconds(3999))
    }

    func testDelaysStayWithinBoundsAndVary() {
        var random = SeededRandom(state: 42)
        for attempt in 1...40 {
            let ceiling = WebhookBackoff.ceiling(afterAttempt: attempt, base: .seconds(2), maximum: .seconds(900))
            var seen = Set<Duration>()
            for _ in 0..<50 {
                let delay = WebhookBackoff.delay(afterAttempt: attempt, base: .seconds(2), maximum: .seconds(900), jitter: &random)
                XCTAssertGreaterThanOrEqual(delay, .zero)
                XCTAssertLessThanOrEqual(delay, ceiling)
                seen.insert(delay)
            }
            XCTAssertGreaterThan(seen.count, 40, "attempt \(attempt): jitter draws should differ")
        }
    }

    func testTheSameSeedGivesTheSameDelays() {
        var first = SeededRandom(state: 7)
        var second = SeededRandom(state: 7)
        let a = (1...10).map { WebhookBackoff.delay(afterAttempt: $0, base: .seconds(1), maximum: .seconds(60), jitter: &first) }
        let b = (1...10).map { WebhookBackoff.delay(afterAttempt: $0, base: .seconds(1), maximum: .seconds(60), jitter: &second) }
        XCTAssertEqual(a, b)
    }

    func testSystemRandomStaysWithinBounds() {
        for _ in 0..<100 {
            XCTAssertLessThanOrEqual(WebhookBackoff.delay(afterAttempt: 5, base: .seconds(1), maximum: .seconds(10)), .seconds(10))
        }
    }
}
