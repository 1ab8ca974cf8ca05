import Foundation
import StratusCore
import XCTest

/// A database sync token as the snapshot its answer was read in: bounded to a fixed size, what it
/// sees, the window a call answers from it and the token after a page.
final class DatabaseChangeTokenTests: XCTestCase {
    let key = try! SecretKey(bytes: (0..<32).map { UInt8($0) })
    let cluster = DatabaseChangeToken.binding("7715758696481071163")
    let database = DatabaseChangeToken.binding("iCloud.a/development/private/_u1")

    func snapshot(_ text: String) throws -> ChangeSnapshot { try XCTUnwrap(ChangeSnapshot.read(text)).snapshot }

    func testASnapshotSeesWhatHadEnded() throws {
        let seen = try snapshot("100:110:103,107")
        XCTAssertTrue(seen.sees(99))
        XCTAssertTrue(seen.sees(100))
        XCTAssertFalse(seen.sees(103), "in progress")
        XCTAssertTrue(seen.sees(104))
        XCTAssertFalse(seen.sees(107))
        XCTAssertFalse(seen.sees(110), "not yet begun")
        XCTAssertFalse(ChangeSnapshot.nothing.sees(0), "the first sync's snapshot sees nothing, rows stamped 0 included")
        for text in ["", "1:2", "5:4:", "1:2:x", "a:2:", "1:2:3,", "-1:2:"] { XCTAssertNil(ChangeSnapshot.read(text), text) }
    }

    /// More transactions in progress than a token keeps: xmax comes down to the first one left out,
    /// so the bounded snapshot sees a subset of what the reader saw (it may answer a change again,
    /// never miss one).
    func testAFullSnapshotIsLoweredNeverRaised() throws {
        let inProgress = (0..<40).map { 1000 + 3 * UInt64($0) }
        let text = "1000:2000:" + inProgress.map(String.init).joined(separator: ",")
        let (bounded, reached) = try XCTUnwrap(ChangeSnapshot.read(text))
        XCTAssertEqual(reached, 2000)
        XCTAssertEqual(bounded.inProgress, Array(inProgress.prefix(ChangeSnapshot.maxInProgress)))
        XCTAssertEqual(bounded.xmax, inProgress[ChangeSnapshot.maxInProgress])
        let unbounded = ChangeSnapshot(xmin: 1000, xmax: 2000, inProgress: [])
        for xid in UInt64(990)..<2010 where bounded.sees(xid) {
            XCTAssertTrue(unbounded.sees(xid) && !inProgress.contains(xid), "\(xid): the bounded snapshot sees only what the reader saw")
        }
        for xid in inProgress { XCTAssertFalse(bounded.sees(xid), "\(xid) was in progress") }
        // A transaction in progress 2^32 or more past xmin cannot be kept in 4 bytes: xmax comes down to it.
        let far = ChangeSnapshot(xmin: 10, xmax: 1 << 40, inProgress: [12, 10 + (1 << 32)])
        XCTAssertEqual(far.inProgress, [12])
        XCTAssertEqual(far.xmax, 10 + (1 << 32))
    }

    /// The token's length is the same whatever its numbers: a fixed encoding.
    func testTheSizeDoesNotDependOnTheNumbers() throws {
        let snapshots = [
            ChangeSnapshot.nothing, try snapshot("3:3:"), try snapshot("725:731:726,729"),
            ChangeSnapshot(xmin: 1 << 50, xmax: (1 << 50) + 100_000, inProgress: (0..<30).map { (1 << 50) + 7 * $0 }),
            ChangeSnapshot(xmin: UInt64.max - 5, xmax: UInt64.max, inProgress: [UInt64.max - 2]),
        ]
        let sizes = Set(snapshots.map { SignedToken.sign(DatabaseChangeToken(cluster: cluster, database: database, snapshot: $0), kind: .databaseSync, key: key).count })
        XCTAssertEqual(sizes.count, 1, "\(sizes)")
        XCTAssertLessThan(sizes.first ?? 0, 250)
        let paging = Set(snapshots.map { through in
            SignedToken.sign(DatabaseChangeToken(
                cluster: cluster, database: database, snapshot: snapshots[2],
                paging: .init(through: through, after: ["Z00042"], leavesOutDeleted: through == .nothing)), kind: .databaseSync, key: key).count
        })
        XCTAssertEqual(paging.count, 1, "\(paging)")
        for token in snapshots.map({ DatabaseChangeToken(cluster: cluster, database: database, snapshot: $0) })
            + [DatabaseChangeToken(cluster: 1, database: 2, snapshot: snapshots[3], paging: .init(through: snapshots[4], after: ["_bob", "Notes"], leavesOutDeleted: true))] {
            let text = SignedToken.sign(token, kind: .databaseSync, key: key)
            XCTAssertEqual(SignedToken.open(text, as: DatabaseChangeToken.self, kind: .databaseSync, key: key), token)
            XCTAssertNil(SignedToken.open(text, as: DatabaseSyncToken.self, kind: .databaseSync, key: key), "a snapshot is no token of the earlier form")
        }
        let earlier = SignedToken.sign(DatabaseSyncToken(database: "iCloud.a/development/private/_u1", zones: ["Notes": "6f96:5"]), kind: .databaseSync, key: key)
        XCTAssertNil(SignedToken.open(earlier, as: DatabaseChangeToken.self, kind: .databaseSync, key: key), "a token of the earlier form is no snapshot")
    }

    /// Signed bytes that are not a token's canonical form do not decode.
    func testAMalformedTokenIsRefused() throws {
        struct Raw: Encodable { var s: String, a: [String]? }
        let good = DatabaseChangeToken(cluster: cluster, database: database, snapshot: try snapshot("725:731:726,729"))
        let encoded = try JSONSerialization.jsonObject(with: EventCoding.encode(good)) as? [String: Any]
        let bytes = try XCTUnwrap(Base64URL.decode(try XCTUnwrap(encoded?["s"] as? String)))
        func variant(_ change: (inout [UInt8]) -> Void) -> String {
            var copy = Array(bytes)
            change(&copy)
            return Base64URL.encode(Data(copy))
        }
        let cases: [Raw] = [
            Raw(s: "", a: nil), Raw(s: "not base64!", a: nil),
            Raw(s: variant { $0[0] = 3 }, a: nil),                          // an unknown form
            Raw(s: variant { $0.removeLast() }, a: nil),                      // short
            Raw(s: variant { $0[0] = 1 }, a: ["Z"]),                          // paging without its end snapshot
            Raw(s: variant { _ = $0 }, a: ["Z"]),                             // a cursor on a position
            Raw(s: variant { $0[17 + 16] = 17 }, a: nil),                     // more in progress than kept
            Raw(s: variant { $0[17 + 16 + 1 + 4 * 5 + 3] = 1 }, a: nil),      // an unused slot filled
            Raw(s: variant { $0[17 + 7] = 0xFF }, a: nil),                    // xmin past xmax
        ]
        for raw in cases {
            let text = SignedToken.sign(raw, kind: .databaseSync, key: key)
            XCTAssertNil(SignedToken.open(text, as: DatabaseChangeToken.self, kind: .databaseSync, key: key), "\(raw.s) \(raw.a ?? [])")
        }
    }

    func testTheWindowOfACall() throws {
        let current = try snapshot("800:812:805")
        // A first sync: every live zone, up to the snapshot it is read in.
        let first = try DatabaseChangeWindow.open(nil, cluster: cluster, database: database, current: current, reached: 812)
        XCTAssertEqual(first.since, .nothing)
        XCTAssertEqual(first.through, current)
        XCTAssertTrue(first.leavesOutDeleted)
        XCTAssertNil(first.after)
        // A token: what it did not see, deleted zones too; the token after is the snapshot read in.
        let held = try snapshot("700:720:703")
        let later = try DatabaseChangeWindow.open(DatabaseChangeToken(cluster: cluster, database: database, snapshot: held), cluster: cluster, database: database, current: current, reached: 812)
        XCTAssertEqual(later.since, held)
        XCTAssertEqual(later.through, current)
        XCTAssertFalse(later.leavesOutDeleted)
        // The reader's snapshot was lowered (many in progress) below the token's xmax: still honoured.
        let lowered = try DatabaseChangeWindow.open(
            DatabaseChangeToken(cluster: cluster, database: database, snapshot: try snapshot("790:811:")), cluster: cluster, database: database,
            current: ChangeSnapshot(xmin: 800, xmax: 801, inProgress: []), reached: 812)
        XCTAssertEqual(lowered.through.xmax, 801)
        // A page with more to come: the same window, past its cursor, whatever was read since.
        let paging = DatabaseChangeToken(cluster: cluster, database: database, snapshot: held, paging: .init(through: try snapshot("750:760:"), after: ["M"], leavesOutDeleted: false))
        let next = try DatabaseChangeWindow.open(paging, cluster: cluster, database: database, current: current, reached: 812)
        XCTAssertEqual(next.since, held)
        XCTAssertEqual(next.through, try snapshot("750:760:"))
        XCTAssertEqual(next.after, ["M"])
        // Another database, another cluster, or ahead of what the cluster has reached: expired.
        for (token, reached) in [
            (DatabaseChangeToken(cluster: cluster, database: database &+ 1, snapshot: held), UInt64(812)),
            (DatabaseChangeToken(cluster: cluster &+ 1, database: database, snapshot: held), 812),
            (DatabaseChangeToken(cluster: cluster, database: database, snapshot: try snapshot("900:913:")), 812),
            (DatabaseChangeToken(cluster: cluster, database: database, snapshot: held, paging: .init(through: try snapshot("800:813:"), after: ["M"], leavesOutDeleted: false)), 812),
        ] {
            XCTAssertThrowsError(try DatabaseChangeWindow.open(token, cluster: cluster, database: database, current: current, reached: reached)) { error in
                XCTAssertEqual((error as? StratusError)?.code, .changeTokenExpired)
            }
        }
    }

    func testTheTokenAfterAPage() throws {
        let current = try snapshot("800:812:805")
        let first = try DatabaseChangeWindow.open(nil, cluster: cluster, database: database, current: current, reached: 812)
        // More to come: the same base, the cursor, and the first page's snapshot to end at.
        let paging = first.token(last: ["Z00042"], moreComing: true)
        XCTAssertEqual(paging, DatabaseChangeToken(
            cluster: cluster, database: database, snapshot: .nothing, paging: .init(through: current, after: ["Z00042"], leavesOutDeleted: true)))
        // The next page, read in a later snapshot, ends at the first page's.
        let second = try DatabaseChangeWindow.open(paging, cluster: cluster, database: database, current: try snapshot("900:905:"), reached: 905)
        XCTAssertEqual(second.token(last: ["Z00084"], moreComing: false), DatabaseChangeToken(cluster: cluster, database: database, snapshot: current))
        XCTAssertEqual(second.token(last: ["Z00084"], moreComing: true).paging?.through, current)
        XCTAssertEqual(second.token(last: ["Z00084"], moreComing: true).paging?.leavesOutDeleted, true)
        // A page with nothing: the snapshot it was read in.
        XCTAssertEqual(first.token(last: nil, moreComing: false), DatabaseChangeToken(cluster: cluster, database: database, snapshot: current))
    }

    /// Pages in key order, each read in a later snapshot, the token after the last being the first
    /// page's snapshot: every row changed after the base is answered by this sync or by the next,
    /// whatever order the writers commit in. A model of PostgreSQL: writers begin (drawing
    /// ascending ids), write rows and commit in a random order, a row's versions in the order their
    /// writers committed (row locks), a snapshot seeing the writers that had committed when it was
    /// taken; a row read in a snapshot is its last version whose writer it sees, stamped with it.
    func testPagingMissesNothingWhateverTheCommitOrder() throws {
        var random = SystemRandomNumberGenerator()
        let keys = (0..<12).map { "k\($0)" }
        for _ in 0..<300 {
            var nextXid: UInt64 = 10
            var running: [UInt64: [String]] = [:]
            // Each row's writers, in commit order.
            var history: [String: [UInt64]] = [:]
            func take() -> ChangeSnapshot {
                ChangeSnapshot(xmin: running.keys.min() ?? nextXid, xmax: nextXid, inProgress: Array(running.keys))
            }
            func commit(_ xid: UInt64) {
                for key in Set(running.removeValue(forKey: xid) ?? []) { history[key, default: []].append(xid) }
            }
            func step() {
                if Int.random(in: 0..<3, using: &random) == 0 || running.isEmpty {
                    running[nextXid] = (0..<Int.random(in: 1...3, using: &random)).map { _ in keys.randomElement(using: &random)! }
                    nextXid += 1
                } else if let xid = running.keys.randomElement(using: &random) {
                    commit(xid)
                }
            }
            /// Each row as the snapshot reads it: how many of its versions it sees, and the last one's stamp.
            func read(_ snapshot: ChangeSnapshot) -> [String: (version: Int, stamp: UInt64)] {
                history.compactMapValues { writers in
                    let seen = writers.prefix { snapshot.sees($0) }.count
                    return seen == 0 ? nil : (seen, writers[seen - 1])
                }
            }
            /// One sync from the token, paged one or two rows at a time, writers moving between pages.
            func sync(_ token: DatabaseChangeToken, into device: inout [String: Int], writing: Bool) throws -> DatabaseChangeToken {
                var token = token
                repeat {
                    let current = take()
                    let window = try DatabaseChangeWindow.open(token, cluster: cluster, database: database, current: current, reached: nextXid)
                    let changed = read(current).filter { key, row in
                        !window.since.sees(row.stamp) && (window.after.map { key > $0[0] } ?? true)
                    }.sorted { $0.key < $1.key }
                    let limit = Int.random(in: 1...2, using: &random)
                    for (key, row) in changed.prefix(limit) { device[key] = row.version }
                    token = window.token(last: changed.prefix(limit).last.map { [$0.key] }, moreComing: changed.count > limit)
                    if writing { for _ in 0..<Int.random(in: 0...3, using: &random) { step() } }
                } while token.paging != nil
                return token
            }
            for _ in 0..<20 { step() }
            var token = DatabaseChangeToken(cluster: cluster, database: database, snapshot: take())
            var device = read(token.snapshot).mapValues(\.version)
            for _ in 0..<6 {
                token = try sync(token, into: &device, writing: true)
                // The device holds every row at least as the token's snapshot reads it.
                for (key, row) in read(token.snapshot) {
                    XCTAssertGreaterThanOrEqual(device[key] ?? 0, row.version, "\(key) missed")
                }
                for _ in 0..<Int.random(in: 0...4, using: &random) { step() }
            }
            // The writers finish; one more sync brings the device level with every row.
            for xid in running.keys.shuffled(using: &random) { commit(xid) }
            token = try sync(token, into: &device, writing: false)
            XCTAssertEqual(device, read(take()).mapValues(\.version))
        }
    }
}
