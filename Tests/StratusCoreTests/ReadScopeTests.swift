import StratusCore
import XCTest

/// Which records of a public-database record type a caller reads, from the type's grants.
final class ReadScopeTests: XCTestCase {
    func testReadScopes() {
        let creatorOnly = RecordTypeSchema(name: "T", grants: [SchemaGrant([.write], to: "_creator"), SchemaGrant([.read], to: "R")])
        XCTAssertEqual(creatorOnly.readScope(for: RoleHolder(userRecordName: "_a")), .own)
        XCTAssertEqual(creatorOnly.readScope(for: RoleHolder(userRecordName: "_a", roles: ["R"])), .all)
        XCTAssertEqual(creatorOnly.readScope(for: RoleHolder(userRecordName: nil)), .none)
        let signedIn = RecordTypeSchema(name: "T", grants: [SchemaGrant([.read], to: "_icloud")])
        XCTAssertEqual(signedIn.readScope(for: RoleHolder(userRecordName: "_a")), .all)
        XCTAssertEqual(signedIn.readScope(for: RoleHolder(userRecordName: nil)), .none)
        let createOnly = RecordTypeSchema(name: "T", grants: [SchemaGrant([.create], to: "_icloud"), SchemaGrant([.create], to: "_creator")])
        XCTAssertEqual(createOnly.readScope(for: RoleHolder(userRecordName: "_a")), .none, "CREATE is not READ")
        let defaults = RecordTypeSchema(name: "T", grants: RecordTypeSchema.defaultGrants)
        XCTAssertEqual(defaults.readScope(for: RoleHolder(userRecordName: nil)), .all)
    }

    func testPublicReadGrantsDecidePerRecordWithDefaultsForUnknownTypes() {
        let diary = RecordTypeSchema(name: "Diary", grants: [SchemaGrant([.write], to: "_creator")])
        let grants = PublicReadGrants(types: ["Diary": diary], holder: RoleHolder(userRecordName: "_bob"))
        func record(_ type: String, by creator: String) -> Record {
            let stamp = RecordStamp(timestamp: 0, userRecordName: creator, deviceID: nil)
            return Record(recordName: "r", recordType: type, fields: [:], changeTag: "t", created: stamp, modified: stamp)
        }
        XCTAssertTrue(grants.mayRead(record("Diary", by: "_bob")))
        XCTAssertFalse(grants.mayRead(record("Diary", by: "_alice")))
        XCTAssertTrue(grants.mayRead(record("Unknown", by: "_alice")), "a type the schema lacks: world read")
    }
}
