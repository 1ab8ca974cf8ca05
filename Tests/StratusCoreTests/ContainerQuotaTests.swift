import StratusCore
import XCTest

/// A container's quotas over all its users: when a write must read the container's totals, whether
/// it may commit, and which record, zone or asset is blamed.
final class ContainerQuotaTests: XCTestCase {
    func testTheQuotasAreSetAsTheOtherLimitsAndNoneIsTheDefault() throws {
        var limits = ContainerLimits()
        XCTAssertEqual(limits.quota, ContainerQuota())
        try limits.set(.maxRecords, "10")
        try limits.set(.maxZones, "2")
        try limits.set(.quotaBytes, "5000")
        try limits.set(.assetQuotaBytes, "0")
        XCTAssertEqual(limits.quota, ContainerQuota(maxRecords: 10, maxZones: 2, quotaBytes: 5000, assetQuotaBytes: 0))
        XCTAssertEqual(limits.text(of: .maxRecords), "10")
        XCTAssertEqual(limits.text(of: .assetQuotaBytes), "0")
        try limits.set(.maxZones, "default")
        XCTAssertNil(limits.maxZones)
        XCTAssertEqual(limits.text(of: .maxZones), "default")
        for text in ["1.5", "-3", "ten", String(repeating: "9", count: 30)] {
            var copy = limits
            XCTAssertThrowsError(try copy.set(.maxRecords, text)) { error in
                XCTAssertEqual((error as? StratusError)?.code, .badRequest)
                XCTAssertTrue((error as? StratusError)?.reason.contains("max-records") ?? false)
            }
            XCTAssertEqual(copy, limits)
        }
    }

    func testOnlyAWriteThatAddsToALimitedTotalReadsTheTotals() {
        let none = ContainerQuota()
        XCTAssertFalse(none.needsCheck(ContainerTotals(records: 5, zones: 1, bytes: 900, assetBytes: 900)), "no quota: nothing is read")
        let records = ContainerQuota(maxRecords: 10)
        XCTAssertTrue(records.needsCheck(ContainerTotals(records: 1, bytes: 40)))
        XCTAssertFalse(records.needsCheck(ContainerTotals(records: 0, bytes: 40)), "a change of a record adds no record")
        XCTAssertFalse(records.needsCheck(ContainerTotals(records: -2, bytes: -40)), "a delete frees")
        let bytes = ContainerQuota(quotaBytes: 100)
        XCTAssertTrue(bytes.needsCheck(ContainerTotals(bytes: 1)))
        XCTAssertFalse(bytes.needsCheck(ContainerTotals(records: 3, bytes: -1)))
        XCTAssertTrue(ContainerQuota(maxZones: 1).needsCheck(ContainerTotals(zones: 1)))
        XCTAssertTrue(ContainerQuota(assetQuotaBytes: 1).needsCheck(ContainerTotals(bytes: 5, assetBytes: 5)))
    }

    func testARecordWritePastTheRecordsQuotaBlamesTheRecordThatPassedIt() {
        let quota = ContainerQuota(maxRecords: 10)
        let applied = [
            ContainerQuota.Applied(recordName: "a", records: 1, bytes: 10),
            ContainerQuota.Applied(recordName: "b", records: 0, bytes: 5),
            ContainerQuota.Applied(recordName: "c", records: 1, bytes: 10),
            ContainerQuota.Applied(recordName: "d", records: 1, bytes: 10),
        ]
        let change = ContainerTotals(records: 3, bytes: 35)
        // 8 before: a brings 9, c 10, d 11.
        let refusal = quota.refusal(container: "iCloud.x", total: ContainerTotals(records: 11, bytes: 500), change: change, applied: applied)
        XCTAssertEqual(refusal?.recordName, "d")
        XCTAssertEqual(refusal?.error.code, .quotaExceeded)
        XCTAssertTrue(refusal?.error.reason.contains("11 records") ?? false, "\(String(describing: refusal))")
        XCTAssertTrue(refusal?.error.reason.contains("iCloud.x") ?? false)
        XCTAssertNil(quota.refusal(container: "iCloud.x", total: ContainerTotals(records: 10), change: change, applied: applied), "at the quota: allowed")
        XCTAssertNil(
            quota.refusal(container: "iCloud.x", total: ContainerTotals(records: 12), change: ContainerTotals(records: -1), applied: []),
            "a write that frees passes even over the quota")
    }

    func testARecordWritePastTheBytesQuotaBlamesTheRecordThatPassedIt() {
        let quota = ContainerQuota(maxRecords: 100, quotaBytes: 1000)
        let applied = [
            ContainerQuota.Applied(recordName: "small", records: 1, bytes: 100),
            ContainerQuota.Applied(recordName: "big", records: 1, bytes: 800),
            ContainerQuota.Applied(recordName: "gone", records: -1, bytes: -50),
        ]
        let refusal = quota.refusal(
            container: "c", total: ContainerTotals(records: 50, bytes: 1250), change: ContainerTotals(records: 1, bytes: 850), applied: applied)
        XCTAssertEqual(refusal?.recordName, "big")
        XCTAssertTrue(refusal?.error.reason.contains("1300 stored bytes") ?? false, "\(String(describing: refusal))")
        // The running total never passes (the freeing record comes first): the last that added is blamed.
        let reordered = [applied[2], applied[0], applied[1]]
        XCTAssertEqual(
            quota.refusal(container: "c", total: ContainerTotals(bytes: 1001), change: ContainerTotals(bytes: 1001), applied: reordered)?.recordName,
            "big")
        XCTAssertEqual(quota.refusal(container: "c", total: ContainerTotals(bytes: 2000), change: ContainerTotals(bytes: 1), applied: [])?.recordName, "")
    }

    func testAZoneAndAnAssetPastTheirQuotasAreRefused() {
        let quota = ContainerQuota(maxZones: 2, quotaBytes: 1000, assetQuotaBytes: 300)
        XCTAssertNil(quota.zoneRefusal(container: "c", zones: 1, zoneName: "z"))
        XCTAssertEqual(quota.zoneRefusal(container: "c", zones: 2, zoneName: "z")?.code, .quotaExceeded)
        XCTAssertNil(ContainerQuota().zoneRefusal(container: "c", zones: 1_000_000, zoneName: "z"))

        XCTAssertNil(quota.assetRefusal(container: "c", total: ContainerTotals(bytes: 900, assetBytes: 300), size: 100))
        let assets = quota.assetRefusal(container: "c", total: ContainerTotals(bytes: 900, assetBytes: 301), size: 100)
        XCTAssertEqual(assets?.code, .quotaExceeded)
        XCTAssertTrue(assets?.reason.contains("asset quota") ?? false)
        let stored = quota.assetRefusal(container: "c", total: ContainerTotals(bytes: 1001, assetBytes: 200), size: 100)
        XCTAssertTrue(stored?.reason.contains("stored bytes") ?? false)
        XCTAssertNil(quota.assetRefusal(container: "c", total: ContainerTotals(bytes: 5000, assetBytes: 5000), size: -100), "freeing passes")
    }
}
