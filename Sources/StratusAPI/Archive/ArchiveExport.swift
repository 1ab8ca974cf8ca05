import Crypto
import Foundation
import Logging
import NIOCore
import StratusBlobStore
import StratusCore
import StratusPostgres
import _NIOFileSystem

/// Where an archive's bytes go as they are made, in order: a file, or a response's body.
public protocol ArchiveOutput {
    mutating func write(_ bytes: [UInt8]) async throws
}

/// Writes an archive's files as tar to an output, keeping each one's size and SHA-256 for the
/// manifest. Used by one task at a time (an export's).
final class ArchiveWriter<Output: ArchiveOutput> {
    private(set) var output: Output
    private var buffer: [UInt8] = []
    private(set) var files: [ArchiveFile] = []

    init(output: Output) { self.output = output }

    private func emit(_ bytes: some Collection<UInt8>) async throws {
        buffer.append(contentsOf: bytes)
        if buffer.count >= 1 << 16 { try await flush() }
    }

    private func flush() async throws {
        guard !buffer.isEmpty else { return }
        let out = buffer
        buffer.removeAll(keepingCapacity: true)
        try await output.write(out)
    }

    /// A file whose bytes are at hand.
    func file(_ path: String, _ bytes: [UInt8]) async throws {
        try await file(path, size: Int64(bytes.count)) { write in try await write(bytes) }
    }

    /// A file of `size` bytes, which `body` hands over in order; it must hand over exactly that many.
    func file(_ path: String, size: Int64, _ body: (_ write: ([UInt8]) async throws -> Void) async throws -> Void) async throws {
        try await emit(ArchiveTar.header(path: path, size: size))
        var hash = SHA256()
        var count: Int64 = 0
        try await body { chunk in
            count += Int64(chunk.count)
            guard count <= size else { throw ArchiveExport.Failure("'\(path)' has more bytes than its \(size)") }
            hash.update(data: chunk)
            try await self.emit(chunk)
        }
        guard count == size else { throw ArchiveExport.Failure("'\(path)' has \(count) bytes, not the \(size) its record says") }
        try await emit([UInt8](repeating: 0, count: ArchiveTar.padding(size)))
        files.append(ArchiveFile(path: path, size: size, sha256: ArchiveFile.hex(hash.finalize())))
    }

    /// The manifest, last, and the archive's end.
    func finish(_ manifest: ArchiveManifest) async throws {
        let bytes = manifest.json.serialized()
        try await emit(ArchiveTar.header(path: ArchiveLayout.manifest, size: Int64(bytes.count)))
        try await emit(bytes)
        try await emit([UInt8](repeating: 0, count: ArchiveTar.padding(Int64(bytes.count))))
        try await emit(ArchiveTar.end)
        try await flush()
    }
}

/// JSON lines of one kind, written as parts of at most `ArchiveLayout.partBytes` (plus a line).
final class ArchiveLinesWriter {
    private let name: (Int) -> String
    private var buffer: [UInt8] = []
    private(set) var paths: [String] = []

    init(_ name: @escaping (Int) -> String) { self.name = name }

    func append<Output>(_ line: JSONValue, to writer: ArchiveWriter<Output>) async throws {
        line.write(into: &buffer)
        buffer.append(UInt8(ascii: "\n"))
        if buffer.count >= ArchiveLayout.partBytes { try await close(writer) }
    }

    /// Writes what is buffered as a part.
    func close<Output>(_ writer: ArchiveWriter<Output>) async throws {
        guard !buffer.isEmpty else { return }
        let path = name(paths.count + 1)
        try await writer.file(path, buffer)
        paths.append(path)
        buffer.removeAll(keepingCapacity: true)
    }
}

/// `stratus export` and a user's own export (docs/operations.md, "Exporting and importing"): a
/// container's (or one user's) schema, users, zones, records in CloudKit's wire form, asset bytes,
/// shares (share records, with their participants) and subscriptions, as a tar archive with a
/// manifest of checksums, read from the current tables a page at a time and written as it goes.
public struct ArchiveExport: Sendable {
    let store: PostgresStore
    let blobs: any BlobStore
    /// A test-only pause once that many records are written (`ArchiveResume.pauses`).
    let pauseAfterRecords: Int?
    /// Records read per page.
    static let page = 200

    /// An export that reads `store` and the asset bytes of `blobs`.
    public init(store: PostgresStore, blobs: any BlobStore, pauseAfterRecords: Int? = nil) {
        self.store = store
        self.blobs = blobs
        self.pauseAfterRecords = pauseAfterRecords
    }

    /// What an export wrote.
    public struct Summary: Sendable, Hashable {
        public var users = 0
        public var zones = 0
        public var records = 0
        public var assets = 0
        public var subscriptions = 0
        /// Files in the archive besides the manifest.
        public var files = 0

        /// One line for an operator.
        public var line: String {
            "\(users) users, \(zones) zones, \(records) records, \(assets) assets, \(subscriptions) subscriptions, \(files) files"
        }
    }

    /// An export that cannot go on (the data does not agree with itself); for the operator's log.
    struct Failure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = "export: \(description)" }
    }

    /// Exports the container, or only `user`'s data in it: their private database's zones, the
    /// public records they created, and the subscriptions they made. NOT_FOUND for an unknown
    /// container or user.
    public func run<Output: ArchiveOutput>(
        container: String, user: String?, createdAt: Int64, logger: Logger, to output: inout Output
    ) async throws -> Summary {
        let archive = ArchiveStore(store: store)
        guard try await archive.containerExists(container, logger: logger) else {
            throw StratusError(.notFound, "no container '\(ClientText.excerpt(container))'")
        }
        if let user, try await archive.users(container: container, user: user, after: "", limit: 1, logger: logger).isEmpty {
            throw StratusError(.notFound, "the container has no user '\(ClientText.excerpt(user))'")
        }
        let writer = ArchiveWriter(output: output)
        defer { output = writer.output }
        var summary = Summary()
        let schemas = SchemaStore(store: store)
        for environment in Environment.allCases {
            let schema = try await schemas.schema(container: container, environment: environment, logger: logger)
            try await writer.file(ArchiveLayout.schema(environment), Array(SchemaLanguage.print(schema).utf8))
        }

        let users = ArchiveLinesWriter { ArchiveLayout.part(ArchiveLayout.users, $0) }
        var afterUser = ""
        while true {
            let page = try await archive.users(container: container, user: user, after: afterUser, limit: Self.page, logger: logger)
            guard let last = page.last else { break }
            for found in page { try await users.append(found.json, to: writer) }
            summary.users += page.count
            afterUser = last.userRecordName
        }
        try await users.close(writer)

        let zones = ArchiveLinesWriter { ArchiveLayout.part(ArchiveLayout.zones, $0) }
        var afterZone = ArchiveStore.ZonePosition()
        while true {
            let page = try await archive.zones(container: container, user: user, after: afterZone, limit: Self.page, logger: logger)
            guard let last = page.last else { break }
            for var zone in page {
                summary.zones += 1
                zone.records = try await records(of: zone, index: summary.zones, container: container, user: user, writer: writer, summary: &summary, logger: logger)
                try await zones.append(zone.json, to: writer)
            }
            afterZone = ArchiveStore.ZonePosition(last)
        }
        try await zones.close(writer)

        let subscriptions = ArchiveLinesWriter { ArchiveLayout.part(ArchiveLayout.subscriptions, $0) }
        var afterSubscription = ArchiveStore.SubscriptionPosition()
        while true {
            let page = try await archive.subscriptions(container: container, user: user, after: &afterSubscription, limit: Self.page, logger: logger)
            guard !page.isEmpty else { break }
            for found in page { try await subscriptions.append(found.json, to: writer) }
            summary.subscriptions += page.count
        }
        try await subscriptions.close(writer)

        summary.files = writer.files.count
        try await writer.finish(ArchiveManifest(container: container, user: user, createdAt: createdAt, files: writer.files))
        return summary
    }

    /// Writes a zone's records (a page at a time) and their assets; returns the records' parts.
    private func records<Output>(
        of zone: ArchiveZone, index: Int, container: String, user: String?, writer: ArchiveWriter<Output>, summary: inout Summary, logger: Logger
    ) async throws -> [String] {
        let database = zone.database(in: container, mapping: ArchiveUserMapping())
        let zoneID = ZoneID(zoneName: zone.zoneName, ownerRecordName: database.owner)
        let createdBy = zone.exportedCreator(user: user)
        let lines = ArchiveLinesWriter { ArchiveLayout.records(zone: index, part: $0) }
        let records = RecordStore(store: store)
        let assets = AssetStore(store: store)
        var after = ""
        while true {
            let names = try await ArchiveStore(store: store).recordNames(
                zone: zoneID, in: database, createdBy: createdBy, after: after, limit: Self.page, logger: logger)
            guard let last = names.last else { break }
            let found = try await records.lookup(names, zone: zoneID, in: database, logger: logger)
            for name in names {
                // Deleted or expired since the names were read: not exported.
                guard let record = found[ExactName(name)] else { continue }
                let stored = try await assets.find(Array(record.assetIDs), logger: logger)
                for id in record.assetIDs.sorted(by: { $0.uuidString < $1.uuidString }) {
                    guard let asset = stored[id], let value = asset.value, let key = BlobKey(AssetValue.receipt(asset.blobID)) else {
                        throw Failure("record '\(name)' holds an asset that is not stored")
                    }
                    try await writer.file(ArchiveLayout.asset(value.receipt), size: value.size) { write in
                        guard value.size > 0 else { return }
                        try await blobs.read(key: key, range: 0..<value.size, logger: logger) { buffer in
                            try await write(Array(buffer.readableBytesView))
                        }
                    }
                    summary.assets += 1
                }
                try await lines.append(RecordWire.dictionary(record, zone: zoneID, desiredKeys: nil, numbersAsStrings: false, links: nil), to: writer)
                summary.records += 1
                if ArchiveResume.pauses(records: summary.records, pauseAfterRecords: pauseAfterRecords) {
                    logger.warning("export paused (a test setting)", metadata: ["records": "\(summary.records)"])
                    while true { try await Task.sleep(for: .seconds(3600)) }
                }
            }
            after = last
        }
        try await lines.close(writer)
        return lines.paths
    }
}

extension ArchiveExport {
    /// Exports into a file. The file appears only once the archive is complete (the file system's
    /// new-file write): an export that stops leaves no archive, and run again it starts over.
    public func run(container: String, user: String?, file path: String, createdAt: Int64, logger: Logger) async throws -> Summary {
        try await FileSystem.shared.withFileHandle(forWritingAt: FilePath(path), options: .newFile(replaceExisting: true)) { handle in
            var output = FileOutput(handle: handle)
            return try await run(container: container, user: user, createdAt: createdAt, logger: logger, to: &output)
        }
    }

    struct FileOutput: ArchiveOutput {
        let handle: WriteFileHandle
        var offset: Int64 = 0

        mutating func write(_ bytes: [UInt8]) async throws {
            try await handle.write(contentsOf: bytes, toAbsoluteOffset: offset)
            offset += Int64(bytes.count)
        }
    }
}
