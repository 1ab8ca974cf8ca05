import Foundation
import StratusCore
import XCTest

/// The rules of a user's deletion: what it may touch, what it does to the event log, its order.
final class UserDeletionTests: XCTestCase {
    let container = "iCloud.com.example.notes"

    func testTheStepsRunInOrderAndEndDone() {
        var step = UserDeletion.Step.signOut
        var seen: [UserDeletion.Step] = [step]
        while step != .done {
            step = step.next
            seen.append(step)
        }
        XCTAssertEqual(seen, UserDeletion.Step.allCases)
        XCTAssertEqual(UserDeletion.Step.done.next, .done)
        XCTAssertEqual(seen.first, .signOut, "the user can no longer act before anything of theirs goes")
        XCTAssertEqual(seen.firstIndex(of: .events)! > seen.firstIndex(of: .publicRecords)!, true, "the log is redacted after every deletion it redacts")
    }

    func testOnlyTheUsersPrivateZonesAreTheirs() {
        func key(_ environment: String, _ scope: String, _ owner: String, _ zone: String = "Notes") -> ZoneKey {
            ZoneKey(rawValue: "\(container)/\(environment)/\(scope)/\(owner)/\(zone)")
        }
        XCTAssertTrue(UserDeletion.owns(key("production", "private", "_alice"), container: container, user: "_alice"))
        XCTAssertTrue(UserDeletion.owns(key("development", "private", "_alice", "_defaultZone"), container: container, user: "_alice"))
        XCTAssertTrue(UserDeletion.owns(key("production", "private", "_alice", "a/b"), container: container, user: "_alice"), "a zone name may hold the separator")
        XCTAssertFalse(UserDeletion.owns(key("production", "private", "_alicex"), container: container, user: "_alice"), "not a prefix match")
        XCTAssertFalse(UserDeletion.owns(key("production", "private", "_bob"), container: container, user: "_alice"))
        XCTAssertFalse(UserDeletion.owns(key("production", "public", "_public", "_defaultZone"), container: container, user: "_alice"))
        XCTAssertFalse(UserDeletion.owns(key("production", "shared", "_alice"), container: container, user: "_alice"))
        XCTAssertFalse(UserDeletion.owns(ZoneKey(rawValue: "iCloud.other/production/private/_alice/Notes"), container: container, user: "_alice"))
        XCTAssertFalse(UserDeletion.owns(ZoneKey(rawValue: "\(container)/production/private/_alice"), container: container, user: "_alice"))
    }

    func testTheZonesStepDeletesTheUsersCustomZonesInAStableOrder() {
        func database(_ environment: Environment, _ scope: DatabaseScope = .private, _ owner: String = "_alice") -> DatabaseID {
            DatabaseID(container: container, environment: environment, scope: scope, owner: owner)
        }
        let zones: [(database: DatabaseID, zoneName: String)] = [
            (database(.production), "b"), (database(.development), "z"), (database(.production), ZoneID.defaultZoneName),
            (database(.production, .private, "_bob"), "a"), (database(.production, .public, DatabaseID.publicOwner), "a"), (database(.production), "a"),
        ]
        let chosen = UserDeletion.zonesToDelete(zones, user: "_alice").map { "\($0.database.environment.rawValue)/\($0.zoneName)" }
        XCTAssertEqual(chosen, ["development/z", "production/a", "production/b"])
        XCTAssertEqual(UserDeletion.zonesToDelete(zones.shuffled(), user: "_alice").map(\.zoneName), ["z", "a", "b"])
    }

    func testTheEventLogLosesTheUsersRecordsButKeepsWhatWorkersNeed() {
        XCTAssertEqual(UserDeletion.redaction(type: RecordSaved.eventType, ownZone: true, deletedByJob: false), .redact)
        XCTAssertEqual(UserDeletion.redaction(type: RecordSaved.eventType, ownZone: false, deletedByJob: true), .redact)
        XCTAssertEqual(UserDeletion.redaction(type: RecordDeleted.eventType, ownZone: false, deletedByJob: true), .dropImage)
        XCTAssertEqual(UserDeletion.redaction(type: RecordDeleted.eventType, ownZone: true, deletedByJob: false), .dropImage)
        XCTAssertEqual(UserDeletion.redaction(type: .zoneDeleted, ownZone: true, deletedByJob: false), .keep, "workers forget the zone by it")
        XCTAssertEqual(UserDeletion.redaction(type: .zoneCreated, ownZone: true, deletedByJob: false), .keep)
        XCTAssertEqual(UserDeletion.redaction(type: RecordSaved.eventType, ownZone: false, deletedByJob: false), .keep, "others' records stay")
    }

    func testAUserRecordNameIsCheckedBeforeAnythingIsTouched() throws {
        XCTAssertEqual(try UserDeletion.validate(userRecordName: "_0123abcd"), "_0123abcd")
        for bad in ["", "alice", "_a/b", "_a\u{0}", DatabaseID.publicOwner, "_" + String(repeating: "x", count: 300)] {
            XCTAssertThrowsError(try UserDeletion.validate(userRecordName: bad)) { error in
                XCTAssertEqual((error as? StratusError)?.code, .badRequest)
                if bad.count > 255 { XCTAssertFalse((error as? StratusError)?.reason.contains(bad) ?? true, "the reason quotes an excerpt") }
            }
        }
    }

    func testTheTestPauseStopsOnlyAtItsCount() {
        XCTAssertFalse(UserDeletion.pauses(zonesDeleted: 1, pauseAfterZones: nil))
        XCTAssertFalse(UserDeletion.pauses(zonesDeleted: 1, pauseAfterZones: 2))
        XCTAssertTrue(UserDeletion.pauses(zonesDeleted: 2, pauseAfterZones: 2))
        XCTAssertFalse(UserDeletion.pauses(zonesDeleted: 3, pauseAfterZones: 2), "a job taken up again past the count goes on")
    }

    func testTheJobsEventsCarryItsRequestID() {
        XCTAssertEqual(UserDeletion.requestID(container: container, user: "_alice"), "user-deletion/iCloud.com.example.notes/_alice")
        XCTAssertTrue(UserDeletion.Progress(step: .zones, zonesDeleted: 2).line.hasPrefix("zones: 2 zones"))
        XCTAssertFalse(UserDeletion.Progress(step: .zones).finished)
        XCTAssertTrue(UserDeletion.Progress(step: .done).finished)
    }

    func testDeletingOnesOwnAccountNeedsARecentSignIn() throws {
        XCTAssertNoThrow(try UserDeletion.checkRecentSignIn(sessionCreatedAt: 1_000, now: 1_600, window: 600))
        XCTAssertNoThrow(try UserDeletion.checkRecentSignIn(sessionCreatedAt: 1_000, now: 1_000, window: 600))
        for (created, now) in [(Int64?.none, Int64(1_000)), (1_000, 1_601), (10_000, 1_000)] {
            XCTAssertThrowsError(try UserDeletion.checkRecentSignIn(sessionCreatedAt: created, now: now, window: 600)) { error in
                XCTAssertEqual((error as? StratusError)?.code, .authenticationFailed, "\(String(describing: created)) at \(now)")
                XCTAssertTrue((error as? StratusError)?.reason.contains("sign in again") ?? false)
            }
        }
    }

    func testPublicRecordsGoToAnAvailableHeirOfAnotherUserElseAreDeleted() throws {
        XCTAssertEqual(UserDeletion.publicRecordsFate(heir: "_carol", heirAvailable: true, user: "_alice"), .handOver(to: "_carol"))
        XCTAssertEqual(UserDeletion.publicRecordsFate(heir: nil, heirAvailable: false, user: "_alice"), .delete, "no heir: deleted, as before")
        XCTAssertEqual(UserDeletion.publicRecordsFate(heir: "_carol", heirAvailable: false, user: "_alice"), .delete,
                       "an heir who left the directory, or is being deleted, takes nothing")
        XCTAssertEqual(UserDeletion.publicRecordsFate(heir: "_alice", heirAvailable: true, user: "_alice"), .delete, "the heir's own deletion deletes them")
        XCTAssertEqual(try UserDeletion.validate(heir: "_carol"), "_carol")
        XCTAssertNil(try UserDeletion.validate(heir: "none"))
        for bad in ["", "carol", "_a/b", String(repeating: "_", count: 300), DatabaseID.publicOwner] {
            XCTAssertThrowsError(try UserDeletion.validate(heir: bad), bad)
        }
        // What a hand-over renames: the creator and modifier a save's record and a deletion's last
        // image carry, the same members a stored record has.
        XCTAssertEqual(UserDeletion.stampPaths.map { Array($0.suffix(2)) }, [["created", "userRecordName"], ["modified", "userRecordName"]]
            + [["created", "userRecordName"], ["modified", "userRecordName"]])
        XCTAssertEqual(Set(UserDeletion.stampPaths.map { $0[0] }), ["record", "last"])
        let stamp = RecordStamp(timestamp: 1, userRecordName: "_alice", deviceID: nil)
        let record = Record(recordName: "r", recordType: "Note", fields: [:], changeTag: "t", created: stamp, modified: stamp)
        let json = try JSONDecoder().decode(JSONValue.self, from: EventCoding.encode(record))
        for path in UserDeletion.recordStampPaths {
            XCTAssertEqual(path.reduce(Optional(json)) { $0?[$1] }?.stringValue, "_alice", "\(path) names the record's user")
        }
    }

    func testAShareIsHeldByItsParticipantsWhoAcceptedButItsOwner() {
        let state = ShareState(owner: "_alice", participants: [
            ShareParticipant(lookup: .userRecordName("_alice"), permission: .readWrite, acceptanceStatus: .accepted, type: .owner),
            ShareParticipant(lookup: .userRecordName("_dave"), permission: .readOnly, acceptanceStatus: .accepted),
            ShareParticipant(lookup: .userRecordName("_bob"), permission: .readWrite, acceptanceStatus: .accepted),
            ShareParticipant(lookup: .userRecordName("_carol"), permission: .readOnly, acceptanceStatus: .pending),
            ShareParticipant(lookup: .userRecordName("_erin"), permission: .readOnly, acceptanceStatus: .removed),
        ])
        XCTAssertEqual(state.holders, ["_bob", "_dave"])
    }
}
