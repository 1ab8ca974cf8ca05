import Foundation
import Crypto
import StratusCore
import XCTest

/// An export archive's pure parts: the tar framing written and read back in chunks of any size,
/// what a hostile or damaged archive is refused for, the manifest's check, lines and user mappings.
final class ArchiveTests: XCTestCase {
    /// An archive of `files` (path, bytes), the manifest last, as an export writes it.
    static func archive(_ files: [(String, [UInt8])], manifestFiles: [ArchiveFile]? = nil) -> (bytes: [UInt8], listed: [ArchiveFile]) {
        var bytes: [UInt8] = []
        var listed: [ArchiveFile] = []
        for (path, data) in files {
            bytes += ArchiveTar.header(path: path, size: Int64(data.count)) + data + [UInt8](repeating: 0, count: ArchiveTar.padding(Int64(data.count)))
            listed.append(ArchiveFile(path: path, size: Int64(data.count), sha256: ArchiveFile.hex(SHA256.hash(data: data))))
        }
        let manifest = ArchiveManifest(container: "iCloud.com.example.notes", user: nil, createdAt: 1, files: manifestFiles ?? listed).json.serialized()
        bytes += ArchiveTar.header(path: ArchiveLayout.manifest, size: Int64(manifest.count)) + manifest
            + [UInt8](repeating: 0, count: ArchiveTar.padding(Int64(manifest.count))) + ArchiveTar.end
        return (bytes, listed)
    }

    /// Reads an archive fed in chunks of `size`: each file's path and bytes, in order.
    static func read(_ bytes: [UInt8], chunk size: Int) throws -> [(String, [UInt8])] {
        var reader = ArchiveTarReader()
        var files: [(String, [UInt8])] = []
        var index = 0
        while index < bytes.count {
            let end = min(index + size, bytes.count)
            for event in try reader.feed(bytes[index..<end]) {
                switch event {
                case .file(let header, _): files.append((header.path, []))
                case .data(let data): files[files.count - 1].1 += data
                case .fileEnd, .end: break
                }
            }
            index = end
        }
        try reader.finish()
        return files
    }

    func refusal(_ body: () throws -> Void, contains text: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try body(), file: file, line: line) { error in
            let error = error as? StratusError
            XCTAssertEqual(error?.code, .badRequest, file: file, line: line)
            XCTAssertTrue(error?.reason.hasPrefix("Archive refused, nothing was loaded: ") ?? false, "\(String(describing: error))", file: file, line: line)
            XCTAssertTrue(error?.reason.contains(text) ?? false, "\(String(describing: error)) lacks '\(text)'", file: file, line: line)
        }
    }

    func testFilesReadBackInChunksOfAnySize() throws {
        let files: [(String, [UInt8])] = [
            ("schema/development.ckdb", Array("DEFINE SCHEMA\n".utf8)), ("assets/empty", []), ("records/000001-000001.jsonl", Array(repeating: 65, count: 1_500)),
            ("users/000001.jsonl", Array(repeating: 10, count: 512)),
        ]
        let (bytes, _) = Self.archive(files)
        XCTAssertEqual(bytes.count % ArchiveTar.blockSize, 0)
        for size in [1, 7, 511, 512, 513, 4_096, bytes.count] {
            let read = try Self.read(bytes, chunk: size)
            XCTAssertEqual(read.map(\.0), files.map(\.0) + [ArchiveLayout.manifest], "chunks of \(size)")
            XCTAssertEqual(Array(read.map(\.1).prefix(files.count)), files.map(\.1), "chunks of \(size)")
        }
        // A header as the standard tar format has it: the name, octal size, ustar magic, a valid checksum.
        let header = ArchiveTar.header(path: "zones/000001.jsonl", size: 1_500)
        XCTAssertEqual(String(decoding: header[124..<135], as: UTF8.self), "00000002734")
        XCTAssertEqual(try ArchiveTar.read(header), ArchiveTar.Header(path: "zones/000001.jsonl", size: 1_500))
    }

    func testADamagedOrHostileArchiveIsRefused() throws {
        let (bytes, _) = Self.archive([("users/000001.jsonl", Array("{}\n".utf8))])
        var flipped = bytes
        flipped[3] ^= 1
        refusal({ _ = try Self.read(flipped, chunk: 100) }, contains: "checksum is wrong")
        refusal({ _ = try Self.read(Array(bytes.prefix(700)), chunk: 100) }, contains: "truncated")
        refusal({ _ = try Self.read(Array(bytes.prefix(bytes.count - 1_024)), chunk: 100) }, contains: "truncated")
        refusal({ _ = try Self.read(bytes + [1], chunk: 100) }, contains: "follows the archive's end")
        for path in ["../etc/passwd", "/etc/passwd", "assets/../../x", "a//b", "./x", "assets/a b", "a/b/c/d/e", String(repeating: "a", count: 101)] {
            refusal({ try ArchivePath.check(path) }, contains: "outside its own layout")
        }
        // A header naming `../x` with a correct checksum is refused when read.
        var hostile = ArchiveTar.header(path: "x", size: 0)
        hostile.replaceSubrange(0..<4, with: Array("../x".utf8))
        hostile = ArchiveTar.sealed(hostile)
        refusal({ _ = try ArchiveTar.read(hostile) }, contains: "outside its own layout")
        // A link, a directory or an extended header; a size in base-256.
        for (offset, byte) in [(156, UInt8(ascii: "2")), (156, UInt8(ascii: "5")), (156, UInt8(ascii: "x")), (124, UInt8(0x80))] {
            var block = ArchiveTar.header(path: "assets/x", size: 10)
            block[offset] = byte
            block = ArchiveTar.sealed(block)
            XCTAssertThrowsError(try ArchiveTar.read(block), "byte \(byte) at \(offset)")
        }
        var prefixed = ArchiveTar.header(path: "x", size: 0)
        prefixed[345] = UInt8(ascii: "a")
        prefixed = ArchiveTar.sealed(prefixed)
        refusal({ _ = try ArchiveTar.read(prefixed) }, contains: "prefix")
    }

    func testTheManifestHoldsTheArchiveToEveryByte() throws {
        let (bytes, listed) = Self.archive([("users/000001.jsonl", Array("{}\n".utf8)), ("assets/a", [1, 2, 3])])
        let read = try Self.read(bytes, chunk: 512)
        let manifest = try ArchiveManifest(read.last!.1)
        XCTAssertEqual(manifest.files, listed)
        XCTAssertEqual(manifest.container, "iCloud.com.example.notes")
        XCTAssertNoThrow(try manifest.verify(listed))
        var damaged = listed
        damaged[1].sha256 = String(repeating: "0", count: 64)
        refusal({ try manifest.verify(damaged) }, contains: "checksum of 'assets/a' does not match")
        refusal({ try manifest.verify(Array(listed.prefix(1))) }, contains: "'assets/a' is in the manifest but not in the archive")
        refusal({ try manifest.verify(listed + [ArchiveFile(path: "assets/b", size: 0, sha256: listed[0].sha256)]) }, contains: "does not list")
        refusal({ try manifest.verify(listed + [listed[0]]) }, contains: "twice")
        var resized = listed
        resized[0].size = 4
        refusal({ try manifest.verify(resized) }, contains: "has 4 bytes; the manifest says 3")
        refusal({ _ = try ArchiveManifest(Array("{\"format\": \"other\"}".utf8)) }, contains: "not a Stratus export")
        refusal({ _ = try ArchiveManifest(Array("[".utf8)) }, contains: "not JSON")
        let twice = ArchiveManifest(container: "c", user: nil, createdAt: 1, files: [listed[0], listed[0]]).json.serialized()
        refusal({ _ = try ArchiveManifest(twice) }, contains: "twice")
        let escaping = ArchiveManifest(container: "c", user: nil, createdAt: 1, files: [ArchiveFile(path: "../x", size: 1, sha256: listed[0].sha256)])
        refusal({ _ = try ArchiveManifest(escaping.json.serialized()) }, contains: "outside its own layout")
        var limits = ArchiveLimits()
        limits.maxFiles = 1
        refusal({ _ = try ArchiveManifest(manifest.json.serialized(), limits: limits) }, contains: "more than 1")
    }

    func testLinesAreBoundedAndChecked() throws {
        var splitter = ArchiveLineSplitter(file: "zones/000001.jsonl", maxLineBytes: 8)
        let first = try splitter.feed(Array("ab\n\ncd".utf8))
        let second = try splitter.feed(Array("e\n".utf8))
        XCTAssertEqual(first, [Array("ab".utf8)])
        XCTAssertEqual(second, [Array("cde".utf8)])
        XCTAssertNoThrow(try splitter.finish())
        refusal({ _ = try splitter.feed(Array("123456789".utf8)) }, contains: "longer than 8 bytes")
        var cut = ArchiveLineSplitter(file: "zones/000001.jsonl", maxLineBytes: 8)
        _ = try cut.feed(Array("{\"a\"".utf8))
        refusal({ try cut.finish() }, contains: "ends inside a line")

        let zone = ArchiveZone(
            environment: .production, scope: .private, owner: "_alice", zoneName: "Notes", defaultTimeToLive: 60, records: ["records/000001-000001.jsonl"])
        XCTAssertEqual(try ArchiveZone(zone.json), zone)
        var json = zone.json
        for (key, value, text) in [("database", JSONValue.string("shared"), "not private or public"), ("records", .array([.string("../x")]), "outside"),
                                   ("zoneName", .string("_hidden"), "reserved"), ("defaultTimeToLive", .int(0), "defaultTimeToLive"),
                                   ("owner", .string(""), "owner")] {
            guard case .object(var members) = json else { return XCTFail() }
            members[key] = value
            refusal({ _ = try ArchiveZone(.object(members)) }, contains: text)
        }
        guard case .object(var members) = json else { return XCTFail() }
        members["database"] = .string("public")
        json = .object(members)
        refusal({ _ = try ArchiveZone(json) }, contains: "only its default zone")

        let mapping = ArchiveUserMapping(["_alice": "_ann"])
        let ownDatabase = zone.database(in: "iCloud.copy", mapping: mapping)
        XCTAssertEqual(ownDatabase, DatabaseID(container: "iCloud.copy", environment: .production, scope: .private, owner: "_ann"))
        XCTAssertEqual(zone.writer(ofRecordCreatedBy: "_bob", in: ownDatabase), "_ann", "a private database's records are its owner's")
        XCTAssertNil(zone.exportedCreator(user: "_alice"), "a user's export holds every record of their private database")
        let publicZone = ArchiveZone(environment: .development, scope: .public, owner: "_public", zoneName: "_defaultZone", defaultTimeToLive: nil, records: [])
        let publicDatabase = publicZone.database(in: "iCloud.copy", mapping: mapping)
        XCTAssertEqual(publicDatabase.owner, DatabaseID.publicOwner)
        XCTAssertEqual(publicZone.writer(ofRecordCreatedBy: "_bob", in: publicDatabase), "_bob", "a public record is saved as its creator")
        XCTAssertEqual(publicZone.exportedCreator(user: "_alice"), "_alice", "only the public records the user created")
        XCTAssertNil(publicZone.exportedCreator(user: nil))

        let user = ArchiveUser(userRecordName: "_alice", login: "alice", emailAddress: "alice@example.com", givenName: nil, familyName: nil, discoverable: true)
        XCTAssertEqual(try ArchiveUser(user.json), user)
        let subscription = ArchiveSubscription(environment: .development, scope: .public, owner: "_public", subscriber: "_alice", definition: .object([:]))
        XCTAssertEqual(try ArchiveSubscription(subscription.json), subscription)
        refusal({ _ = try ArchiveSubscription(.object(["environment": .string("development")])) }, contains: "no subscription")
    }

    func testUserMappings() throws {
        let mapping = try ArchiveUserMapping(pairs: ["_a=_b", "_c=_d"])
        XCTAssertEqual([mapping("_a"), mapping("_c"), mapping("_e")], ["_b", "_d", "_e"])
        for bad in [["_a"], ["=_b"], ["_a="], ["_a=_b", "_a=_c"], ["_a=_x", "_b=_x"]] {
            XCTAssertThrowsError(try ArchiveUserMapping(pairs: bad), "\(bad)") { XCTAssertEqual(($0 as? StratusError)?.code, .badRequest) }
        }
        XCTAssertEqual(ArchiveLayout.records(zone: 12, part: 3), "records/000012-000003.jsonl")
        XCTAssertEqual(ArchiveFile.hex([0x00, 0x0f, 0xa5, 0xff]), "000fa5ff")
        XCTAssertEqual(ArchiveFile.bytes(hex: "000fa5ff"), [0x00, 0x0f, 0xa5, 0xff])
        XCTAssertNil(ArchiveFile.bytes(hex: "0g"))
        XCTAssertEqual(ArchiveLayout.parts(ArchiveLayout.zones, in: ["zones/000002.jsonl", "users/000001.jsonl", "zones/000001.jsonl"]),
                       ["zones/000001.jsonl", "zones/000002.jsonl"])
    }

    /// A record an earlier run of an import loaded is recognised as it is, and only then: an
    /// asset by its size and the checksum the import stores the archive's bytes with.
    func testARecordLoadedBeforeIsRecognisedAndOnlyThen() {
        let archivedReceipt = UUID().uuidString.lowercased(), storedReceipt = UUID().uuidString.lowercased()
        let checksum = AssetValue.fileChecksum(Array(repeating: 7, count: 32))
        let archivedAsset = FieldValue.asset(AssetValue(receipt: archivedReceipt, size: 5, fileChecksum: "from the source").json)
        let storedAsset = FieldValue.asset(AssetValue(receipt: storedReceipt, size: 5, fileChecksum: checksum).json)
        let input = RecordInput(
            recordName: "photo", recordType: "Photo", fields: ["title": .string("a"), "image": archivedAsset, "more": .list(.asset, [archivedAsset])],
            parent: .some("album"), expirationDate: .some(1_000))
        let stamp = RecordStamp(timestamp: 1, userRecordName: "_alice", deviceID: nil)
        let existing = Record(
            recordName: "photo", recordType: "Photo", fields: ["title": .string("a"), "image": storedAsset, "more": .list(.asset, [storedAsset])],
            changeTag: "t", created: stamp, modified: stamp, parent: "album", expirationDate: 1_000)
        let lookup: (String) -> String? = { $0 == archivedReceipt ? checksum : nil }
        XCTAssertTrue(ArchiveResume.isLoaded(input, creator: "_alice", existing: existing, checksum: lookup))
        XCTAssertFalse(ArchiveResume.isLoaded(input, creator: "_bob", existing: existing, checksum: lookup), "another creator")
        var changed = existing
        changed.fields["title"] = .string("b")
        XCTAssertFalse(ArchiveResume.isLoaded(input, creator: "_alice", existing: changed, checksum: lookup), "another value")
        changed = existing
        changed.fields["extra"] = .int64(1)
        XCTAssertFalse(ArchiveResume.isLoaded(input, creator: "_alice", existing: changed, checksum: lookup), "a field more")
        changed = existing
        changed.fields["image"] = .asset(AssetValue(receipt: storedReceipt, size: 5, fileChecksum: "other bytes").json)
        XCTAssertFalse(ArchiveResume.isLoaded(input, creator: "_alice", existing: changed, checksum: lookup), "other bytes")
        changed = existing
        changed.parent = nil
        XCTAssertFalse(ArchiveResume.isLoaded(input, creator: "_alice", existing: changed, checksum: lookup), "another parent")
        changed = existing
        changed.expirationDate = 2_000
        XCTAssertFalse(ArchiveResume.isLoaded(input, creator: "_alice", existing: changed, checksum: lookup), "another expiration")
        XCTAssertFalse(ArchiveResume.isLoaded(input, creator: "_alice", existing: existing, checksum: { _ in nil }), "an asset the archive lacks")
        XCTAssertFalse(ArchiveResume.pauses(records: 2, pauseAfterRecords: 3))
        XCTAssertTrue(ArchiveResume.pauses(records: 4, pauseAfterRecords: 3))
        XCTAssertFalse(ArchiveResume.pauses(records: 4, pauseAfterRecords: nil))
    }
}
