import Crypto
import Foundation
import Hummingbird
import HummingbirdTesting
import PostgresNIO
@testable import StratusCore
@testable import StratusPostgres
import StratusRuntime
import StratusTesting
import XCTest

/// What a CloudKit Web Services client reads where Stratus once answered otherwise: a device id in
/// every stamp, opaque tokens as standard base64 of bytes, `metaSyncToken` beside `syncToken`,
/// fields cleared by `{}` or a null value, zone dictionaries with their sync token and type, and a
/// `retryAfter` on every retryable error.
final class WireCompatibilityTests: XCTestCase {
    typealias Body = RecordAPITests.Body

    /// Whether `text` is standard, padded base64 of bytes: what a client that decodes a marker expects.
    static func isStandardBase64(_ text: String) -> Bool {
        !text.isEmpty && text.count % 4 == 0 && Data(base64Encoded: text) != nil
            && text.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "+/=".contains($0)) }
    }

    func testEveryStampCarriesADeviceID() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "Notes")
            let (_, saved) = try await RecordAPITests.modify(client, fixture, [["operationType": "create", "record": RecordAPITests.note("n1", ["title": ["value": "a"]])]])
            let looked = try await RecordAPITests.lookup(client, fixture, ["n1"])
            let (_, changes) = try await RecordAPITests.post(client, fixture.path("records/changes"), ["zoneID": ["zoneName": "Notes"]])
            let changed = try XCTUnwrap((changes["records"] as? [Body])?.first)
            for (label, record) in [("modify", saved[0]), ("lookup", looked[0]), ("changes", changed)] {
                for key in ["created", "modified"] {
                    let stamp = try XCTUnwrap(record[key] as? Body, "\(label) \(key)")
                    XCTAssertNotNil(stamp["timestamp"] as? Int, "\(label) \(key)")
                    XCTAssertEqual(stamp["userRecordName"] as? String, "_alice", "\(label) \(key)")
                    XCTAssertEqual(stamp["deviceID"] as? String, RecordStamp.webServiceDeviceID, "\(label) \(key) names a device")
                }
            }
        }
    }

    /// (Continuation markers: QueryTests checks them page by page.)
    func testOpaqueTokensAreStandardBase64OfBytes() async throws {
        try await RecordAPITests.withAPI(maxResults: 1) { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "Notes")
            _ = try await RecordAPITests.modify(client, fixture, [
                ["operationType": "create", "record": RecordAPITests.note("n1", ["title": ["value": "a"]])],
                ["operationType": "create", "record": RecordAPITests.note("n2", ["title": ["value": "b"]])],
            ])
            let (_, recordChanges) = try await RecordAPITests.post(client, fixture.path("records/changes"), ["zoneID": ["zoneName": "Notes"]])
            let zoneToken = try XCTUnwrap(recordChanges["syncToken"] as? String)
            let (_, zoneChanges) = try await RecordAPITests.post(client, fixture.path("changes/zone"), ["zones": [["zoneID": ["zoneName": "Notes"]]]])
            let changesZoneToken = try XCTUnwrap(((zoneChanges["zones"] as? [Body])?.first)?["syncToken"] as? String)
            let (_, database) = try await RecordAPITests.post(client, fixture.path("changes/database"), [:])
            let databaseToken = try XCTUnwrap(database["syncToken"] as? String)
            let (_, zones) = try await RecordAPITests.post(client, fixture.path("zones/list"), [:])
            let listedToken = try XCTUnwrap((zones["zones"] as? [Body])?.first { ($0["zoneID"] as? Body)?["zoneName"] as? String == "Notes" }?["syncToken"] as? String)
            for (label, token) in [("records/changes", zoneToken), ("changes/zone", changesZoneToken), ("changes/database", databaseToken),
                                   ("zones/list", listedToken)] {
                XCTAssertTrue(Self.isStandardBase64(token), "\(label) token is standard padded base64: \(token)")
                XCTAssertFalse(token.contains("."), label)
            }
            // And each works when sent back.
            let (next, nextPage) = try await RecordAPITests.post(client, fixture.path("records/changes"), ["zoneID": ["zoneName": "Notes"], "syncToken": zoneToken])
            XCTAssertEqual(next, 200)
            XCTAssertEqual((nextPage["records"] as? [Body])?.count, 1)
            // A token of the previous text format is still read, for this release.
            let previous = Self.formatTwo(try XCTUnwrap(SignedToken.open(zoneToken, as: ZoneSyncToken.self, kind: .zoneSync, key: fixture.configuration.secretKey)),
                                          kind: .zoneSync, key: fixture.configuration.secretKey)
            XCTAssertTrue(previous.hasPrefix("2."))
            let (old, oldPage) = try await RecordAPITests.post(client, fixture.path("records/changes"), ["zoneID": ["zoneName": "Notes"], "syncToken": previous])
            XCTAssertEqual(old, 200)
            XCTAssertEqual(((oldPage["records"] as? [Body])?.first)?["recordName"] as? String, ((nextPage["records"] as? [Body])?.first)?["recordName"] as? String)
            // An altered byte is refused.
            var altered = try XCTUnwrap(Data(base64Encoded: zoneToken))
            altered[altered.count / 2] ^= 0x20
            let (refused, refusedBody) = try await RecordAPITests.post(
                client, fixture.path("records/changes"), ["zoneID": ["zoneName": "Notes"], "syncToken": altered.base64EncodedString()])
            XCTAssertEqual(refused, 400)
            XCTAssertEqual(refusedBody["serverErrorCode"] as? String, "BAD_REQUEST")
        }
    }

    /// A token in the text format of the previous release (`2.base64url(json).base64url(mac)`).
    static func formatTwo<T: Encodable>(_ value: T, kind: TokenKind, key: SecretKey) -> String {
        let signed = "2." + Base64URL.encode(EventCoding.encode(value))
        return signed + "." + Base64URL.encode(Data(HMAC<SHA256>.authenticationCode(for: Data(signed.utf8), using: key.tokenKey(kind))))
    }

    func testDatabaseChangesCarryBothTokenKeysAndReadEither() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "Notes")
            for operation in ["zones/changes", "changes/database"] {
                let (status, first) = try await RecordAPITests.post(client, fixture.path(operation), [:])
                XCTAssertEqual(status, 200, operation)
                let token = try XCTUnwrap(first["syncToken"] as? String, operation)
                XCTAssertEqual(first["metaSyncToken"] as? String, token, "\(operation) sends the token under both keys")
                let zone = try XCTUnwrap((first["zones"] as? [Body])?.first, operation)
                XCTAssertEqual(zone["zoneType"] as? String, "REGULAR_CUSTOM_ZONE", operation)
                XCTAssertTrue(Self.isStandardBase64(zone["syncToken"] as? String ?? ""), operation)
                // Sent back under either key, the token means the same: nothing changed since.
                for key in ["syncToken", "metaSyncToken"] {
                    let (again, next) = try await RecordAPITests.post(client, fixture.path(operation), [key: token])
                    XCTAssertEqual(again, 200, "\(operation) \(key)")
                    XCTAssertEqual((next["zones"] as? [Body])?.count, 0, "\(operation) read the token from \(key)")
                }
            }
        }
    }

    func testAnUpdateRemovesAFieldSentEmptyOrNull() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "Notes")
            let fields: Body = ["title": ["value": "t"], "body": ["value": "b"], "tag": ["value": "x", "type": "STRING"], "keep": ["value": 1]]
            var (_, records) = try await RecordAPITests.modify(client, fixture, [["operationType": "create", "record": RecordAPITests.note("n1", fields)]])
            var tag = try XCTUnwrap(records[0]["recordChangeTag"] as? String)
            // `{}`, `{"value": null}` and a typed null each remove their field; the others stay.
            (_, records) = try await RecordAPITests.modify(client, fixture, [["operationType": "update", "record": RecordAPITests.note(
                "n1", ["title": [String: Any](), "body": ["value": NSNull()], "tag": ["value": NSNull(), "type": "STRING"]], tag: tag)]])
            XCTAssertNil(records[0]["serverErrorCode"], "\(records[0])")
            XCTAssertEqual(Set(RecordAPITests.fields(records[0]).keys), ["keep"])
            tag = try XCTUnwrap(records[0]["recordChangeTag"] as? String)
            let looked = try await RecordAPITests.lookup(client, fixture, ["n1"])
            XCTAssertEqual(Set(RecordAPITests.fields(looked[0]).keys), ["keep"], "the removal is stored")
            // forceUpdate removes too; removing a field the record lacks is no error.
            (_, records) = try await RecordAPITests.modify(client, fixture, [["operationType": "forceUpdate", "record": RecordAPITests.note(
                "n1", ["keep": [String: Any](), "never": [String: Any](), "new": ["value": "n"]])]])
            XCTAssertEqual(Set(RecordAPITests.fields(records[0]).keys), ["new"])
            // A create leaves an empty field out instead of refusing the record.
            (_, records) = try await RecordAPITests.modify(client, fixture, [["operationType": "create", "record": RecordAPITests.note(
                "n2", ["gone": [String: Any](), "title": ["value": "t"]])]])
            XCTAssertEqual(Set(RecordAPITests.fields(records[0]).keys), ["title"])
            // A field with a type but no value at all is still an error naming it.
            (_, records) = try await RecordAPITests.modify(client, fixture, [["operationType": "forceUpdate", "record": RecordAPITests.note("n2", ["title": ["type": "STRING"]])]])
            XCTAssertEqual(records[0]["serverErrorCode"] as? String, "BAD_REQUEST")
            XCTAssertTrue((records[0]["reason"] as? String ?? "").contains("title"), "\(records[0])")
            // The removal reaches sync: a device sees the record without the field.
            let (_, changes) = try await RecordAPITests.post(client, fixture.path("records/changes"), ["zoneID": ["zoneName": "Notes"]])
            let n1 = try XCTUnwrap((changes["records"] as? [Body])?.first { $0["recordName"] as? String == "n1" })
            XCTAssertEqual(Set(RecordAPITests.fields(n1).keys), ["new"])
        }
    }

    func testZoneDictionariesCarryTheirSyncTokenAndType() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            let (_, created) = try await RecordAPITests.post(
                client, fixture.path("zones/modify"), ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Notes"]]]]])
            let createdZone = try XCTUnwrap((created["zones"] as? [Body])?.first)
            XCTAssertEqual(createdZone["zoneType"] as? String, "REGULAR_CUSTOM_ZONE")
            XCTAssertEqual(createdZone["atomic"] as? Bool, true)
            let createdToken = try XCTUnwrap(createdZone["syncToken"] as? String)
            _ = try await RecordAPITests.modify(client, fixture, [["operationType": "create", "record": RecordAPITests.note("n1", ["title": ["value": "a"]])]])

            let (_, listed) = try await RecordAPITests.post(client, fixture.path("zones/list"), [:])
            let listedZones = try XCTUnwrap(listed["zones"] as? [Body])
            let defaultZone = try XCTUnwrap(listedZones.first { ($0["zoneID"] as? Body)?["zoneName"] as? String == "_defaultZone" })
            XCTAssertEqual(defaultZone["zoneType"] as? String, "DEFAULT_ZONE")
            XCTAssertEqual(defaultZone["atomic"] as? Bool, false)
            let notes = try XCTUnwrap(listedZones.first { ($0["zoneID"] as? Body)?["zoneName"] as? String == "Notes" })
            XCTAssertEqual(notes["zoneType"] as? String, "REGULAR_CUSTOM_ZONE")
            let current = try XCTUnwrap(notes["syncToken"] as? String)
            let (_, looked) = try await RecordAPITests.post(client, fixture.path("zones/lookup"), ["zones": [["zoneName": "Notes"], ["zoneName": "_defaultZone"]]])
            let lookedZones = try XCTUnwrap(looked["zones"] as? [Body])
            XCTAssertEqual(lookedZones.map { $0["zoneType"] as? String }, ["REGULAR_CUSTOM_ZONE", "DEFAULT_ZONE"])
            // Apple's service also sends the type inside every zone id, records' too.
            XCTAssertEqual(lookedZones.map { ($0["zoneID"] as? Body)?["zoneType"] as? String }, ["REGULAR_CUSTOM_ZONE", "DEFAULT_ZONE"])
            XCTAssertEqual((createdZone["zoneID"] as? Body)?["zoneType"] as? String, "REGULAR_CUSTOM_ZONE")
            let record = try await RecordAPITests.lookup(client, fixture, ["n1"])
            XCTAssertEqual((record.first?["zoneID"] as? Body)?["zoneType"] as? String, "REGULAR_CUSTOM_ZONE")
            XCTAssertEqual(lookedZones[0]["syncToken"] as? String, current, "lookup and list give the same current token")

            // The zone's token is its current state: from the token of its creation the record is
            // news, from the current token nothing is.
            let (_, fromCreation) = try await RecordAPITests.post(client, fixture.path("records/changes"), ["zoneID": ["zoneName": "Notes"], "syncToken": createdToken])
            XCTAssertEqual((fromCreation["records"] as? [Body])?.compactMap { $0["recordName"] as? String }, ["n1"])
            let (_, fromNow) = try await RecordAPITests.post(client, fixture.path("records/changes"), ["zoneID": ["zoneName": "Notes"], "syncToken": current])
            XCTAssertEqual((fromNow["records"] as? [Body])?.count, 0)
            XCTAssertEqual(fromNow["moreComing"] as? Bool, false)

            // The default zone has no change history, so its dictionary carries no token (a client
            // takes one as the sign that the zone's changes can be fetched), in every answer that
            // gives it. With or without the token an earlier release gave it, the refusal names what
            // to use instead.
            XCTAssertNil(defaultZone["syncToken"], "\(defaultZone)")
            XCTAssertNil(lookedZones[1]["syncToken"], "\(lookedZones[1])")
            let defaultToken = SignedToken.sign(
                ZoneSyncToken(zoneKey: "\(fixture.container)/development/private/_alice/_defaultZone", incarnation: UUID(uuidString: "00000000-0000-0000-0000-000000000000")!, version: 0),
                kind: .zoneSync, key: fixture.configuration.secretKey)
            for body: Body in [["zoneID": ["zoneName": "_defaultZone"]], ["zoneID": ["zoneName": "_defaultZone"], "syncToken": defaultToken]] {
                let (status, refused) = try await RecordAPITests.post(client, fixture.path("records/changes"), body)
                XCTAssertEqual(status, 400)
                XCTAssertEqual(refused["serverErrorCode"] as? String, "BAD_REQUEST")
                XCTAssertTrue((refused["reason"] as? String ?? "").contains("records/query"), "\(refused)")
            }
        }
    }

    func testEveryAnswerCarriesItsRequestIDErrorsToo() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            let cases: [(String, HTTPRequest.Method, String, Int)] = [
                ("success", .get, fixture.path("zones/list"), 200),
                ("BAD_REQUEST", .post, fixture.path("records/modify"), 400),
                ("AUTHENTICATION_REQUIRED", .post, fixture.path("zones/list", user: nil), 421),
                ("AUTHENTICATION_FAILED", .get, "/database/1/\(fixture.container)/development/private/zones/list?ckAPIToken=wrong", 401),
                ("an unknown operation", .post, fixture.path("records/explode"), 404),
                ("an unknown path", .get, "/nothing/here", 404),
            ]
            for (label, method, uri, expected) in cases {
                try await client.execute(uri: uri, method: method, body: ByteBuffer(string: "{")) { response in
                    XCTAssertEqual(Int(response.status.code), expected, label)
                    let id = try XCTUnwrap(response.headers[.init("X-Request-ID")!], "\(label) answers with X-Request-ID")
                    if expected != 200, let body = try? JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? Body,
                       let uuid = body["uuid"] as? String {
                        XCTAssertEqual(uuid, id, "\(label): the error's uuid is the request id")
                    }
                }
            }
        }
    }

    func testEveryRetryableErrorCarriesRetryAfter() async throws {
        // Whatever raises it, a retryable code comes with when to retry.
        for code in [ServerErrorCode.tryAgainLater, .throttled] {
            XCTAssertEqual(StratusError(code, "busy").retryAfter, ServerErrorCode.defaultRetryAfter, code.rawValue)
            XCTAssertEqual(StratusError(code, "busy", retryAfter: 7).retryAfter, 7, code.rawValue)
        }
        for code in [ServerErrorCode.badRequest, .conflict, .internalError, .notFound] {
            XCTAssertNil(StratusError(code, "no").retryAfter, code.rawValue)
        }
        // A database going away (shutting down, restarting, out of connections, a connection
        // failure) is a passing condition: TRY_AGAIN_LATER with retryAfter, not an internal error.
        // PostgreSQL raises each of these SQLSTATEs here, on a connection that stays usable.
        try await TestSupport.withStore(url: try TestSupport.adminDatabaseURL()) { store in
            for state in ["57P01", "57P02", "57P03", "53300", "08006"] {
                do {
                    try await store.withConnection { connection in
                        try await connection.query(
                            PostgresQuery(unsafeSQL: "DO $$ BEGIN RAISE EXCEPTION 'gone' USING ERRCODE = '\(state)'; END $$"), logger: TestSupport.logger)
                    }
                    XCTFail("\(state) was not raised")
                } catch let error as StratusError {
                    XCTAssertEqual(error.code, .tryAgainLater, "\(state): \(error)")
                    XCTAssertNotNil(error.retryAfter, state)
                    XCTAssertFalse(error.reason.contains("gone"), "the reason is the server's own words, not the database's: \(error.reason)")
                } catch {
                    XCTFail("\(state) is no retryable error: \(String(reflecting: error))")
                }
            }
            // Other errors stay what they are.
            do {
                _ = try await store.withConnection { connection in
                    try await connection.query("DO $$ BEGIN RAISE EXCEPTION 'bad' USING ERRCODE = '22023'; END $$", logger: TestSupport.logger)
                }
            } catch let error as StratusError {
                XCTFail("22023 became \(error)")
            } catch {}
        }
    }

    func testExistingContainersKeepTheirSettingWhenNewOnesOpenPublicReads() async throws {
        let url = try await TestSupport.createDatabase()
        let migrations = try TestSupport.migrations()
        try await TestSupport.withStore(url: url) { store in
            // A container made before the change keeps its closed public database.
            try await Migrator(store: store, migrations: migrations.filter { $0.version < 11 }).migrate(logger: TestSupport.logger)
            // Its row as that schema holds it (today's `ContainerStore.create` reads tables of later migrations).
            try await store.withConnection { connection in
                _ = try await connection.query("INSERT INTO containers (container) VALUES ('iCloud.old')", logger: TestSupport.logger)
            }
            try await Migrator(store: store, migrations: migrations).migrate(logger: TestSupport.logger)
            let token = try await ContainerStore(store: store).create(container: "iCloud.new", label: "", logger: TestSupport.logger)
            let oldToken = try await ContainerStore(store: store).create(container: "iCloud.old", label: "second token", logger: TestSupport.logger)
            let new = try await ContainerStore(store: store).access(forAPIToken: token, logger: TestSupport.logger)
            XCTAssertEqual(new?.allowsAnonymousPublic, true, "a new container's public database is readable with the API token")
            let old = try await ContainerStore(store: store).access(forAPIToken: oldToken, logger: TestSupport.logger)
            XCTAssertEqual(old?.allowsAnonymousPublic, false, "an upgrade (or a new token) never opens an existing container")
        }
        // `stratus container create --no-anonymous-public-reads` makes a closed one; without a flag
        // an existing container keeps its setting.
        var configuration = try StratusConfiguration.fromEnvironment(["STRATUS_SECRET_KEY": SecretKey.generate().hex, "STRATUS_DATABASE_URL": url])
        configuration.databaseMaxConnections = 2
        let closed = try await Admin.createContainer("iCloud.closed", label: "", anonymousPublicReads: false, configuration, logger: TestSupport.logger)
        let again = try await Admin.createContainer("iCloud.closed", label: "", configuration, logger: TestSupport.logger)
        try await TestSupport.withStore(url: url) { store in
            for token in [closed, again] {
                let access = try await ContainerStore(store: store).access(forAPIToken: token, logger: TestSupport.logger)
                XCTAssertEqual(access?.allowsAnonymousPublic, false)
            }
        }
    }
}
