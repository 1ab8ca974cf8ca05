import StratusCore
import XCTest

/// What each database scope means for a call, and which zones a call may name there.
final class CallTargetTests: XCTestCase {
    private func target(_ scope: DatabaseScope, _ owner: String = "_alice") -> CallTarget {
        CallTarget(addressed: DatabaseID(container: "iCloud.test", environment: .development, scope: scope, owner: owner))
    }

    private func refusal(
        _ target: CallTarget, _ zoneName: String?, owner: String?, rules: CallTarget.ZoneRules, file: StaticString = #filePath, line: UInt = #line
    ) -> StratusError? {
        do {
            let resolved = try target.zone(named: zoneName, owner: owner, rules: rules)
            XCTFail("resolved \(resolved), expected a refusal", file: file, line: line)
            return nil
        } catch {
            return error
        }
    }

    func testWhatEachScopeMeans() {
        let (publicDatabase, privateDatabase, shared) = (target(.public), target(.private), target(.shared))
        XCTAssertEqual([publicDatabase.user, privateDatabase.user, shared.user], [nil, "_alice", "_alice"])
        XCTAssertEqual([publicDatabase.participant, privateDatabase.participant, shared.participant], [nil, nil, "_alice"])
        XCTAssertEqual([publicDatabase.belongsToUser, privateDatabase.belongsToUser, shared.belongsToUser], [false, true, false])
        XCTAssertEqual([publicDatabase.hasDefaultZone, privateDatabase.hasDefaultZone, shared.hasDefaultZone], [true, true, false])
        XCTAssertEqual(publicDatabase.addressed.owner, DatabaseID.publicOwner)
    }

    func testTheSharedDatabaseResolvesToTheOwnersZoneForTheParticipant() throws {
        for rules in [CallTarget.ZoneRules.records, .reads] {
            let resolved = try target(.shared).zone(named: "Trip", owner: "_bob", rules: rules)
            XCTAssertEqual(resolved.database, DatabaseID(container: "iCloud.test", environment: .development, scope: .private, owner: "_bob"))
            XCTAssertEqual(resolved.zone, ZoneID(zoneName: "Trip", ownerRecordName: "_bob"))
            XCTAssertEqual(resolved.participant, "_alice")
        }
        XCTAssertEqual(target(.shared).database(ofZoneOwner: "_bob").owner, "_bob")
        XCTAssertEqual(target(.shared).database(ofZoneOwner: "_bob").scope, .private)
        XCTAssertEqual(target(.shared).database(ofZoneOwner: nil), target(.shared).addressed)
        XCTAssertEqual(target(.private).database(ofZoneOwner: "_bob"), target(.private).addressed, "only the shared database holds others' zones")
    }

    func testTheSharedDatabaseNeedsAZoneNamedWithItsOwner() {
        let named = "The shared database holds other users' zones: name one with zoneID {zoneName, ownerRecordName}"
        for (zoneName, owner) in [(nil, nil), ("Trip", nil), ("Trip", ""), (ZoneID.defaultZoneName, "_bob"), (nil, "_bob")] as [(String?, String?)] {
            let error = refusal(target(.shared), zoneName, owner: owner, rules: .records)
            XCTAssertEqual(error?.code, .zoneNotFound)
            XCTAssertEqual(error?.reason, named, "\(String(describing: zoneName)) of \(String(describing: owner))")
        }
        XCTAssertEqual(refusal(target(.shared), "_bad", owner: "_bob", rules: .reads)?.code, .badRequest, "the zone name is checked")
        let owner = refusal(target(.shared), "Trip", owner: "a\u{0}b", rules: .records)
        XCTAssertEqual(owner?.code, .badRequest)
        XCTAssertEqual(owner?.reason, "zoneID.ownerRecordName must not contain control characters (NUL included)")
    }

    func testOwnDatabasesTakeTheirOwnZonesAndTheDefaultOne() throws {
        let privateDatabase = target(.private)
        XCTAssertEqual(try privateDatabase.zone(named: nil, owner: nil, rules: .records).zone, ZoneID(zoneName: ZoneID.defaultZoneName, ownerRecordName: "_alice"))
        for owner in [nil, "_alice", ZoneID.defaultOwnerName] {
            let resolved = try privateDatabase.zone(named: "Notes", owner: owner, rules: .records)
            XCTAssertEqual(resolved.database, privateDatabase.addressed)
            XCTAssertEqual(resolved.zone, ZoneID(zoneName: "Notes", ownerRecordName: "_alice"))
            XCTAssertNil(resolved.participant)
        }
        let other = refusal(privateDatabase, "Notes", owner: "_bob", rules: .reads)
        XCTAssertEqual(other?.code, .zoneNotFound)
        XCTAssertEqual(other?.reason, "Zone 'Notes' does not exist in this database")
        XCTAssertEqual(refusal(privateDatabase, "_bad", owner: "_bob", rules: .records)?.code, .badRequest, "the name is checked before the owner")
        let long = String(repeating: "z", count: 300)
        XCTAssertEqual(refusal(privateDatabase, ZoneID.defaultZoneName + long, owner: nil, rules: .records)?.code, .badRequest)
        XCTAssertTrue(privateDatabase.isOwner(ZoneID.defaultOwnerName))
        XCTAssertFalse(privateDatabase.isOwner("_bob"))
        XCTAssertEqual(privateDatabase.reportedOwner(named: "_bob"), "_alice")
        XCTAssertEqual(target(.shared).reportedOwner(named: "_bob"), "_bob")
        XCTAssertEqual(target(.shared).reportedOwner(named: nil), "")
    }

    func testThePublicDatabaseHasOnlyItsDefaultZoneWhereTheCallSaysSo() throws {
        let publicDatabase = target(.public)
        let resolved = try publicDatabase.zone(named: nil, owner: ZoneID.defaultOwnerName, rules: .records)
        XCTAssertEqual(resolved.zone, ZoneID(zoneName: ZoneID.defaultZoneName, ownerRecordName: DatabaseID.publicOwner))
        XCTAssertNil(resolved.participant)
        for rules in [CallTarget.ZoneRules.records, .assets] {
            let error = refusal(publicDatabase, "Notes", owner: nil, rules: rules)
            XCTAssertEqual(error?.code, .zoneNotFound)
            XCTAssertEqual(error?.reason, "The public database has only _defaultZone")
        }
        XCTAssertEqual(try publicDatabase.zone(named: "Notes", owner: nil, rules: .reads).zone.zoneName, "Notes", "reads leave a missing zone to the store")
    }

    func testAssetCallsDoNotServeTheSharedDatabase() {
        let error = refusal(target(.shared), "Trip", owner: nil, rules: .assets)
        XCTAssertEqual(error?.code, .zoneNotFound)
        XCTAssertEqual(error?.reason, "No zone 'Trip' is shared with the caller")
        XCTAssertEqual(refusal(target(.shared), "Trip", owner: "_bob", rules: .assets)?.reason, "Zone 'Trip' does not exist in this database")
    }

    func testClientTextInAReasonIsAnExcerpt() {
        XCTAssertEqual(ClientText.excerpt("short"), "short")
        XCTAssertEqual(ClientText.excerpt(String(repeating: "é", count: 300)), Substring(String(repeating: "é", count: 255)), "characters, not bytes")
    }
}
