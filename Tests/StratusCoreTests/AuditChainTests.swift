import Crypto
import Foundation
import StratusCore
import XCTest

/// The audit log's pure parts: the canonical encoding its hashes cover, the chain's verification
/// (each kind of tampering named at its first bad entry), the bounds of a draft, and the catalog.
final class AuditChainTests: XCTestCase {
    static let actor = AuditActor(channel: .cli, name: "ops", origin: "db-host", requestID: "cli-1")

    /// A chain of `count` entries, as the log appends them.
    static func chain(_ count: Int) -> [AuditEntry] {
        var entries: [AuditEntry] = []
        for index in 1...count {
            let draft = AuditDraft(actor: actor, action: .keyRevoke, container: "iCloud.a", subject: "key-\(index)", details: [("n", "\(index)")])
            entries.append(AuditEntry(
                draft, sequence: Int64(index), recordedAtMicroseconds: 1_700_000_000_000_000 + Int64(index),
                previousHash: entries.last?.hash ?? AuditEntry.genesisHash))
        }
        return entries
    }

    static func verify(_ entries: [AuditEntry], head: (Int64, [UInt8])? = nil) -> AuditChain.Break? {
        var chain = AuditChain()
        do throws(AuditChain.Break) {
            for entry in entries { try chain.check(entry) }
            let head = head ?? (entries.last?.sequence ?? 0, entries.last?.hash ?? AuditEntry.genesisHash)
            try chain.checkHead(sequence: head.0, hash: head.1)
            return nil
        } catch {
            return error
        }
    }

    func testTheCanonicalEncodingIsNetstringsOfTheFieldsInTheirDocumentedOrder() {
        let draft = AuditDraft(
            actor: AuditActor(channel: .console, name: "ops@example.com", origin: "192.0.2.7", requestID: "r-1"), action: .tokenCreate,
            container: "iCloud.é", subject: "", details: [("label", "web"), ("token", "ab")])
        let entry = AuditEntry(draft, sequence: 12, recordedAtMicroseconds: 1_733_400_000_123_456, previousHash: [UInt8](repeating: 0xab, count: 32))
        let previous = String(repeating: "ab", count: 32)
        let expected = "16:stratus-audit-v1,2:12,16:1733400000123456,7:console,15:ops@example.com,9:192.0.2.7,3:r-1,12:token.create,"
            + "9:iCloud.é,0:,19:label=web; token=ab,64:\(previous),"
        XCTAssertEqual(String(decoding: entry.canonical, as: UTF8.self), expected, "lengths count UTF-8 bytes (é is two)")
        // A verifier outside Stratus: SHA-256 of those bytes.
        XCTAssertEqual(entry.hash, Array(SHA256.hash(data: Data(expected.utf8))))
        XCTAssertEqual(AuditEntry.hex(entry.hash).count, 64)
    }

    func testAnUntouchedChainVerifies() {
        XCTAssertNil(Self.verify(Self.chain(5)))
        XCTAssertNil(Self.verify([]), "an empty log with its first head verifies")
    }

    func testAChangedEntryIsNamed() {
        var entries = Self.chain(5)
        entries[2].details = "n=30"
        XCTAssertEqual(Self.verify(entries)?.sequence, 3)
        XCTAssertTrue(Self.verify(entries)?.reason.contains("changed after it was appended") == true)
        // Each field is covered.
        for change: (inout AuditEntry) -> Void in [
            { $0.actor = "x" }, { $0.origin = "x" }, { $0.requestID = "x" }, { $0.action = "key.create" }, { $0.container = "x" },
            { $0.subject = "x" }, { $0.channel = "console" }, { $0.recordedAtMicroseconds += 1 },
        ] {
            var entries = Self.chain(5)
            change(&entries[1])
            XCTAssertEqual(Self.verify(entries)?.sequence, 2)
        }
    }

    func testAnEntryRewrittenWithAFreshHashBreaksTheLinkOfTheNext() {
        var entries = Self.chain(5)
        entries[2].details = "n=30"
        entries[2].hash = entries[2].computedHash
        let found = Self.verify(entries)
        XCTAssertEqual(found?.sequence, 4)
        XCTAssertTrue(found?.reason.contains("previous hash is not the hash of entry 3") == true, "\(String(describing: found))")
    }

    func testARemovedEntryIsNamed() {
        var entries = Self.chain(5)
        entries.remove(at: 1)
        let found = Self.verify(entries)
        XCTAssertEqual(found?.sequence, 2)
        XCTAssertTrue(found?.reason.contains("missing") == true)
    }

    func testReorderedEntriesAreNamed() {
        // Swapped rows, each keeping its sequence number: hashes no longer match at the first.
        var entries = Self.chain(5)
        entries.swapAt(1, 2)
        XCTAssertEqual(Self.verify(entries)?.sequence, 2)
        // Swapped sequence numbers (the rows renumbered): the hash covers the number.
        var renumbered = Self.chain(5)
        (renumbered[1].sequence, renumbered[2].sequence) = (3, 2)
        renumbered.swapAt(1, 2)
        XCTAssertEqual(Self.verify(renumbered)?.sequence, 2)
    }

    func testEntriesRemovedFromTheEndLeaveTheHeadAhead() {
        let entries = Self.chain(5)
        let head = (Int64(5), entries[4].hash)
        let found = Self.verify(Array(entries.prefix(3)), head: head)
        XCTAssertEqual(found?.sequence, 4)
        XCTAssertTrue(found?.reason.contains("removed from the end") == true)
        // The head rewound with them is not caught here; the hash the last verification printed is.
        var replaced = entries
        replaced[4].details = "n=50"
        replaced[4].hash = replaced[4].computedHash
        XCTAssertEqual(Self.verify(replaced, head: head)?.sequence, 5, "the latest entry replaced with a fresh hash differs from the head")
    }

    func testADraftIsBoundedAndHoldsNoNUL() {
        let long = String(repeating: "é", count: 5000)
        let draft = AuditDraft(
            actor: AuditActor(channel: .console, name: "a\u{0}b" + long, origin: long, requestID: long), action: .userCreate, container: long,
            subject: long, details: [("login", long)])
        XCTAssertEqual(draft.actor.name.count, AuditEntry.maxNameLength)
        XCTAssertTrue(draft.actor.name.hasPrefix("a\u{FFFD}b"))
        XCTAssertFalse(draft.actor.name.utf8.contains(0))
        XCTAssertEqual(draft.actor.origin.count, AuditEntry.maxNameLength)
        XCTAssertEqual(draft.actor.requestID.count, AuditEntry.maxNameLength)
        XCTAssertEqual(draft.container.count, AuditEntry.maxNameLength)
        XCTAssertEqual(draft.subject.count, AuditEntry.maxSubjectLength)
        XCTAssertEqual(draft.details.count, AuditEntry.maxDetailsLength)
    }

    func testEveryActionIsLeftBySomeCommandOrForm() {
        let covered = Set((AuditCatalog.cliCommands.values.flatMap(\.actions)) + AuditCatalog.consolePosts.values.flatMap(\.actions))
        XCTAssertEqual(Set(AuditAction.allCases).subtracting(covered), [], "an action no command or form appends")
    }
}
