import Foundation
import HummingbirdTesting
import PostgresNIO
import StratusAPI
import StratusCore
import StratusPostgres
import StratusTesting
import XCTest

/// The private database's sync token (`zones/changes`, `changes/database`): the snapshot the last
/// answer was read in, the same size however many zones the database holds, that misses no zone's
/// change however the writers' transactions commit.
extension SyncTests {
    /// Every zone change since `token` (nil: a first sync), paged `limit` at a time: each zone's last
    /// dictionary's syncToken (nil: deleted), the final token and the tokens of the pages with more to come.
    static func databaseSync(
        _ client: any TestClientProtocol, _ fixture: Fixture, from token: String?, limit: Int
    ) async throws -> (zones: [String: String?], token: String, pagingTokens: [String]) {
        var zones: [String: String?] = [:]
        var next = token
        var paging: [String] = []
        while true {
            var body: Body = ["resultsLimit": limit]
            if let next { body["syncToken"] = next }
            let (status, reply) = try await RecordAPITests.post(client, fixture.path("zones/changes"), body)
            XCTAssertEqual(status, 200, "\(reply)")
            for zone in reply["zones"] as? [Body] ?? [] {
                let name = (zone["zoneID"] as? Body)?["zoneName"] as? String ?? "?"
                zones[name] = zone["deleted"] as? Bool == true ? String?.none : zone["syncToken"] as? String
            }
            let issued = try XCTUnwrap(reply["syncToken"] as? String)
            XCTAssertEqual(reply["metaSyncToken"] as? String, issued)
            next = issued
            guard reply["moreComing"] as? Bool == true else { return (zones, issued, paging) }
            paging.append(issued)
        }
    }

    /// Syncs from `token` until an answer holds no zone (a transaction in progress elsewhere in the
    /// cluster may make a token answer a zone again, never miss one); the token then.
    static func quietToken(_ client: any TestClientProtocol, _ fixture: Fixture, from token: String) async throws -> String {
        var latest = token
        try await TestSupport.eventually(timeout: .seconds(30), "a database sync with nothing new") {
            let synced = try await databaseSync(client, fixture, from: latest, limit: 200)
            latest = synced.token
            return synced.zones.isEmpty
        }
        return latest
    }

    /// A user with one zone and the same user with 10,000 (9,999 made by SQL, stamped as the write
    /// path stamps them): the token is the same size, and paging through all of them misses none.
    func testDatabaseTokenIsTheSameSizeForOneZoneAndTenThousand() async throws {
        try await withFixture(maxResults: 2000) { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "Z00000")
            let one = try await Self.databaseSync(client, fixture, from: nil, limit: 2000)
            XCTAssertEqual(Array(one.zones.keys), ["Z00000"])
            let database = DatabaseID(container: fixture.container, environment: .development, scope: .private, owner: "_alice")
            try await fixture.store.withConnection { connection in
                _ = try await connection.query("""
                    INSERT INTO zones (container, environment, scope, owner, zone_name, incarnation, change_counter)
                    SELECT \(database.container), \(database.environment.rawValue), 'private', \(database.owner), 'Z' || lpad(n::text, 5, '0'),
                           gen_random_uuid(), 0
                    FROM generate_series(1, 9999) AS n
                    """, logger: TestSupport.logger)
            }
            let many = try await Self.databaseSync(client, fixture, from: one.token, limit: 2000)
            XCTAssertEqual(many.zones.count, 9999, "every new zone, once")
            XCTAssertFalse(many.zones.keys.contains("Z00000"), "the zone the token held is no news")
            XCTAssertEqual(many.pagingTokens.count, 4)
            XCTAssertEqual(many.token.count, one.token.count, "the same size with 10,000 zones as with 1")
            XCTAssertLessThan(one.token.count, 250)
            for token in many.pagingTokens { XCTAssertEqual(token.count, many.pagingTokens[0].count, "paging tokens are all the same size") }
            XCTAssertLessThan(many.pagingTokens[0].count, 420)
            // A first sync of the 10,000 zones, and nothing after it.
            let fresh = try await Self.databaseSync(client, fixture, from: nil, limit: 2000)
            XCTAssertEqual(fresh.zones.count, 10000)
            XCTAssertEqual(fresh.token.count, one.token.count)
            let quiet = try await Self.quietToken(client, fixture, from: fresh.token)
            XCTAssertEqual(quiet.count, one.token.count)
        }
    }

    /// Writers write records in several zones of one database at once, and delete and re-create
    /// zones, while a device follows zones/changes one zone a page; after the writers stop and the
    /// device syncs once more, it holds every zone's current token and no zone that is gone.
    func testDatabaseChangesMissNoZoneUnderConcurrentWriters() async throws {
        try await withFixture { fixture, client in
            let names = (0..<6).map { "Z\($0)" }
            for name in names { try await RecordAPITests.createZone(client, fixture, name) }
            let progress = WriteProgress()
            async let writes: Void = withThrowingTaskGroup(of: Void.self) { group in
                defer { progress.finish() }
                for writer in 0..<4 {
                    group.addTask {
                        var random = SplitMix64(seed: UInt64(writer) &+ 77)
                        for step in 0..<40 {
                            let zone = names[Int(random.next() % UInt64(names.count))]
                            if writer == 0, step % 10 == 9 {
                                // A zone deleted, and every other time created again.
                                _ = try await RecordAPITests.post(client, fixture.path("zones/modify"), ["operations": [["operationType": "delete", "zone": ["zoneID": ["zoneName": zone]]]]])
                                if step % 20 == 9 { try await RecordAPITests.createZone(client, fixture, zone) }
                                progress.wrote()
                                continue
                            }
                            let operation: Body = ["operationType": "forceReplace", "record": RecordAPITests.note("r\(random.next() % 5)", ["v": ["value": "w\(writer)s\(step)"]])]
                            _ = try await RecordAPITests.modify(client, fixture, zone: zone, [operation])
                            progress.wrote()
                        }
                    }
                }
                try await group.waitForAll()
            }
            var device: [String: String?] = [:]
            var token: String?
            var rounds = 0
            // A round after each write that completed since the last (the other writers' writes in flight meanwhile).
            var seen = 0
            while case let (count, done) = await progress.next(after: seen), !done {
                seen = count
                let synced = try await Self.databaseSync(client, fixture, from: token, limit: 1)
                device.merge(synced.zones) { _, new in new }
                token = synced.token
                rounds += 1
            }
            try await writes
            let last = try await Self.databaseSync(client, fixture, from: token, limit: 1)
            device.merge(last.zones) { _, new in new }
            print("database sync: \(rounds) rounds during the writes")
            XCTAssertGreaterThan(rounds, 1, "the device synced while the writers wrote")
            let (_, listed) = try await RecordAPITests.post(client, fixture.path("zones/list"), [String: Any]())
            var server: [String: String] = [:]
            for zone in listed["zones"] as? [Body] ?? [] {
                let name = (zone["zoneID"] as? Body)?["zoneName"] as? String ?? "?"
                if name != ZoneID.defaultZoneName { server[name] = zone["syncToken"] as? String }
            }
            XCTAssertEqual(device.compactMapValues { $0 }, server, "the device holds every live zone at its current state")
            XCTAssertFalse(server.isEmpty)
        }
    }

    /// A token of the earlier form (every zone the client saw, with its incarnation and counter)
    /// keeps working: the zones it does not hold as they are now are answered, a page at a time, and
    /// the last page gives a snapshot token.
    func testAnEarlierDatabaseTokenKeepsWorking() async throws {
        try await withFixture { fixture, client in
            for zone in ["A", "B", "C"] { try await RecordAPITests.createZone(client, fixture, zone) }
            let database = DatabaseID(container: fixture.container, environment: .development, scope: .private, owner: "_alice")
            let states = try await SyncStore(store: fixture.store).zoneStates(in: database, logger: TestSupport.logger).states
            var known: [String: String] = [:]
            for state in states { known[state.zoneName] = state.fingerprint }
            known["B"] = "00000000:0"  // B moved since the client saw it; C is new to it.
            known["C"] = nil
            let key = fixture.configuration.secretKey
            let earlier = SignedToken.sign(DatabaseSyncToken(database: database.key, zones: known), kind: .databaseSync, key: key)
            var (_, reply) = try await RecordAPITests.post(client, fixture.path("changes/database"), ["syncToken": earlier, "resultsLimit": 1])
            XCTAssertEqual((reply["zones"] as? [Body])?.compactMap { ($0["zoneID"] as? Body)?["zoneName"] as? String }, ["B"])
            XCTAssertEqual(reply["moreComing"] as? Bool, true)
            let continued = try XCTUnwrap(reply["syncToken"] as? String)
            XCTAssertNotNil(SignedToken.open(continued, as: DatabaseSyncToken.self, kind: .databaseSync, key: key), "the earlier form while more is coming")
            (_, reply) = try await RecordAPITests.post(client, fixture.path("changes/database"), ["syncToken": continued, "resultsLimit": 1])
            XCTAssertEqual((reply["zones"] as? [Body])?.compactMap { ($0["zoneID"] as? Body)?["zoneName"] as? String }, ["C"])
            XCTAssertEqual(reply["moreComing"] as? Bool, false)
            let snapshot = try XCTUnwrap(reply["syncToken"] as? String)
            XCTAssertNotNil(SignedToken.open(snapshot, as: DatabaseChangeToken.self, kind: .databaseSync, key: key))
            // From the snapshot on: nothing, then a change.
            let quiet = try await Self.quietToken(client, fixture, from: snapshot)
            _ = try await RecordAPITests.modify(client, fixture, zone: "A", [["operationType": "create", "record": RecordAPITests.note("a1", ["v": ["value": "1"]])]])
            let changed = try await Self.databaseSync(client, fixture, from: quiet, limit: 5)
            XCTAssertEqual(Array(changed.zones.keys), ["A"])
            // An earlier token of another database is expired, as before.
            let other = SignedToken.sign(DatabaseSyncToken(database: database.key + "x", zones: known), kind: .databaseSync, key: key)
            (_, reply) = try await RecordAPITests.post(client, fixture.path("changes/database"), ["syncToken": other])
            XCTAssertEqual(reply["serverErrorCode"] as? String, "CHANGE_TOKEN_EXPIRED")
        }
    }

    /// A token whose snapshot the cluster has not reached (a cluster restored from an earlier
    /// backup), one of another cluster and one of another database are expired.
    func testADatabaseTokenAheadOfTheClusterOrOfAnotherIsExpired() async throws {
        try await withFixture { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "A")
            let key = fixture.configuration.secretKey
            let (_, first) = try await RecordAPITests.post(client, fixture.path("zones/changes"), [:])
            let issued = try XCTUnwrap(SignedToken.open(try XCTUnwrap(first["syncToken"] as? String), as: DatabaseChangeToken.self, kind: .databaseSync, key: key))
            var ahead = issued
            ahead.snapshot = ChangeSnapshot(xmin: issued.snapshot.xmin + (1 << 32), xmax: issued.snapshot.xmin + (1 << 32), inProgress: [])
            var pagingAhead = issued
            pagingAhead.paging = .init(through: ahead.snapshot, after: ["A"], leavesOutDeleted: false)
            var otherCluster = issued
            otherCluster.cluster &+= 1
            var otherDatabase = issued
            otherDatabase.database = DatabaseChangeToken.binding(DatabaseID(container: fixture.container, environment: .development, scope: .private, owner: "_bob").key)
            for (label, token) in [("ahead", ahead), ("paging ahead", pagingAhead), ("another cluster", otherCluster), ("another database", otherDatabase)] {
                let (status, reply) = try await RecordAPITests.post(
                    client, fixture.path("zones/changes"), ["syncToken": SignedToken.sign(token, kind: .databaseSync, key: key)])
                XCTAssertEqual(status, 410, "\(label): \(reply)")
                XCTAssertEqual(reply["serverErrorCode"] as? String, "CHANGE_TOKEN_EXPIRED", label)
            }
            let (status, reply) = try await RecordAPITests.post(
                client, fixture.path("zones/changes"), ["syncToken": SignedToken.sign(issued, kind: .databaseSync, key: key)])
            XCTAssertEqual(status, 200, "the token as issued: \(reply)")
        }
    }
}

/// The shared database's sync token: the snapshot the participant's last answer was read in, the
/// same size however many zones are shared with them.
extension SharingTests {
    /// Shares `count` zones of alice's (`S<n>` from `first`) zone-wide with bob, accepted, by SQL, as
    /// the write path leaves them: zone rows, shares and participants, each stamped by its default.
    static func shareZonesBySQL(_ store: PostgresStore, _ fixture: Fixture, from first: Int, count: Int) async throws {
        let alice = DatabaseID(container: fixture.container, environment: .development, scope: .private, owner: fixture.alice)
        try await store.withConnection { connection in
            try await connection.query("""
                INSERT INTO zones (container, environment, scope, owner, zone_name, incarnation, change_counter)
                SELECT \(alice.container), 'development', 'private', \(alice.owner), 'S' || lpad(n::text, 5, '0'), gen_random_uuid(), 0
                FROM generate_series(\(first), \(first + count - 1)) AS n
                """, logger: TestSupport.logger)
            try await connection.query("""
                INSERT INTO shares (container, environment, scope, owner, zone_name, record_name, root_record_name, short_guid, public_permission)
                SELECT \(alice.container), 'development', 'private', \(alice.owner), 'S' || lpad(n::text, 5, '0'), 'cloudkit.zoneshare', NULL,
                       'guid-' || n, 'NONE'
                FROM generate_series(\(first), \(first + count - 1)) AS n
                """, logger: TestSupport.logger)
            // As autovacuum would: the participants' foreign key checks then find their shares by key.
            try await connection.query("ANALYZE shares", logger: TestSupport.logger)
            try await connection.query("""
                INSERT INTO share_participants (container, environment, scope, owner, zone_name, share_name, position, lookup_key, email,
                    user_record_name, permission, acceptance_status, type)
                SELECT \(alice.container), 'development', 'private', \(alice.owner), 'S' || lpad(n::text, 5, '0'), 'cloudkit.zoneshare', p.position,
                       'u:' || p.name, NULL, p.name, p.permission, 'ACCEPTED', p.type
                FROM generate_series(\(first), \(first + count - 1)) AS n,
                     (VALUES (0, \(fixture.alice), 'READ_WRITE', 'OWNER'), (1, \(fixture.bob), 'READ_ONLY', 'USER')) AS p(position, name, permission, type)
                """, logger: TestSupport.logger)
        }
    }

    /// Every change of `user`'s shared database since `token`, paged: each zone's state (live or
    /// deleted), the final token and the tokens of the pages with more to come.
    static func sharedDatabaseSync(
        _ client: any TestClientProtocol, _ fixture: Fixture, _ user: String, from token: String?
    ) async throws -> (zones: [String: Bool], token: String, pagingTokens: [String]) {
        var zones: [String: Bool] = [:]
        var next = token
        var paging: [String] = []
        while true {
            let answer = try await ok(client, fixture.path("changes/database", "shared", as: user), next.map { ["syncToken": $0] } ?? [:])
            for zone in list(answer, "zones") { zones[(zone["zoneID"] as? Body)?["zoneName"] as? String ?? "?"] = zone["deleted"] as? Bool != true }
            next = answer["syncToken"] as? String
            if answer["moreComing"] as? Bool != true { return (zones, try XCTUnwrap(next), paging) }
            paging.append(try XCTUnwrap(next))
        }
    }

    func testSharedDatabaseTokenIsTheSameSizeForOneZoneAndTenThousand() async throws {
        // Pages of 2,000 (five a sync of the 10,000) rather than the default 200, as the private
        // database's test does: each page of the shared database reads all of bob's participations.
        try await Self.withFixture(maxResults: 2000) { fixture, store, client in
            try await Self.shareZonesBySQL(store, fixture, from: 0, count: 1)
            let one = try await Self.sharedDatabaseSync(client, fixture, fixture.bob, from: nil)
            XCTAssertEqual(one.zones, ["S00000": true])
            try await Self.shareZonesBySQL(store, fixture, from: 1, count: 9999)
            let many = try await Self.sharedDatabaseSync(client, fixture, fixture.bob, from: one.token)
            XCTAssertEqual(many.zones.count, 9999)
            XCTAssertNil(many.zones["S00000"], "the zone the token held is no news")
            XCTAssertEqual(many.token.count, one.token.count, "the same size with 10,000 shared zones as with 1")
            XCTAssertLessThan(one.token.count, 250)
            XCTAssertFalse(many.pagingTokens.isEmpty)
            for token in many.pagingTokens { XCTAssertEqual(token.count, many.pagingTokens[0].count, "paging tokens are all the same size") }
            // bob removed from one share, as the owner's save leaves it: his row REMOVED, the share's
            // row rewritten: the zone leaves bob's shared database, answered deleted.
            try await store.withConnection { connection in
                try await connection.query("""
                    UPDATE share_participants SET acceptance_status = 'REMOVED' WHERE zone_name = 'S04242' AND user_record_name = \(fixture.bob)
                    """, logger: TestSupport.logger)
                try await connection.query("UPDATE shares SET changed_xid = pg_current_xact_id() WHERE zone_name = 'S04242'", logger: TestSupport.logger)
            }
            let left = try await Self.sharedDatabaseSync(client, fixture, fixture.bob, from: many.token)
            XCTAssertEqual(left.zones, ["S04242": false])
            XCTAssertEqual(left.token.count, one.token.count)
            let fresh = try await Self.sharedDatabaseSync(client, fixture, fixture.bob, from: nil)
            XCTAssertEqual(fresh.zones.count, 9999, "a first sync leaves out the zone that left")
            XCTAssertFalse(fresh.zones.values.contains(false))
            XCTAssertEqual(fresh.token.count, one.token.count)
        }
    }
}
