import Foundation
import StratusCore
import XCTest

/// The write path's rules as Core decides them, from values a writer has read: the public
/// database's security roles, a participant's access through the shared database, the schema's
/// growth, the record, event and quota limits, and where shares may be saved. Each table row is one
/// case; the errors' codes and reasons are what clients see.
final class WritePlanTests: XCTestCase {
    let stamp = RecordStamp(timestamp: 1_000, userRecordName: "_alice", deviceID: nil)

    func record(_ name: String, type: String = "Note", fields: [String: FieldValue] = [:], creator: String = "_alice") -> Record {
        let stamp = RecordStamp(timestamp: 1_000, userRecordName: creator, deviceID: nil)
        return Record(recordName: name, recordType: type, fields: fields, changeTag: "t1", created: stamp, modified: stamp)
    }

    /// The StratusError `body` throws; nil when it throws none.
    func refusal(_ body: () throws -> Void) -> StratusError? {
        do {
            try body()
            return nil
        } catch let error as StratusError {
            return error
        } catch {
            XCTFail("not a StratusError: \(error)")
            return nil
        }
    }

    // MARK: Public database security roles

    func testSecurityRolesDecideWhoCreatesAndChangesAPublicRecord() {
        let custom = RecordTypeSchema(name: "Note", grants: [SchemaGrant([.write], to: "_creator"), SchemaGrant([.write, .create], to: "Editor")])
        let closed = RecordTypeSchema(name: "Note", grants: [SchemaGrant([.read], to: "_world")])
        // (why, permission, schema, creator, user, roles, expected: nil when the user's roles must be read first)
        let rows: [(String, SchemaPermission, RecordTypeSchema?, String?, String?, Set<String>?, Bool?)] = [
            ("a type the schema lacks: signed-in users create", .create, nil, nil, "_bob", nil, true),
            ("a type the schema lacks: the API token alone creates nothing", .create, nil, nil, nil, nil, false),
            ("a type the schema lacks: the creator writes its record", .write, nil, "_bob", "_bob", nil, true),
            ("a type the schema lacks: another user does not", .write, nil, "_alice", "_bob", nil, false),
            ("without grants naming custom roles the roles are never needed", .write, closed, "_bob", "_bob", nil, false),
            ("a custom role's grant needs the user's roles", .write, custom, "_alice", "_bob", nil, nil),
            ("the user holds the role", .write, custom, "_alice", "_bob", ["Editor"], true),
            ("the user holds another role", .write, custom, "_alice", "_bob", ["Viewer"], false),
            ("the creator needs no roles", .write, custom, "_bob", "_bob", nil, true),
            ("a caller without a user holds no custom role", .create, custom, nil, nil, nil, false),
            ("a custom role creates", .create, custom, nil, "_bob", ["Editor"], true),
        ]
        for (why, permission, schema, creator, user, roles, expected) in rows {
            XCTAssertEqual(
                PublicWriteAccess.permits(permission, recordType: "Note", schema: schema, creator: creator, user: user, roles: roles), expected, why)
        }
    }

    func testOnlyAReferenceWithAnActionToAnotherRecordBindsItsTargetAndOnlyVALIDATENeedsItLive() {
        // (action, target, binds in the public database, needs a live target)
        let rows: [(ReferenceAction, String, Bool, Bool)] = [
            (.none, "b", false, false), (.validate, "b", true, true), (.deleteSelf, "b", true, false),
            (.validate, "a", false, false), (.deleteSelf, "a", false, false), (.none, "a", false, false),
        ]
        for (action, target, binds, needsLive) in rows {
            let reference = Reference(recordName: target, action: action)
            XCTAssertEqual(PublicWriteAccess.binds(reference, from: "a"), binds, "\(action) to \(target)")
            XCTAssertEqual(ReferenceRules.needsLiveTarget(reference, from: "a"), needsLive, "\(action) to \(target)")
        }
    }

    func testWriteRefusalsKeepTheirCodesAndReasons() {
        let long = String(repeating: "n", count: 300)
        let rows: [(StratusError, ServerErrorCode, String)] = [
            (PublicWriteAccess.changeDenied("n1", recordType: "Note"), .accessDenied,
             "Record 'n1' belongs to another user: in the public database the security roles of record type 'Note' let only its creator (and roles granted WRITE) change or delete it"),
            (PublicWriteAccess.createDenied("n1", recordType: "Note"), .accessDenied,
             "Record 'n1' cannot be created: in the public database no security role this user holds has CREATE on record type 'Note'"),
            (PublicWriteAccess.bindingDenied(field: "f", recordName: "n1", reference: Reference(recordName: "t", action: .deleteSelf)), .accessDenied,
             "Field 'f' of record 'n1' refers with DELETE_SELF to 't', which belongs to another user: in the public database such references may point only at your own records"),
            (ReferenceRules.missingTarget(field: "f", recordName: "n1", target: "t"), .validatingReferenceError,
             "Field 'f' of record 'n1' refers to 't', which does not exist"),
            (ReferenceRules.deleteBlocked("t", referrer: "n1"), .validatingReferenceError,
             "Record 't' cannot be deleted: 'n1' refers to it with VALIDATE"),
            (PublicWriteAccess.changeDenied(long, recordType: "Note"), .accessDenied,
             "Record '\(long.prefix(255))' belongs to another user: in the public database the security roles of record type 'Note' let only its creator (and roles granted WRITE) change or delete it"),
        ]
        for (error, code, reason) in rows {
            XCTAssertEqual(error.code, code, reason)
            XCTAssertEqual(error.reason, reason)
        }
    }

    // MARK: Shared database

    enum Expected: Equatable {
        case allowed
        case anchors([String])
        case refused(ServerErrorCode, String)
    }

    func testAParticipantsWriteIsCheckedAgainstTheSharesTheyAccepted() {
        let hierarchy = SharedZoneAccess(roots: ["root": .readWrite, "readRoot": .readOnly], shares: ["share1"])
        let zoneWrite = SharedZoneAccess(zoneWide: .readWrite, shares: [ShareRecord.zoneShareName])
        let zoneRead = SharedZoneAccess(zoneWide: .readOnly, shares: [ShareRecord.zoneShareName])
        let share = record("share1", type: ShareRecord.recordType)
        // (why, access, record name, type sent, parent sent, current, expected)
        let rows: [(String, SharedZoneAccess, String, String?, String??, Record?, Expected)] = [
            ("a share the participant reaches may be saved (to leave it)", hierarchy, "share1", nil, nil, share, .allowed),
            ("a share the participant does not reach does not exist for them", hierarchy, "share2", nil, nil,
             record("share2", type: ShareRecord.recordType), .refused(.notFound, "Record 'share2' does not exist")),
            ("a participant creates no share", hierarchy, "share1", ShareRecord.recordType, nil, nil, .refused(.notFound, "Record 'share1' does not exist")),
            ("a zone-wide share READ_WRITE allows any record", zoneWrite, "n1", "Note", nil, nil, .allowed),
            ("a zone-wide share READ_ONLY allows none", zoneRead, "n1", "Note", nil, record("n1"),
             .refused(.accessDenied, "Record 'n1': the share gives the caller READ_ONLY permission")),
            ("a change of a record: the record must be in a hierarchy", hierarchy, "n1", nil, nil, record("n1"), .anchors(["n1"])),
            ("a new record: its parent must be", hierarchy, "n1", "Note", .some("root"), nil, .anchors(["root"])),
            ("a moved record: both", hierarchy, "n1", nil, .some("other"), record("n1"), .anchors(["n1", "other"])),
            ("a new record without a parent", hierarchy, "n1", "Note", nil, nil,
             .refused(.accessDenied, "Record 'n1': a record created in a shared hierarchy needs a parent inside it")),
            ("a record losing its parent leaves the hierarchy", hierarchy, "n1", nil, .some(nil), record("n1"),
             .refused(.accessDenied, "Record 'n1' cannot leave the shared hierarchy")),
            ("a root may lose its parent", hierarchy, "root", nil, .some(nil), record("root"), .anchors(["root"])),
            ("a new root without a parent has nothing left to check", hierarchy, "root", "Note", .some(nil), nil, .allowed),
        ]
        for (why, access, name, type, parent, current, expected) in rows {
            let outcome: Expected
            do throws(StratusError) {
                switch try access.check(recordName: name, recordType: type, parent: parent, current: current) {
                case .allowed: outcome = .allowed
                case .anchors(let anchors): outcome = .anchors(anchors)
                }
            } catch {
                outcome = .refused(error.code, error.reason)
            }
            XCTAssertEqual(outcome, expected, why)
        }
    }

    func testAParticipantsAnchorsMustReachARootSharedReadWrite() {
        let access = SharedZoneAccess(roots: ["root": .readWrite, "readRoot": .readOnly])
        // (why, anchors, reached, expected refusal)
        let rows: [(String, [String], [ExactName: [String]], Expected)] = [
            ("the record reaches a READ_WRITE root", ["n1"], [ExactName("n1"): ["root"]], .allowed),
            ("one of its roots is READ_WRITE", ["n1"], [ExactName("n1"): ["readRoot", "root"]], .allowed),
            ("the record reaches only a READ_ONLY root", ["n1"], [ExactName("n1"): ["readRoot"]],
             .refused(.accessDenied, "Record 'n1': the share gives the caller READ_ONLY permission")),
            ("the record reaches no root: it does not exist for the participant", ["n1"], [:], .refused(.notFound, "Record 'n1' does not exist")),
            ("the parent reaches no root", ["n1", "p"], [ExactName("n1"): ["root"]],
             .refused(.accessDenied, "Record 'n1': its parent 'p' is not in a hierarchy shared with the caller")),
            ("both reach", ["n1", "p"], [ExactName("n1"): ["root"], ExactName("p"): ["root"]], .allowed),
        ]
        for (why, anchors, reached, expected) in rows {
            let outcome: Expected
            do throws(StratusError) {
                try access.checkAnchors(anchors, recordName: "n1", reached: reached)
                outcome = .allowed
            } catch {
                outcome = .refused(error.code, error.reason)
            }
            XCTAssertEqual(outcome, expected, why)
        }
    }

    // MARK: Schema growth

    func testASaveGrowsDevelopmentsSchemaOnlyHoldingTheTypesLock() throws {
        let development = DatabaseID(container: "c", environment: .development, scope: .private, owner: "_alice")
        let production = DatabaseID(container: "c", environment: .production, scope: .private, owner: "_alice")
        let causation = Causation(requestID: "r1", userRecordName: "_alice")
        let lock = SchemaGrowthPlan.lock(container: "c", environment: .development, recordType: "Note")
        XCTAssertEqual(lock, "schema/c/development/Note")
        let note = record("n1", fields: ["title": .string("a")])
        var existing = RecordTypeSchema.created(name: "Note")
        existing.fields.append(SchemaField(name: "title", type: SchemaFieldType(.string)))

        // A new type, its lock not held: the fields are kept, the grown type is seen by later saves,
        // and the attempt must run again holding the lock.
        let unheld = try SchemaGrowthPlan.decide(note, schema: nil, enforced: false, database: development, held: [], causation: causation)
        XCTAssertEqual(unheld.growth, .needsLock(lock))
        XCTAssertEqual(unheld.grown?.field(named: "title")?.type, SchemaFieldType(.string))
        XCTAssertEqual(unheld.fields, note.fields)

        // Held: the whole type is added, and an event tells of it.
        let held = try SchemaGrowthPlan.decide(note, schema: nil, enforced: false, database: development, held: [lock], causation: causation)
        guard case .grow(let added, let fieldsOnly, let event) = held.growth else { return XCTFail("expected growth, got \(String(describing: held.growth))") }
        XCTAssertFalse(fieldsOnly)
        XCTAssertEqual(added, unheld.grown)
        XCTAssertEqual(event.type, SchemaChanged.eventType)
        XCTAssertEqual(event.zoneKey, SchemaChanged.key(container: "c", environment: .development))
        let payload = try EventCoding.decoder.decode(SchemaChanged.self, from: event.payload)
        XCTAssertEqual(payload.added, [added])
        XCTAssertEqual(payload.cause, .save)

        // A new field of an existing type: only the field is added.
        let more = record("n1", fields: ["title": .string("a"), "body": .string("b")])
        let field = try SchemaGrowthPlan.decide(more, schema: existing, enforced: false, database: development, held: [lock], causation: causation)
        guard case .grow(let fieldOnly, true, _) = field.growth else { return XCTFail("expected fields only, got \(String(describing: field.growth))") }
        XCTAssertEqual(fieldOnly.fields.map(\.name), ["body"])
        XCTAssertEqual(field.grown?.fields.count, existing.fields.count + 1)

        // (why, record, schema, database, enforced, expected growth, expected refusal)
        let rows: [(String, Record, RecordTypeSchema?, DatabaseID, Bool, StratusError?)] = [
            ("fields the schema has grow nothing", note, existing, development, false, nil),
            ("production before its first deploy is left alone", more, nil, production, false, nil),
            ("deployed production refuses a new type", note, nil, production, true,
             StratusError(.badRequest, "Cannot create new type Note in production schema")),
            ("deployed production refuses a new field", more, existing, production, true,
             StratusError(.badRequest, "Cannot create or modify field 'body' in record type 'Note' in production schema")),
            ("deployed production takes the fields it has", note, existing, production, true, nil),
        ]
        for (why, saved, schema, database, enforced, refusal) in rows {
            do throws(StratusError) {
                let plan = try SchemaGrowthPlan.decide(saved, schema: schema, enforced: enforced, database: database, held: [lock], causation: causation)
                XCTAssertNil(refusal, why)
                XCTAssertNil(plan.growth, why)
                XCTAssertNil(plan.grown, why)
                XCTAssertEqual(plan.fields, saved.fields, why)
            } catch {
                XCTAssertEqual(error, refusal, why)
            }
        }
    }

    func testAValueTheFieldsTypeReadsIsStoredAsThatType() throws {
        let database = DatabaseID(container: "c", environment: .production, scope: .private, owner: "_alice")
        let schema = RecordTypeSchema(name: "Point", fields: [SchemaField(name: "x", type: SchemaFieldType(.double))])
        let plan = try SchemaGrowthPlan.decide(
            record("p", type: "Point", fields: ["x": .int64(2)]), schema: schema, enforced: true, database: database, held: [],
            causation: Causation(requestID: "r"))
        XCTAssertEqual(plan.fields, ["x": .double(2)])
        XCTAssertNil(plan.growth)
    }

    // MARK: Limits

    func testARecordPastItsSizeLimitIsRefused() {
        var limits = WriteLimits()
        limits.maxRecordBytes = 100
        let rows: [(Int, StratusError?)] = [
            (99, nil), (100, nil), (101, StratusError(.limitExceeded, "Record 'n1' is 101 bytes; the limit is 100")),
        ]
        for (bytes, expected) in rows {
            XCTAssertEqual(refusal { try limits.checkRecord("n1", fieldBytes: bytes) }, expected, "\(bytes) bytes")
        }
    }

    /// The size counted from a record's fields as sent, before they are decoded, is never more than
    /// what the decoded fields are stored as: it refuses only records `checkRecord` would refuse.
    func testTheLeastSizeOfSentFieldsNeverPassesTheStoredSize() throws {
        let samples: [String: JSONValue] = [
            "s": .object(["value": .string("héllo \"quoted\" / slash")]),
            "typed": .object(["value": .string("x"), "type": .string("STRING")]),
            "i": .object(["value": .int(-1234567)]),
            "iFromText": .object(["value": .string("000000000000000007"), "type": .string("INT64")]),
            "d": .object(["value": .double(1.5)]),
            "dWhole": .object(["value": .int(3), "type": .string("DOUBLE")]),
            "t": .object(["value": .int(1_700_000_000_000), "type": .string("TIMESTAMP")]),
            "b": .object(["value": .string("AAAA"), "type": .string("BYTES")]),
            "r": .object(["value": .object(["recordName": .string("target"), "action": .string("DELETE_SELF")]), "type": .string("REFERENCE")]),
            "rUntyped": .object(["value": .object(["recordName": .string("t2")])]),
            "loc": .object(["value": .object(["latitude": .int(1), "longitude": .double(2.5)]), "type": .string("LOCATION")]),
            "asset": .object(["value": .object(["fileChecksum": .string("abc"), "size": .int(1)]), "type": .string("ASSETID")]),
            "il": .object(["value": .array([.int(1), .int(22), .int(-3)]), "type": .string("INT64_LIST")]),
            "mixed": .object(["value": .array([.int(1), .double(0.5)])]),
            "sl": .object(["value": .array([.string("a"), .string(""), .string("ünï")])]),
            "rl": .object(["value": .array([.object(["recordName": .string("x")])]), "type": .string("REFERENCE_LIST")]),
            "empty": .object(["value": .array([]), "type": .string("STRING_LIST")]),
            "removed": .object([:]),
        ]
        // Each field alone, and all together.
        var cases = samples.map { [$0.key: $0.value] }
        cases.append(samples)
        for fields in cases {
            var decoded: [String: FieldValue] = [:]
            for (name, json) in fields where !FieldCoding.isRemoval(json) { decoded[name] = try FieldCoding.decode(field: name, json) }
            let stored = EventCoding.encode(decoded).count
            let least = WriteLimits.leastRecordBytes(sent: fields)
            XCTAssertLessThanOrEqual(least, stored, "\(fields.keys.sorted())")
            XCTAssertGreaterThan(least, 0)
        }
    }

    /// A list far over the limit is counted only until the count passes the limit, and refused.
    func testASentRecordThatCannotFitIsRefusedBeforeItsValuesAreDecoded() {
        var limits = WriteLimits()
        limits.maxRecordBytes = 1_000
        let list: [String: JSONValue] = ["l": .object(["value": .array(Array(repeating: .int(1), count: 100_000)), "type": .string("INT64_LIST")])]
        let least = WriteLimits.leastRecordBytes(sent: list, stop: limits.maxRecordBytes)
        XCTAssertGreaterThan(least, 1_000)
        let full = WriteLimits.leastRecordBytes(sent: list)
        XCTAssertEqual(full, 1 + (1 + 5 + 24) + (1 + 2 * 100_000), "every element and its comma, the field")
        XCTAssertLessThanOrEqual(least, full, "the count stops once past the limit (the commas count at once)")
        XCTAssertEqual(
            refusal { try limits.checkSentRecord("n1", leastBytes: least) },
            StratusError(.limitExceeded, "Record 'n1' is at least \(least) bytes; the limit is 1000"))
        XCTAssertNil(refusal { try limits.checkSentRecord("n1", leastBytes: 1_000) })
        let text: [String: JSONValue] = ["s": .object(["value": .string(String(repeating: "a", count: 2_000))])]
        XCTAssertGreaterThan(WriteLimits.leastRecordBytes(sent: text), 2_000, "an untyped string is a STRING, stored as sent")
    }

    func testAnEventTooLargeWithThePreviousValuesIsMadeWithoutThemAndRefusedOnlyIfStillTooLarge() throws {
        let database = DatabaseID(container: "c", environment: .development, scope: .private, owner: "_alice")
        let zone = ZoneID(zoneName: "Z", ownerRecordName: "_alice")
        let key = ZoneKey(database: database, zoneName: "Z")
        let before = record("n1", fields: ["body": .string(String(repeating: "a", count: 5_000))])
        var after = before
        after.fields["body"] = .string(String(repeating: "b", count: 5_000))
        func event(_ limits: WriteLimits, before: Record?) throws(StratusError) -> NewEvent {
            try limits.savedEvent(after, before: before, zoneKey: key, zoneSequence: 7, database: database, zone: zone, incarnation: nil,
                                  causation: Causation(requestID: "r"))
        }
        let full = try event(WriteLimits(), before: before)
        XCTAssertEqual(full.zoneSequence, 7)
        let withPrevious = EventCoding.envelopeSize(of: full)
        XCTAssertNotNil(try EventCoding.decoder.decode(RecordSaved.self, from: full.payload).previous?.fields["body"])

        var tight = WriteLimits()
        tight.maxEventBytes = withPrevious - 1
        let trimmed = try event(tight, before: before)
        let payload = try EventCoding.decoder.decode(RecordSaved.self, from: trimmed.payload)
        XCTAssertNil(payload.previous?.fields["body"], "the previous value is left out")
        XCTAssertEqual(payload.previous?.omitted, ["body"])
        XCTAssertLessThanOrEqual(EventCoding.envelopeSize(of: trimmed), tight.maxEventBytes)

        var tiny = WriteLimits()
        tiny.maxEventBytes = 1_000
        let created = refusal { _ = try event(tiny, before: nil) }
        XCTAssertEqual(created?.code, .limitExceeded)
        XCTAssertEqual(created?.reason.hasPrefix("Record 'n1' makes an event of "), true)
        XCTAssertEqual(created?.reason.hasSuffix(" bytes; the event limit is 1000"), true)
    }

    func testTheQuotaBlamesTheFirstRecordThatPassesIt() {
        let applied: [(recordName: String, bytes: Int64)] = [("a", 40), ("b", -10), ("c", 50), ("d", 30)]
        // (why, quota, total after the transaction, the transaction's change, expected blamed record and total named)
        let rows: [(String, Int64, Int64, Int64, (String, Int64)?)] = [
            ("no quota", 0, 1_000, 110, nil),
            ("within the quota", 200, 200, 110, nil),
            ("passed at c: 100 before, 140 after a, 130 after b, 180 after c", 150, 210, 110, ("c", 210)),
            ("passed at a already", 120, 210, 110, ("a", 210)),
        ]
        for (why, quota, total, change, expected) in rows {
            let refusal = StorageQuota.refusal(quota: quota, total: total, change: change, applied: applied)
            XCTAssertEqual(refusal?.recordName, expected?.0, why)
            if let (name, named) = expected {
                XCTAssertEqual(refusal?.error, StratusError(.quotaExceeded,
                    "Record '\(name)' would bring the user's stored records to \(named) bytes; the storage quota is \(quota) bytes per user"), why)
            }
        }
        // Bytes another writer added past the quota: the last record that added bytes is blamed.
        XCTAssertEqual(StorageQuota.refusal(quota: 100, total: 500, change: 5, applied: [("x", 5), ("y", -1)])?.recordName, "x")
        XCTAssertEqual(StorageQuota.refusal(quota: 100, total: 500, change: 5, applied: [("y", -1)])?.recordName, "y")
        let needs: [(Int64, Int64, Bool)] = [(0, 10, false), (100, 10, true), (100, 0, false), (100, -5, false)]
        for (quota, change, expected) in needs {
            XCTAssertEqual(StorageQuota.needsCheck(quota: quota, change: change), expected, "quota \(quota), change \(change)")
        }
    }

    // MARK: Shares

    func testSharesLiveInCustomZonesOfThePrivateDatabaseAndOneKindAZone() {
        let custom = ZoneID(zoneName: "Z", ownerRecordName: "_alice")
        let defaultZone = ZoneID(zoneName: ZoneID.defaultZoneName, ownerRecordName: "_alice")
        let misplaced = StratusError(.badRequest, "Share record 's': shares live in a custom zone of the private database")
        let places: [(DatabaseScope, ZoneID, StratusError?)] = [
            (.private, custom, nil), (.private, defaultZone, misplaced), (.public, custom, misplaced), (.shared, custom, misplaced),
        ]
        for (scope, zone, expected) in places {
            XCTAssertEqual(refusal { try ShareWriteRules.checkPlace("s", scope: scope, zone: zone) }, expected, "\(scope) \(zone.zoneName)")
        }
        let whole = ShareRecord.zoneShareName
        let kinds: [(String, [String], StratusError?)] = [
            ("s", ["t"], nil),
            ("s", ["s"], nil),
            (whole, [whole], nil),
            (whole, ["s"], StratusError(.badRequest, "Zone 'Z' has record shares; a zone-wide share cannot join them")),
            ("s", [whole], StratusError(.badRequest, "Zone 'Z' is shared whole (\(whole)); it takes no record shares")),
        ]
        for (name, others, expected) in kinds {
            XCTAssertEqual(refusal { try ShareWriteRules.checkKind(name, others: others, zoneName: "Z") }, expected, "\(name) among \(others)")
        }
    }

    func testAShareHasOneRootRecord() {
        let another = StratusError(.badRequest, "Record 'r2' points at share 's', which 'r1' already roots; a share has one root record")
        let roots: [(String?, StratusError?)] = [(nil, nil), ("r2", nil), ("r1", another)]
        for (other, expected) in roots {
            XCTAssertEqual(refusal { try ShareWriteRules.checkOneRoot("r2", share: "s", other: other) }, expected, "other root \(String(describing: other))")
        }
        let stored = StratusError(.badRequest, "Record 'r2' points at share 's', which has another root record")
        let storedRoots: [(String?, StratusError?)] = [("r2", nil), ("r1", stored), (nil, stored)]
        for (root, expected) in storedRoots {
            XCTAssertEqual(refusal { try ShareWriteRules.checkStoredRoot("r2", share: "s", storedRoot: root) }, expected, "stored root \(String(describing: root))")
        }
        XCTAssertEqual(ShareWriteRules.missingRoot("s"), StratusError(.badRequest,
            "Share record 's' needs its root record: name it in forRecord, or save it in the same request with its share field pointing at the share"))
        XCTAssertEqual(ShareWriteRules.refused("s", StratusError(.accessDenied, "only the zone's owner creates a share")),
                       StratusError(.accessDenied, "Share record 's': only the zone's owner creates a share"))
    }

    /// `forRecord` (Apple's key on a share record naming its root) attaches the share to that
    /// record, as if the record's share field pointed at it.
    func testAShareIsAttachedToTheRootItsForRecordNames() {
        let zone = ZoneID(zoneName: "Z", ownerRecordName: "_alice")
        let share = ShareRecord.recordType
        // Only a hierarchy share takes the key, naming a record of its own zone (zoneID optional).
        XCTAssertEqual(try? ShareWriteRules.forRecordRoot("s", recordType: share, forRecord: ShareRootName(recordName: "r"), zone: zone), "r")
        XCTAssertEqual(try? ShareWriteRules.forRecordRoot("s", recordType: share, forRecord: ShareRootName(recordName: "r", zoneName: "Z"), zone: zone), "r")
        XCTAssertEqual(refusal { _ = try ShareWriteRules.forRecordRoot("s", recordType: share, forRecord: ShareRootName(recordName: "r", zoneName: "Other"), zone: zone) },
                       StratusError(.badRequest, "Share record 's': forRecord names a record of zone 'Other'; a share's root record is in the share's own zone 'Z'"))
        XCTAssertEqual(refusal { _ = try ShareWriteRules.forRecordRoot("n", recordType: "Note", forRecord: ShareRootName(recordName: "r"), zone: zone) },
                       StratusError(.badRequest, "Record 'n': forRecord is a key of share records (cloudkit.share) only"))
        let whole = ShareRecord.zoneShareName
        XCTAssertEqual(refusal { _ = try ShareWriteRules.forRecordRoot(whole, recordType: share, forRecord: ShareRootName(recordName: "r"), zone: zone) },
                       StratusError(.badRequest, "Share record '\(whole)' shares its whole zone; it has no root record to name in forRecord"))
        // The root: named, pointed at, or stored; one root, which never changes.
        let roots: [(String?, String?, String?, Result<String, StratusError>)] = [
            ("r", nil, nil, .success("r")),
            ("r", "r", nil, .success("r")),
            ("r", nil, "r", .success("r")),
            (nil, "p", nil, .success("p")),
            (nil, nil, "t", .success("t")),
            (nil, nil, nil, .failure(ShareWriteRules.missingRoot("s"))),
            ("r", "p", nil, .failure(StratusError(.badRequest,
                "Share record 's' names 'r' in forRecord, but 'p' points its share field at it; a share has one root record"))),
            ("r", nil, "t", .failure(StratusError(.badRequest,
                "Share record 's' names 'r' in forRecord, but its root record is 't'; a share's root record does not change"))),
        ]
        for (named, pointedBy, stored, expected) in roots {
            let decided = Result { () throws(StratusError) in try ShareWriteRules.root(share: "s", named: named, pointedBy: pointedBy, stored: stored) }
            XCTAssertEqual(decided, expected, "named \(String(describing: named)), pointed by \(String(describing: pointedBy)), stored \(String(describing: stored))")
        }
        // The named root exists and no other share roots it.
        let missing = StratusError(.badRequest, "Share record 's' names 'r' in forRecord, which does not exist in the share's zone")
        let taken = StratusError(.badRequest, "Share record 's' names 'r' in forRecord, which share 'u' already shares; a record has one share")
        let targets: [(Bool, [String], StratusError?)] = [
            (true, [], nil), (true, ["s"], nil), (false, [], missing), (true, ["u"], taken), (true, ["s", "u"], taken), (false, ["u"], missing),
        ]
        for (exists, rootedBy, expected) in targets {
            XCTAssertEqual(refusal { try ShareWriteRules.checkNamedRoot(share: "s", root: "r", exists: exists, rootedBy: rootedBy) }, expected,
                           "exists \(exists), rooted by \(rootedBy)")
        }
    }

    // MARK: Deletes

    func testADeleteTakesAVersionAndLeavesATombstonePerRecordOnlyInACustomZone() throws {
        let database = DatabaseID(container: "c", environment: .development, scope: .private, owner: "_alice")
        let zone = ZoneID(zoneName: "Z", ownerRecordName: "_alice")
        var root = record("root")
        root.createdVersion = 3
        let child = record("child", type: "Item")
        let deleted: [(record: Record, cascadedFrom: String?)] = [(root, nil), (child, "root")]
        // (why, the zone's counter before, expected versions, expected counter after)
        let rows: [(String, Int64?, [Int64?], Int64?)] = [
            ("a custom zone: the next versions, one a record", 7, [8, 9], 9),
            ("a default zone: no versions, no tombstones", nil, [nil, nil], nil),
        ]
        for (why, counter, versions, after) in rows {
            var sequence = counter
            var events = [NewEvent(zoneKey: ZoneKey(rawValue: "earlier"), zoneSequence: nil, payload: SchemaChanged(container: "c", environment: .development, cause: .save),
                                   causation: Causation(requestID: "r0"))]
            let tombstones = RecordDeletion.record(
                deleted, sequence: &sequence, zoneKey: ZoneKey(database: database, zoneName: "Z"), database: database, zone: zone, incarnation: nil,
                causation: Causation(requestID: "r1"), events: &events)
            XCTAssertEqual(sequence, after, why)
            XCTAssertEqual(events.count, 3, "\(why): the events are appended")
            XCTAssertEqual(events.dropFirst().map(\.zoneSequence), versions, why)
            let payloads = try events.dropFirst().map { try EventCoding.decoder.decode(RecordDeleted.self, from: $0.payload) }
            XCTAssertEqual(payloads.map(\.recordName), ["root", "child"], why)
            XCTAssertEqual(payloads.map(\.cascadedFrom), [nil, "root"], why)
            XCTAssertEqual(tombstones, versions.compactMap { $0 }.isEmpty ? [] : [
                RecordDeletion.Tombstone(recordName: "root", recordType: "Note", createdVersion: 3, deletedVersion: 8),
                RecordDeletion.Tombstone(recordName: "child", recordType: "Item", createdVersion: nil, deletedVersion: 9),
            ], why)
        }
    }

    // MARK: Layers

    /// The write rules are Core's: no database client, no SQL.
    func testTheWriteRulesReadNoDatabase() throws {
        let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../Sources/StratusCore/Writes").standardized
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".swift") }
        XCTAssertGreaterThanOrEqual(files.count, 5, "the write rules are in \(folder.path)")
        let forbidden = ["import PostgresNIO", "import NIO", "import Logging", "SELECT ", "INSERT INTO", "DELETE FROM", "UPDATE ", " async "]
        for file in files {
            let text = try String(contentsOf: folder.appendingPathComponent(file), encoding: .utf8)
            for word in forbidden {
                XCTAssertFalse(text.contains(word), "\(file) contains '\(word)'")
            }
        }
    }
}
