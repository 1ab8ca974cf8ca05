import StratusCore
import XCTest

/// A container's own limits: their text as the CLI and the console take it, what each comes to
/// beside the process's settings, and a process's lease of a shared request bucket, driven with
/// instants of the test's own (no sleeps).
final class ContainerLimitsTests: XCTestCase {
    let start = ContinuousClock.now

    func at(_ seconds: Double) -> ContinuousClock.Instant { start + .milliseconds(Int64(seconds * 1000)) }

    func testLimitsAreSetFromBoundedTextAndShownAsTheyWereSet() throws {
        var limits = ContainerLimits()
        for setting in ContainerLimits.Setting.allCases { XCTAssertEqual(limits.text(of: setting), "default") }
        try limits.set(.requestRate, "40")
        try limits.set(.requestBurst, "2.5")
        try limits.set(.userQuotaBytes, "5000")
        try limits.set(.maxSubscriptionsPerUser, "0")
        XCTAssertEqual(limits, ContainerLimits(requestRate: 40, requestBurst: 2.5, userQuotaBytes: 5000, maxSubscriptionsPerUser: 0))
        XCTAssertEqual(limits.text(of: .requestRate), "40")
        XCTAssertEqual(limits.text(of: .requestBurst), "2.5")
        XCTAssertEqual(limits.text(of: .maxSubscriptionsPerUser), "0")
        try limits.set(.requestRate, "default")
        XCTAssertNil(limits.requestRate)

        let refused = ["-1", "nan", "inf", "1e300", "forty", String(repeating: "9", count: 40), "1.5"]
        for text in refused {
            // A fraction is a rate, never a count.
            for setting in ContainerLimits.Setting.allCases where text != "1.5" || [.userQuotaBytes, .maxSubscriptionsPerUser].contains(setting) {
                var copy = limits
                XCTAssertThrowsError(try copy.set(setting, text), "\(setting) \(text)") { error in
                    let error = error as? StratusError
                    XCTAssertEqual(error?.code, .badRequest)
                    XCTAssertTrue(error?.reason.contains(setting.rawValue) ?? false, "\(String(describing: error))")
                    XCTAssertLessThan(error?.reason.utf8.count ?? 0, 400, "client text is excerpted")
                }
                XCTAssertEqual(copy, limits, "a refused value changes nothing")
            }
        }
    }

    func testRatesAndQuotasFallBackToTheProcessUnlessTheContainerSetsThem() {
        XCTAssertEqual(ContainerLimits().containerRate, .process)
        XCTAssertEqual(ContainerLimits().userRate, .process)
        XCTAssertEqual(ContainerLimits(requestRate: 0).containerRate, .off)
        // Without a burst, a second's worth; a burst is never below one lease's slice.
        XCTAssertEqual(ContainerLimits(requestRate: 40).containerRate, .shared(perSecond: 40, burst: 40))
        XCTAssertEqual(ContainerLimits(requestRate: 400, requestBurst: 2).containerRate, .shared(perSecond: 400, burst: 40))
        XCTAssertEqual(ContainerLimits(userRequestRate: 0.01, userRequestBurst: 4).userRate, .shared(perSecond: 0.01, burst: 4))

        XCTAssertEqual(ContainerLimits().userQuota(default: 7), 7)
        XCTAssertEqual(ContainerLimits(userQuotaBytes: 0).userQuota(default: 7), 0, "0: no quota for this container")
        XCTAssertEqual(ContainerLimits(userQuotaBytes: 9).userQuota(default: 7), 9)
        XCTAssertEqual(ContainerLimits().subscriptionsPerUser(default: 1000), 1000)
        XCTAssertEqual(ContainerLimits(maxSubscriptionsPerUser: 0).subscriptionsPerUser(default: 1000), Int.max)
        XCTAssertEqual(ContainerLimits(maxSubscriptionsPerUser: 3).subscriptionsPerUser(default: 1000), 3)
    }

    func testALeaseIsASliceOfATenthOfASecond() {
        XCTAssertEqual(RequestLease.slice(perSecond: 0.01), 1)
        XCTAssertEqual(RequestLease.slice(perSecond: 40), 4)
        XCTAssertEqual(RequestLease.slice(perSecond: 45), 5)
        XCTAssertEqual(RequestLease.slice(perSecond: 1_000_000), 10_000)
    }

    func testALeaseSpendsItsTokensThenLeasesAgainAndLapses() {
        var lease = RequestLease()
        XCTAssertEqual(lease.take(now: at(0)), .lease, "nothing held: ask the bucket")
        lease.leased(3, wait: 0, now: at(0))
        for _ in 0..<3 { XCTAssertEqual(lease.take(now: at(0.1)), .admit) }
        XCTAssertEqual(lease.take(now: at(0.1)), .lease)
        // Tokens not spent within the lifetime lapse: the processes admit less, never more.
        lease.leased(5, wait: 0, now: at(1))
        XCTAssertEqual(lease.take(now: at(1.5)), .admit)
        XCTAssertFalse(lease.isIdle(now: at(1.5)))
        XCTAssertEqual(lease.take(now: at(2)), .lease)
        XCTAssertTrue(lease.isIdle(now: at(2)))
        // A token given back is spent again, within the lease only.
        lease.leased(1, wait: 0, now: at(3))
        XCTAssertEqual(lease.take(now: at(3)), .admit)
        lease.giveBack(now: at(3.1))
        XCTAssertEqual(lease.take(now: at(3.2)), .admit)
        lease.giveBack(now: at(4.5))
        XCTAssertEqual(lease.take(now: at(4.5)), .lease)
    }

    func testAnEmptyLeaseRefusesWithoutAskingUntilASliceFlowedIn() {
        var lease = RequestLease()
        _ = lease.take(now: at(0))
        lease.leased(0, wait: 0.25, now: at(0))
        XCTAssertEqual(lease.take(now: at(0.1)), .refuse(retryAfter: 1), "refused here, with whole seconds")
        XCTAssertEqual(lease.take(now: at(0.24)), .refuse(retryAfter: 1))
        XCTAssertEqual(lease.take(now: at(0.25)), .lease, "asks again once a slice is there")
        lease.leased(0, wait: 99.2, now: at(1))
        XCTAssertEqual(lease.take(now: at(2)), .refuse(retryAfter: 100))
        // A wait past reason (or not a number) is bounded.
        lease.leased(0, wait: .infinity, now: at(200))
        XCTAssertEqual(lease.take(now: at(201)), .refuse(retryAfter: 3_600))
        lease.leased(0, wait: -5, now: at(5000))
        XCTAssertEqual(lease.take(now: at(5000)), .refuse(retryAfter: 1))
        XCTAssertEqual(lease.take(now: at(5000.01)), .lease)
    }

    func testMetricsNameAtMostTheirLimitOfContainers() {
        var labels = ContainerMetricLabels(limit: 2)
        XCTAssertEqual(labels.label("a"), "a")
        XCTAssertEqual(labels.label("b"), "b")
        XCTAssertEqual(labels.label("c"), "other")
        XCTAssertEqual(labels.label("a"), "a", "a named container stays named")
        for index in 0..<1000 { XCTAssertEqual(labels.label("minted-\(index)"), "other") }
        XCTAssertEqual(labels.named, ["a", "b"])
        var off = ContainerMetricLabels(limit: 0)
        XCTAssertNil(off.label("a"))
        XCTAssertEqual(ContainerMetricLabels.escaped("a\"b\\c\nd"), "a\\\"b\\\\c\\nd")
    }
}
