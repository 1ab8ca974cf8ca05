import Foundation
import StratusCore
import XCTest

final class SchemaLanguageTests: XCTestCase {
    /// A file as CloudKit's tools export one (system fields quoted, aligned names, comments, every
    /// type), shared with the CLI tests.
    static var exported: String {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Fixtures/Note.ckdb")
        return (try? String(contentsOf: url, encoding: .utf8)) ?? ""
    }

    func testExportedFileIsReadAsWritten() throws {
        let schema = try SchemaLanguage.parse(Self.exported)
        XCTAssertEqual(schema.roles, ["Moderator", "Editors2"])
        XCTAssertEqual(schema.recordTypes.map(\.name), ["Note", "Users"])
        let note = try XCTUnwrap(schema.recordType(named: "Note"))
        XCTAssertEqual(note.field(named: "title")?.indexes, [.queryable, .searchable, .sortable])
        XCTAssertEqual(note.field(named: "body")?.indexes, [.searchable])
        XCTAssertEqual(note.field(named: "___recordID")?.indexes, [.queryable])
        XCTAssertEqual(note.field(named: "___createTime")?.indexes, [.sortable])
        XCTAssertEqual(note.field(named: "tags")?.type, SchemaFieldType(.string, isList: true))
        XCTAssertEqual(note.field(named: "score")?.type, SchemaFieldType(.number, preferred: .double))
        XCTAssertEqual(note.field(named: "secret")?.type, SchemaFieldType(.string, encrypted: true))
        XCTAssertEqual(note.field(named: "type")?.type, SchemaFieldType(.string))
        XCTAssertEqual(note.grants, [
            SchemaGrant([.write], to: "_creator"), SchemaGrant([.create], to: "_icloud"), SchemaGrant([.read], to: "_world"),
            SchemaGrant([.read, .create, .write], to: "Moderator"),
        ])
        XCTAssertEqual(schema.recordType(named: "Users")?.field(named: "roles")?.type, SchemaFieldType(.int64, isList: true))
    }

    func testPrintedSchemaReadsBackTheSameAndPrintsTheSame() throws {
        let schema = try SchemaLanguage.parse(Self.exported)
        let printed = SchemaLanguage.print(schema)
        let reread = try SchemaLanguage.parse(printed)
        XCTAssertEqual(reread.normalized, schema.normalized)
        XCTAssertEqual(SchemaLanguage.print(reread), printed, "printing is stable")
        // The printer writes what the tools write: quoted system fields and keywords, aligned names.
        XCTAssertTrue(printed.hasPrefix("DEFINE SCHEMA\n"), printed)
        XCTAssertTrue(printed.contains("        \"___recordID\"   REFERENCE QUERYABLE,\n"), printed)
        XCTAssertTrue(printed.contains("        \"type\"          STRING,\n"), printed)
        XCTAssertTrue(printed.contains("        tags            LIST<STRING> QUERYABLE SEARCHABLE,\n"), printed)
        XCTAssertTrue(printed.contains("        score           NUMBER PREFERRED AS DOUBLE QUERYABLE,\n"), printed)
        XCTAssertTrue(printed.contains("        GRANT READ, CREATE, WRITE TO Moderator\n    );\n"), printed)
        XCTAssertTrue(printed.contains("    CREATE ROLE Editors2;\n"), printed)
    }

    func testNamesThatNeedQuotesRoundTrip() throws {
        var type = RecordTypeSchema.created(name: "My Type")
        type.fields += [
            SchemaField(name: "with \"quote\"", type: SchemaFieldType(.string)),
            SchemaField(name: "grant", type: SchemaFieldType(.int64)),
            SchemaField(name: "é", type: SchemaFieldType(.bytes)),
        ]
        let schema = Schema(recordTypes: [type])
        XCTAssertEqual(try SchemaLanguage.parse(SchemaLanguage.print(schema)).normalized, schema.normalized)
    }

    func testHandWrittenFileGetsTheSystemFieldsAndKeywordsInAnyCase() throws {
        let schema = try SchemaLanguage.parse("define schema record type Item (title string queryable, grant read to \"_world\");")
        let item = try XCTUnwrap(schema.recordType(named: "Item"))
        XCTAssertEqual(item.fields.count, 7)
        XCTAssertEqual(item.field(named: "___modTime")?.type, SchemaFieldType(.timestamp))
        XCTAssertEqual(item.field(named: "title")?.indexes, [.queryable])
        XCTAssertEqual(try SchemaLanguage.parse("DEFINE SCHEMA").recordTypes, [])
    }

    func testBadFilesGetErrorsWithLineAndColumn() {
        let cases: [(String, Int, Int, String)] = [
            ("RECORD TYPE A ()", 1, 1, "expected DEFINE"),
            ("DEFINE SCHEMA\n  RECORD TYPE A (\n    title STRNG\n  );", 3, 11, "expected a field type"),
            ("DEFINE SCHEMA\nRECORD TYPE A (\n  n INT64 SEARCHABLE\n);", 3, 11, "cannot be SEARCHABLE"),
            ("DEFINE SCHEMA\nRECORD TYPE A (\n  b BYTES QUERYABLE\n);", 3, 11, "cannot be QUERYABLE"),
            ("DEFINE SCHEMA\nRECORD TYPE A (\n  s ENCRYPTED STRING SORTABLE\n);", 3, 22, "cannot be SORTABLE"),
            ("DEFINE SCHEMA\nRECORD TYPE A (\n  a STRING,\n  a INT64\n);", 4, 3, "defined twice"),
            ("DEFINE SCHEMA\nRECORD TYPE A (a STRING);\nRECORD TYPE A (b STRING);", 3, 13, "defined twice"),
            ("DEFINE SCHEMA\nRECORD TYPE A (\n  GRANT READ TO Nobody\n);", 3, 17, "neither built in"),
            ("DEFINE SCHEMA\nRECORD TYPE A (\n  GRANT DELETE TO \"_world\"\n);", 3, 9, "expected READ, CREATE or WRITE"),
            ("DEFINE SCHEMA\nRECORD TYPE A (\n  \"___createTime\" STRING\n);", 3, 19, "is TIMESTAMP"),
            ("DEFINE SCHEMA\nRECORD TYPE A (\n  \"___secret\" STRING\n);", 3, 3, "reserved"),
            ("DEFINE SCHEMA\nRECORD TYPE A (\n  x LIST<INT64\n);", 4, 1, "to close LIST<"),
            ("DEFINE SCHEMA\nRECORD TYPE A (\n  x STRING\n  y STRING\n);", 4, 3, "expected ',' or ')'"),
            ("DEFINE SCHEMA\nRECORD TYPE A (\n  \"open STRING\n);", 3, 3, "not closed"),
            ("DEFINE SCHEMA\nRECORD TYPE A (x ASSET) RECORD TYPE B ()", 2, 25, "expected ';'"),
            ("DEFINE SCHEMA\nRECORD TYPE A (\n  x ENCRYPTED ASSET\n);", 3, 15, "cannot be ENCRYPTED"),
            ("DEFINE SCHEMA\nRECORD TYPE A (\n  x NUMBER PREFERRED AS STRING\n);", 3, 25, "INT64 or DOUBLE"),
            ("DEFINE SCHEMA\nCREATE ROLE \"_world\";", 2, 13, "built in"),
            ("DEFINE SCHEMA\nRECORD TYPE 9lives ();", 2, 13, "must start with a letter"),
            ("DEFINE SCHEMA\nRECORD TYPE A (x STRING) ; @", 2, 28, "unexpected character"),
        ]
        for (text, line, column, message) in cases {
            XCTAssertThrowsError(try SchemaLanguage.parse(text), text) { error in
                guard let error = error as? SchemaLanguageError else { return XCTFail("\(error)") }
                XCTAssertEqual([error.line, error.column], [line, column], "\(text): \(error)")
                XCTAssertTrue(error.message.contains(message), "\(text): \(error)")
                XCTAssertEqual(error.stratusError.code, .badRequest)
                XCTAssertTrue(error.stratusError.reason.contains("line \(line), column \(column)"))
            }
        }
    }

    func testHostileFilesAreBounded() {
        var limits = SchemaLanguage.Limits()
        limits.maxBytes = 100
        XCTAssertThrowsError(try SchemaLanguage.parse("DEFINE SCHEMA " + String(repeating: " ", count: 100), limits: limits))
        limits = SchemaLanguage.Limits()
        limits.maxFields = 8
        let fields = (0..<3).map { "f\($0) STRING" }.joined(separator: ", ")
        XCTAssertThrowsError(try SchemaLanguage.parse("DEFINE SCHEMA RECORD TYPE A (\(fields));", limits: limits)) { error in
            XCTAssertTrue("\(error)".contains("more than 8 fields"), "\(error)")
        }
        let long = String(repeating: "a", count: 256)
        XCTAssertThrowsError(try SchemaLanguage.parse("DEFINE SCHEMA RECORD TYPE \(long) ();")) { error in
            XCTAssertTrue("\(error)".contains("the limit is 255"), "\(error)")
        }
    }

    func testDeployCheckListsEveryProblem() throws {
        let production = try SchemaLanguage.parse("""
            DEFINE SCHEMA
            RECORD TYPE Gone (a STRING);
            RECORD TYPE Item (a STRING QUERYABLE, b INT64, c STRING, d LIST<INT64>, e STRING);
            """)
        let development = try SchemaLanguage.parse("""
            DEFINE SCHEMA
            CREATE ROLE New;
            RECORD TYPE Item (a STRING, b DOUBLE, d INT64, e ENCRYPTED STRING, f STRING QUERYABLE, GRANT WRITE TO New);
            RECORD TYPE Added (x STRING);
            """)
        XCTAssertEqual(development.problems(replacing: production), [
            .deletedRecordType("Gone"),
            .changedType(recordType: "Item", field: "b", from: SchemaFieldType(.int64), to: SchemaFieldType(.double)),
            .deletedField(recordType: "Item", field: "c"),
            .changedType(recordType: "Item", field: "d", from: SchemaFieldType(.int64, isList: true), to: SchemaFieldType(.int64)),
            .changedType(recordType: "Item", field: "e", from: SchemaFieldType(.string), to: SchemaFieldType(.string, encrypted: true)),
        ])
        XCTAssertEqual(SchemaChangeProblem.deletedField(recordType: "Item", field: "c").description, "field c of record type Item would be deleted")
        // Adding types, fields, flags, roles and grants, or removing flags, is no problem.
        var grown = production
        grown.recordTypes[1].fields[0].indexes = []
        grown.recordTypes[1].fields.append(SchemaField(name: "z", type: SchemaFieldType(.location), indexes: [.queryable]))
        grown.recordTypes.append(RecordTypeSchema.created(name: "More"))
        grown.roles.append("R")
        XCTAssertEqual(grown.problems(replacing: production), [])
        XCTAssertEqual(production.problems(replacing: Schema()), [])
    }

    func testDeployCheckListsWhatADeployWouldAdd() throws {
        let production = try SchemaLanguage.parse("""
            DEFINE SCHEMA
            CREATE ROLE Old;
            RECORD TYPE Item (a STRING QUERYABLE, b INT64, GRANT READ TO "_world");
            """)
        let development = try SchemaLanguage.parse("""
            DEFINE SCHEMA
            CREATE ROLE New;
            CREATE ROLE Old;
            RECORD TYPE Added (x STRING);
            RECORD TYPE Item (a STRING QUERYABLE SORTABLE, b INT64, c DOUBLE, GRANT READ TO "_world", GRANT WRITE TO New);
            """)
        XCTAssertEqual(development.additions(to: production), [
            .role("New"),
            .recordType("Added"),
            .indexes(recordType: "Item", field: "a", from: [.queryable], to: [.queryable, .sortable]),
            .field(recordType: "Item", field: "c", type: SchemaFieldType(.double)),
            .grants(recordType: "Item"),
        ])
        XCTAssertEqual(SchemaAddition.indexes(recordType: "Item", field: "a", from: [], to: [.queryable]).description,
                       "field a of record type Item would change indexes from none to QUERYABLE")
        XCTAssertEqual(production.additions(to: production), [], "a schema adds nothing to itself")
    }

    func testDevelopmentSaveCreatesTypesAndFieldsWithDefaultFlags() throws {
        let created = try SchemaAdmission.admit(recordType: "Item", fields: [
            "title": .string("a"), "n": .int64(1), "at": .timestamp(0), "ref": .reference(Reference(recordName: "x", action: .none)),
            "data": .bytes(Data()), "tags": .list(.string, []), "where": .location(Location(latitude: 1, longitude: 2)),
        ], schema: nil, grows: true)
        let type = try XCTUnwrap(created.createdType)
        XCTAssertEqual(type.grants, RecordTypeSchema.defaultGrants)
        XCTAssertEqual(type.field(named: "___recordID")?.indexes, [])
        XCTAssertEqual(type.field(named: "title")?.indexes, [.queryable, .searchable, .sortable])
        XCTAssertEqual(type.field(named: "n")?.indexes, [.queryable, .sortable])
        XCTAssertEqual(type.field(named: "at")?.indexes, [.queryable, .sortable])
        XCTAssertEqual(type.field(named: "where")?.indexes, [.queryable, .sortable])
        XCTAssertEqual(type.field(named: "ref")?.indexes, [.queryable])
        XCTAssertEqual(type.field(named: "data")?.indexes, [])
        XCTAssertEqual(type.field(named: "tags")?.indexes, [.queryable, .searchable])
        XCTAssertEqual(type.field(named: "tags")?.type, SchemaFieldType(.string, isList: true))

        let grown = try SchemaAdmission.admit(recordType: "Item", fields: ["title": .string("b"), "extra": .double(1)], schema: type, grows: true)
        XCTAssertNil(grown.createdType)
        XCTAssertEqual(grown.createdFields, [SchemaField(name: "extra", type: SchemaFieldType(.double), indexes: [.queryable, .sortable])])
        XCTAssertFalse(try SchemaAdmission.admit(recordType: "Item", fields: ["title": .string("c")], schema: type, grows: true).changesSchema)
    }

    func testEncryptedFieldsTakeOnlySealedBytesNeverAPlainValue() throws {
        let type = try XCTUnwrap(SchemaLanguage.parse("""
            DEFINE SCHEMA RECORD TYPE Diary (body ENCRYPTED STRING, pin ENCRYPTED INT64, notes LIST<ENCRYPTED DOUBLE>, raw ENCRYPTED BYTES);
            """).recordType(named: "Diary"))
        for grows in [true, false] {
            let sealed = try SchemaAdmission.admit(recordType: "Diary", fields: [
                "body": .bytes(Data([0, 1])), "pin": .bytes(Data([2])), "notes": .list(.bytes, [.bytes(Data([3]))]), "raw": .bytes(Data()),
            ], schema: type, grows: grows)
            XCTAssertFalse(sealed.changesSchema)
            for (field, value): (String, FieldValue) in [("body", .string("plain text")), ("pin", .int64(1234)), ("notes", .list(.double, [.double(1)])),
                                                         ("notes", .list(.int64, [])), ("body", .list(.bytes, [])), ("pin", .double(1))] {
                XCTAssertThrowsError(try SchemaAdmission.admit(recordType: "Diary", fields: [field: value], schema: type, grows: grows), "\(field) \(value)") { error in
                    let reason = (error as? StratusError)?.reason ?? ""
                    XCTAssertTrue(reason.contains("field '\(field)'") && reason.contains("ENCRYPTED"), reason)
                }
            }
        }
    }

    func testValuesOfAnotherTypeAreRefusedNamingTheField() throws {
        let type = try XCTUnwrap(SchemaLanguage.parse("""
            DEFINE SCHEMA RECORD TYPE Item (n INT64, d DOUBLE, num NUMBER, ds LIST<DOUBLE>, s LIST<STRING>);
            """).recordType(named: "Item"))
        for grows in [true, false] {
            XCTAssertThrowsError(try SchemaAdmission.admit(recordType: "Item", fields: ["n": .string("7")], schema: type, grows: grows)) { error in
                XCTAssertEqual((error as? StratusError)?.code, .badRequest)
                XCTAssertEqual((error as? StratusError)?.reason, "invalid attempt to set value type STRING for field 'n' for type 'Item', defined to be: INT64")
            }
        }
        // What a client sends without `type` is read as the field's type where that is exact.
        let admitted = try SchemaAdmission.admit(recordType: "Item", fields: [
            "d": .int64(3), "num": .double(1.5), "ds": .list(.int64, [.int64(1)]), "s": .list(.string, []), "n": .int64(1),
        ], schema: type, grows: false)
        XCTAssertEqual(admitted.fields["d"], .double(3))
        XCTAssertEqual(admitted.fields["num"], .double(1.5))
        XCTAssertEqual(admitted.fields["ds"], .list(.double, [.double(1)]))
        XCTAssertEqual(admitted.fields["s"], .list(.string, []))
        XCTAssertThrowsError(try SchemaAdmission.admit(recordType: "Item", fields: ["s": .list(.int64, [.int64(1)])], schema: type, grows: true))
        XCTAssertThrowsError(try SchemaAdmission.admit(recordType: "Item", fields: ["___etag": .string("x")], schema: nil, grows: true))
    }

    func testProductionRefusesUnknownTypesAndFieldsAsCloudKitDoes() throws {
        XCTAssertThrowsError(try SchemaAdmission.admit(recordType: "Nope", fields: [:], schema: nil, grows: false)) { error in
            XCTAssertEqual((error as? StratusError)?.reason, "Cannot create new type Nope in production schema")
        }
        XCTAssertThrowsError(try SchemaAdmission.admit(recordType: "Item", fields: ["x": .int64(1)], schema: RecordTypeSchema.created(name: "Item"), grows: false)) { error in
            XCTAssertEqual((error as? StratusError)?.code, .badRequest)
            XCTAssertEqual((error as? StratusError)?.reason, "Cannot create or modify field 'x' in record type 'Item' in production schema")
        }
    }

    func testSchemaIndexPolicyRefusesQueriesNamingTheFlag() throws {
        let schema = try SchemaLanguage.parse("""
            DEFINE SCHEMA RECORD TYPE Item ("___recordID" REFERENCE QUERYABLE, title STRING QUERYABLE, body STRING SEARCHABLE, n INT64 SORTABLE);
            """)
        let policy = schema.indexPolicy
        func query(_ text: String) throws -> RecordQuery { try RecordQuery.parse(JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))) }
        XCTAssertNoThrow(try policy.check(query(#"{"recordType":"Item","filterBy":[{"comparator":"EQUALS","fieldName":"title","fieldValue":{"value":"a"}},{"comparator":"CONTAINS_ALL_TOKENS","fieldName":"body","fieldValue":{"value":"a"}},{"comparator":"EQUALS","fieldName":"___recordID","fieldValue":{"value":{"recordName":"a"}}}],"sortBy":[{"fieldName":"n"}]}"#)))
        for (text, field, flag) in [
            (#"{"recordType":"Item","filterBy":[{"comparator":"EQUALS","fieldName":"body","fieldValue":{"value":"a"}}]}"#, "body", "queryable"),
            (#"{"recordType":"Item","filterBy":[{"comparator":"CONTAINS_ANY_TOKENS","fieldName":"title","fieldValue":{"value":"a"}}]}"#, "title", "searchable"),
            (#"{"recordType":"Item","sortBy":[{"fieldName":"title"}]}"#, "title", "sortable"),
            (#"{"recordType":"Item","sortBy":[{"fieldName":"___createTime"}]}"#, "___createTime", "sortable"),
            (#"{"recordType":"Item","filterBy":[{"comparator":"EQUALS","fieldName":"missing","fieldValue":{"value":1}}]}"#, "missing", "queryable"),
        ] {
            XCTAssertThrowsError(try policy.check(query(text)), text) { error in
                XCTAssertEqual((error as? StratusError)?.code, .badRequest)
                XCTAssertTrue((error as? StratusError)?.reason.hasPrefix("Field '\(field)' is not marked \(flag)") == true, "\(error)")
                XCTAssertTrue((error as? StratusError)?.reason.contains(flag.uppercased()) == true, "\(error)")
            }
        }
    }

    func testSecurityRolesGrantByRoleAndWriteIncludesRead() throws {
        let schema = try SchemaLanguage.parse("""
            DEFINE SCHEMA
            CREATE ROLE Moderator;
            RECORD TYPE Post (text STRING, GRANT WRITE TO "_creator", GRANT CREATE TO "_icloud", GRANT READ TO "_world", GRANT WRITE TO Moderator);
            RECORD TYPE Notice (text STRING, GRANT READ TO "_world", GRANT CREATE, WRITE TO Moderator);
            """)
        let post = try XCTUnwrap(schema.recordType(named: "Post")), notice = try XCTUnwrap(schema.recordType(named: "Notice"))
        let alice = RoleHolder(userRecordName: "_alice"), bob = RoleHolder(userRecordName: "_bob")
        let moderator = RoleHolder(userRecordName: "_mod", roles: ["Moderator"]), anonymous = RoleHolder(userRecordName: nil)
        XCTAssertTrue(post.permits(.create, to: alice, creator: nil))
        XCTAssertFalse(post.permits(.create, to: anonymous, creator: nil))
        XCTAssertTrue(post.permits(.write, to: alice, creator: "_alice"))
        XCTAssertTrue(post.permits(.read, to: alice, creator: "_alice"))
        XCTAssertFalse(post.permits(.write, to: bob, creator: "_alice"), "another user may not write by default")
        XCTAssertTrue(post.permits(.write, to: moderator, creator: "_alice"), "a custom role's grant allows it")
        XCTAssertTrue(post.permits(.read, to: anonymous, creator: "_alice"), "_world reads")
        XCTAssertFalse(notice.permits(.create, to: alice, creator: nil))
        XCTAssertTrue(notice.permits(.create, to: moderator, creator: nil))
        XCTAssertFalse(notice.permits(.write, to: alice, creator: "_alice"), "no grant to _creator: even the creator may not write")
        XCTAssertFalse(RecordTypeSchema(name: "Closed").permits(.read, to: alice, creator: "_alice"))
        XCTAssertTrue(post.grantsCustomRoles)
        XCTAssertFalse(RecordTypeSchema.created(name: "New").grantsCustomRoles)
        XCTAssertEqual(RecordTypeSchema.created(name: "New").permits(.write, to: bob, creator: "_alice"), false)
    }

    func testARecordTypeGrowsToABoundedNumberOfFields() throws {
        let fields = Dictionary(uniqueKeysWithValues: (0..<3).map { ("f\($0)", FieldValue.int64(1)) })
        XCTAssertThrowsError(try SchemaAdmission.admit(recordType: "Wide", fields: fields, schema: nil, grows: true, maxFields: 8)) { error in
            XCTAssertEqual((error as? StratusError)?.code, .limitExceeded)
            XCTAssertTrue((error as? StratusError)?.reason.contains("the limit is 8") == true, "\(error)")
        }
        let type = try XCTUnwrap(SchemaAdmission.admit(recordType: "Wide", fields: ["a": .int64(1)], schema: nil, grows: true, maxFields: 8).createdType)
        XCTAssertEqual(type.fields.count, 7)
        XCTAssertNoThrow(try SchemaAdmission.admit(recordType: "Wide", fields: ["b": .int64(1)], schema: type, grows: true, maxFields: 8))
        XCTAssertThrowsError(try SchemaAdmission.admit(recordType: "Wide", fields: ["b": .int64(1), "c": .int64(1)], schema: type, grows: true, maxFields: 8))
        // A type at its limit still takes saves of the fields it has.
        XCTAssertNoThrow(try SchemaAdmission.admit(recordType: "Wide", fields: ["a": .int64(2)], schema: type, grows: true, maxFields: 7))
    }

    /// A record type's stored grants read as `JSONDecoder` reads them: the stored form (as jsonb
    /// writes it back, members reordered and spaced) directly, any other form through the decoder.
    func testStoredGrantsReadAsTheDecoderReadsThem() throws {
        let decoder = EventCoding.decoder
        let forms = [
            #"[]"#,
            #"[{"role": "_world", "permissions": 1}]"#,
            #"[{"permissions":7,"role":"_creator"},{"role": "é \"x\"", "permissions": 0}]"#,
            #"[{"role": "_icloud", "permissions": 3, "extra": true}]"#,
            #"[{"role": "_icloud", "permissions": 3.0}]"#,
            #"[{"role": "_icloud"}]"#,
            #"[{"role": 1, "permissions": 1}]"#,
            #"[{"role": "a", "permissions": 99999999999999999999}]"#,
            #"{"role": "a", "permissions": 1}"#,
            #"[1]"#,
            #"not json"#,
        ]
        for text in forms {
            let expected = Result { try decoder.decode([SchemaGrant].self, from: Data(text.utf8)) }
            let read = Result { try SchemaGrant.list(json: text) }
            switch (expected, read) {
            case (.success(let a), .success(let b)): XCTAssertEqual(a, b, text)
            case (.failure, .failure): break
            default: XCTFail("\(text): the decoder says \(expected), the reader \(read)")
            }
        }
        XCTAssertEqual(try SchemaGrant.list(json: #"[{"role": "_world", "permissions": 5}]"#), [SchemaGrant([.read, .write], to: "_world")])
    }
}
