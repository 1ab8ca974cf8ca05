import Foundation
import StratusCore
import XCTest

/// The pure rules of changing a share: who may change what, and what the server keeps whatever a
/// client claims.
final class ShareRulesTests: XCTestCase {
    let owner = "_owner"
    let bob = ParticipantLookup.userRecordName("_bob")
    let carol = ParticipantLookup.emailAddress("Carol@Example.com")

    /// The code of the StratusError `body` throws; nil when it throws none.
    func code(_ body: () throws -> Void) -> ServerErrorCode? {
        do { try body(); return nil } catch { return (error as? StratusError)?.code }
    }

    func testANewShareStartsWithTheOwnerAcceptedAndEveryoneElsePending() throws {
        let proposed = ShareState(owner: owner, publicPermission: .readOnly, participants: [
            ShareParticipant(lookup: bob, permission: .readWrite, acceptanceStatus: .accepted, type: .owner),
            ShareParticipant(lookup: carol, permission: .none),
        ])
        let share = try ShareRules.decide(current: nil, proposed: proposed, caller: owner)
        XCTAssertEqual(share.participants, [
            ShareParticipant(lookup: .userRecordName(owner), permission: .readWrite, acceptanceStatus: .accepted, type: .owner),
            ShareParticipant(lookup: bob, permission: .readWrite, acceptanceStatus: .pending, type: .user),
            ShareParticipant(lookup: carol, permission: .readOnly, acceptanceStatus: .pending, type: .user),
        ], "a client claims neither an acceptance nor the owner's role for someone else")
        XCTAssertEqual(share.publicPermission, .readOnly)
        XCTAssertEqual(code { _ = try ShareRules.decide(current: nil, proposed: proposed, caller: "_bob") }, .accessDenied, "only the owner shares")
    }

    func testTheOwnerChangesParticipantsAndAParticipantLeftOutIsRemoved() throws {
        var current = try ShareRules.decide(current: nil, proposed: ShareState(owner: owner, participants: [
            ShareParticipant(lookup: bob, permission: .readOnly), ShareParticipant(lookup: carol, permission: .readOnly),
        ]), caller: owner)
        current.participants[1].acceptanceStatus = .accepted
        let next = try ShareRules.decide(current: current, proposed: ShareState(owner: owner, publicPermission: .readWrite, participants: [
            ShareParticipant(lookup: bob, permission: .readWrite, acceptanceStatus: .pending),
        ]), caller: owner)
        XCTAssertEqual(next.participants.map(\.acceptanceStatus), [.accepted, .accepted, .removed], "bob keeps his acceptance; carol is removed")
        XCTAssertEqual(next.participants[1].permission, .readWrite)
        XCTAssertEqual(next.publicPermission, .readWrite)
        XCTAssertEqual(code { _ = try ShareRules.decide(current: current, proposed: ShareState(owner: "_bob"), caller: owner) }, .badRequest)
    }

    func testAParticipantMayOnlyRemoveThemselves() throws {
        var current = try ShareRules.decide(current: nil, proposed: ShareState(owner: owner, participants: [
            ShareParticipant(lookup: bob, permission: .readOnly), ShareParticipant(lookup: carol, permission: .readOnly),
        ]), caller: owner)
        current.participants[2].userRecordName = "_carol"
        // Carol (invited by email address, accepted as _carol) leaves by leaving herself out.
        var without = current
        without.participants.remove(at: 2)
        let left = try ShareRules.decide(current: current, proposed: without, caller: "_carol")
        XCTAssertEqual(left.participants[2].acceptanceStatus, .removed)
        XCTAssertEqual(left.participants[1], current.participants[1])
        // Bob leaves by marking himself removed.
        var marked = current
        marked.participants[1].acceptanceStatus = .removed
        XCTAssertEqual(try ShareRules.decide(current: current, proposed: marked, caller: "_bob").participants[1].acceptanceStatus, .removed)

        var raised = current
        raised.participants[1].permission = .readWrite
        XCTAssertEqual(code { _ = try ShareRules.decide(current: current, proposed: raised, caller: "_bob") }, .accessDenied, "no raising one's own permission")
        var opened = current
        opened.publicPermission = .readWrite
        opened.participants.remove(at: 1)
        XCTAssertEqual(code { _ = try ShareRules.decide(current: current, proposed: opened, caller: "_bob") }, .accessDenied, "no changing the public permission")
        var othersGone = current
        othersGone.participants.remove(at: 2)
        XCTAssertEqual(code { _ = try ShareRules.decide(current: current, proposed: othersGone, caller: "_bob") }, .accessDenied, "no removing someone else")
        XCTAssertEqual(code { _ = try ShareRules.decide(current: current, proposed: without, caller: "_stranger") }, .accessDenied)
    }

    func testParticipantListsAreBoundedAndNameEachUserOnce() {
        let many = (0...ShareRules.maxParticipants).map { ShareParticipant(lookup: .userRecordName("_u\($0)"), permission: .readOnly) }
        XCTAssertEqual(code { _ = try ShareRules.decide(current: nil, proposed: ShareState(owner: owner, participants: many), caller: owner) }, .limitExceeded)
        let twice = [ShareParticipant(lookup: carol, permission: .readOnly), ShareParticipant(lookup: .emailAddress("carol@example.COM"), permission: .readWrite)]
        XCTAssertEqual(code { _ = try ShareRules.decide(current: nil, proposed: ShareState(owner: owner, participants: twice), caller: owner) }, .badRequest)
    }

    func testShareKeysAreReadAsClientsSendThemAndAnsweredBack() throws {
        let participants = try JSONDecoder().decode(JSONValue.self, from: Data("""
            [{"userIdentity": {"lookupInfo": {"emailAddress": "Carol@Example.com"}}, "permission": "READ_WRITE", "acceptanceStatus": "UNKNOWN"},
             {"userIdentity": {"userRecordName": "_bob"}, "type": "USER"}]
            """.utf8))
        let state = try ShareState.parse(owner: owner, publicPermission: .string("READ_ONLY"), participants: participants)
        XCTAssertEqual(state, ShareState(owner: owner, publicPermission: .readOnly, participants: [
            ShareParticipant(lookup: carol, permission: .readWrite), ShareParticipant(lookup: bob, permission: .readOnly),
        ]))
        let answered = try ShareState.parse(owner: owner, publicPermission: .string("READ_ONLY"), participants: state.participantsJSON)
        XCTAssertEqual(answered, state, "what the server answers reads back as the same share")
        XCTAssertEqual(try ShareState.parse(owner: owner, publicPermission: nil, participants: nil), ShareState(owner: owner))

        let bad: [(String, JSONValue?, JSONValue?, ServerErrorCode)] = [
            ("a public permission not CloudKit's", .string("EVERYONE"), nil, .badRequest),
            ("a public permission not text", .int(1), nil, .badRequest),
            ("participants not a list", nil, .object([:]), .badRequest),
            ("a participant without an identity", nil, .array([.object(["permission": .string("READ_ONLY")])]), .badRequest),
            ("an identity naming nobody", nil, .array([.object(["userIdentity": .object([:])])]), .badRequest),
            ("a NUL in a name", nil, .array([.object(["userIdentity": .object(["userRecordName": .string("_a\u{0}")])])]), .badRequest),
            ("an address that is none", nil, .array([.object(["userIdentity": .object(["lookupInfo": .object(["emailAddress": .string("nobody")])])])]), .badRequest),
            ("a status not CloudKit's", nil, .array([.object(["userIdentity": .object(["userRecordName": .string("_a")]), "acceptanceStatus": .string("INVITED")])]), .badRequest),
            ("too many", nil, .array((0...ShareRules.maxParticipants + 1).map { .object(["userIdentity": .object(["userRecordName": .string("_u\($0)")])]) }), .limitExceeded),
        ]
        for (name, publicPermission, participants, expected) in bad {
            XCTAssertEqual(code { _ = try ShareState.parse(owner: owner, publicPermission: publicPermission, participants: participants) }, expected, name)
        }
    }

    func testAcceptingTakesAnInvitedPlaceOrJoinsAPublicShare() throws {
        let current = try ShareRules.decide(current: nil, proposed: ShareState(owner: owner, participants: [
            ShareParticipant(lookup: bob, permission: .readOnly), ShareParticipant(lookup: carol, permission: .readWrite),
        ]), caller: owner)
        // Carol, invited by email address, accepts as _carol.
        let accepted = try XCTUnwrap(try ShareRules.accept(current, user: "_carol", email: "carol@example.com"))
        XCTAssertEqual(accepted.participants[2].acceptanceStatus, .accepted)
        XCTAssertEqual(accepted.participants[2].userRecordName, "_carol")
        XCTAssertEqual(accepted.permission(of: "_carol"), .readWrite)
        XCTAssertNil(try ShareRules.accept(accepted, user: "_carol", email: "carol@example.com"), "accepting twice changes nothing")
        XCTAssertNil(try ShareRules.accept(current, user: owner, email: nil), "the owner has accepted from the start")
        XCTAssertEqual(code { _ = try ShareRules.accept(current, user: "_stranger", email: nil) }, .notFound, "no hint that a private share exists")
        var removed = current
        removed.participants[1].acceptanceStatus = .removed
        XCTAssertEqual(code { _ = try ShareRules.accept(removed, user: "_bob", email: nil) }, .accessDenied)
        var open = current
        open.publicPermission = .readOnly
        let joined = try XCTUnwrap(try ShareRules.accept(open, user: "_stranger", email: nil))
        XCTAssertEqual(joined.participants.last, ShareParticipant(
            lookup: .userRecordName("_stranger"), permission: .readOnly, acceptanceStatus: .accepted, type: .publicUser))
        XCTAssertEqual(ShareProposal(participants: []).state(owner: owner, current: open).publicPermission, .readOnly, "what is not sent is kept")
    }
}
