import Crypto
import Foundation
import Logging
import NIOCore
import StratusBlobStore
import StratusCore
import StratusPostgres
import _NIOFileSystem

/// `stratus import` (docs/operations.md, "Exporting and importing"): an export archive loaded into
/// a container of this Stratus. First the whole archive is read and checked — its tar framing,
/// paths, sizes, every file against the manifest's checksums, every line as what it must be —
/// before anything is written; then it is loaded through the write paths (zones, records with their
/// events and new change tags, share acceptances, subscriptions), so sync, the index and the
/// workers see the imported data as they see a client's. A load that stops is run again from the
/// start and finishes where the first stopped: every step is idempotent (a zone is created once, a
/// record already in the target as the archive has it is left alone (`ArchiveResume`), others are
/// saved with `forceReplace`, users and subscriptions are kept or replaced, acceptances repeated).
public struct ArchiveImport: Sendable {
    let store: PostgresStore
    let blobs: any BlobStore
    let limits: ArchiveLimits
    /// A test-only pause once that many records are in place (`ArchiveResume.pauses`).
    let pauseAfterRecords: Int?
    /// Records saved per transaction.
    static let batch = 200
    /// A schema file's bytes.
    static let maxSchemaBytes = 16 << 20

    /// An import into `store`, asset bytes into `blobs`.
    public init(store: PostgresStore, blobs: any BlobStore, limits: ArchiveLimits = ArchiveLimits(), pauseAfterRecords: Int? = nil) {
        self.store = store
        self.blobs = blobs
        self.limits = limits
        self.pauseAfterRecords = pauseAfterRecords
    }

    /// A file of a checked archive: where its bytes start, how many, their SHA-256.
    struct Located: Sendable, Hashable {
        var offset: Int64
        var size: Int64
        var sha256: String
    }

    /// An archive whose every file was checked against its manifest.
    public struct Verified: Sendable {
        public let path: String
        public let manifest: ArchiveManifest
        let files: [String: Located]
        /// Record lines (live ones) the archive holds.
        public let records: Int
    }

    /// What a load did.
    public struct Summary: Sendable, Hashable {
        /// The container loaded into.
        public var container = ""
        public var users = 0
        public var zones = 0
        public var records = 0
        /// Records that expired between the export and the import: not loaded.
        public var expired = 0
        /// Records an earlier run of the import had loaded already: left as they are.
        public var alreadyLoaded = 0
        public var assets = 0
        public var acceptances = 0
        public var subscriptions = 0

        /// One line for an operator.
        public var line: String {
            "\(users) users, \(zones) zones, \(records) records (\(expired) expired meanwhile, \(alreadyLoaded) loaded before), \(assets) assets, \(acceptances) share acceptances, \(subscriptions) subscriptions"
        }
    }

    // MARK: Checking

    /// Reads the whole archive once and checks it; refuses it (BAD_REQUEST, "Archive refused,
    /// nothing was loaded: …") at the first problem.
    public func verify(path: String, logger: Logger) async throws -> Verified {
        let limits = limits
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        return try await FileSystem.shared.withFileHandle(forReadingAt: FilePath(path)) { handle in
            let size = try await handle.info().size
            var reader = ArchiveTarReader()
            var check: FileCheck?
            var found: [ArchiveFile] = []
            var located: [String: Located] = [:]
            var manifest: ArchiveManifest?
            var referenced = Set<String>()
            var records = 0
            for try await chunk in handle.readChunks(in: 0..<size, chunkLength: .kibibytes(256)) {
                for event in try reader.feed(chunk.readableBytesView) {
                    switch event {
                    case .file(let header, let offset):
                        guard manifest == nil else { throw ArchiveProblem.refuse("a file follows the manifest, which must be the archive's last") }
                        guard found.count < limits.maxFiles else { throw ArchiveProblem.refuse("the archive holds more than \(limits.maxFiles) files") }
                        check = try FileCheck(header, offset: offset, limits: limits)
                    case .data(let bytes):
                        try check?.feed(bytes, now: now)
                    case .fileEnd:
                        guard var done = check else { continue }
                        check = nil
                        let file = try done.finish(now: now)
                        if done.header.path == ArchiveLayout.manifest {
                            manifest = try ArchiveManifest(done.manifest, limits: limits)
                            continue
                        }
                        referenced.formUnion(done.referenced)
                        records += done.records
                        found.append(file)
                        located[file.path] = Located(offset: done.offset, size: file.size, sha256: file.sha256)
                    case .end:
                        break
                    }
                }
            }
            try reader.finish()
            guard let manifest else { throw ArchiveProblem.refuse("the archive has no manifest (truncated?)") }
            try manifest.verify(found)
            if let missing = referenced.first(where: { located[$0] == nil }) {
                throw ArchiveProblem.refuse("'\(ClientText.excerpt(missing))' is named by a line but not in the archive")
            }
            return Verified(path: path, manifest: manifest, files: located, records: records)
        }
    }

    /// One file being checked as its bytes arrive: its checksum, and its contents as its kind
    /// requires (lines that read as users, zones, records or subscriptions; a schema that parses;
    /// an asset named by a receipt).
    struct FileCheck {
        enum Kind { case manifest, lines(String), schema, asset }
        let header: ArchiveTar.Header
        let offset: Int64
        let kind: Kind
        var hash = SHA256()
        var count: Int64 = 0
        var splitter: ArchiveLineSplitter
        var manifest: [UInt8] = []
        /// Archive paths the file's lines name (zones' record parts, records' assets).
        var referenced = Set<String>()
        var records = 0

        init(_ header: ArchiveTar.Header, offset: Int64, limits: ArchiveLimits) throws(StratusError) {
            self.header = header
            self.offset = offset
            let path = header.path
            splitter = ArchiveLineSplitter(file: path, maxLineBytes: limits.maxLineBytes)
            let kinds = [ArchiveLayout.users, ArchiveLayout.zones, ArchiveLayout.subscriptions, "records"]
            if path == ArchiveLayout.manifest {
                guard header.size <= limits.maxManifestBytes else { throw ArchiveProblem.refuse("the manifest is larger than \(limits.maxManifestBytes) bytes") }
                kind = .manifest
            } else if let kind = kinds.first(where: { path.hasPrefix($0 + "/") && path.hasSuffix(".jsonl") }) {
                guard header.size <= Int64(ArchiveLayout.partBytes + limits.maxLineBytes) else {
                    throw ArchiveProblem.refuse("'\(ClientText.excerpt(path))' is larger than a part of lines may be")
                }
                self.kind = .lines(kind)
            } else if Environment.allCases.contains(where: { ArchiveLayout.schema($0) == path }) {
                guard header.size <= Int64(ArchiveImport.maxSchemaBytes) else { throw ArchiveProblem.refuse("'\(path)' is larger than a schema may be") }
                kind = .schema
            } else if path.hasPrefix("assets/"), AssetValue.assetID(receipt: String(path.dropFirst("assets/".count))) != nil {
                guard header.size <= limits.maxAssetBytes else {
                    throw ArchiveProblem.refuse("the asset '\(path)' is larger than \(limits.maxAssetBytes) bytes")
                }
                kind = .asset
            } else {
                throw ArchiveProblem.refuse("the archive holds '\(ClientText.excerpt(path))', which is no part of an export")
            }
        }

        mutating func feed(_ bytes: [UInt8], now: Int64) throws(StratusError) {
            hash.update(data: bytes)
            count += Int64(bytes.count)
            switch kind {
            case .manifest, .schema: manifest.append(contentsOf: bytes)
            case .lines(let kind): for line in try splitter.feed(bytes) { try check(line, kind: kind, now: now) }
            case .asset: break
            }
        }

        private mutating func check(_ line: [UInt8], kind: String, now: Int64) throws(StratusError) {
            let json = try ArchiveLineSplitter.parse(line, file: header.path)
            switch kind {
            case ArchiveLayout.users: _ = try ArchiveUser(json)
            case ArchiveLayout.zones: referenced.formUnion(try ArchiveZone(json).records)
            case ArchiveLayout.subscriptions: _ = try ArchiveSubscription(json)
            default:
                guard let line = try ArchiveImport.recordLine(line, json: json, mapping: ArchiveUserMapping(), now: now) else { return }
                records += 1
                for receipt in line.command.input.fields.values.flatMap(\.assetReceipts) {
                    guard let receipt, AssetValue.assetID(receipt: receipt) != nil else {
                        throw ArchiveProblem.refuse("\(header.path): a record's asset has no receipt")
                    }
                    referenced.insert(ArchiveLayout.asset(receipt))
                }
            }
        }

        mutating func finish(now: Int64) throws(StratusError) -> ArchiveFile {
            switch kind {
            case .lines: try splitter.finish()
            case .schema:
                guard let text = String(validating: manifest, as: UTF8.self) else { throw ArchiveProblem.refuse("\(header.path) is not UTF-8") }
                do { _ = try SchemaLanguage.parse(text) } catch { throw ArchiveProblem.refuse("\(header.path): \(error)") }
            case .manifest, .asset: break
            }
            return ArchiveFile(path: header.path, size: count, sha256: ArchiveFile.hex(hash.finalize()))
        }
    }

    /// A record line as the write path takes it, with whom it was created by and which of its
    /// share's participants had accepted (record names mapped); nil for a record whose expiration
    /// has passed since the export.
    struct RecordLine {
        var command: RecordStore.Command
        var creator: String
        var accepted: [String]
        var zoneName: String
    }

    static func recordLine(_ bytes: [UInt8], json: JSONValue, mapping: ArchiveUserMapping, now: Int64) throws(StratusError) -> RecordLine? {
        if case .int(let expiration)? = json["expirationDate"], expiration <= now { return nil }
        guard let zoneName = json["zoneID"]?["zoneName"]?.stringValue, let creator = json["created"]?["userRecordName"]?.stringValue else {
            throw ArchiveProblem.refuse("a record line has no zoneID or created stamp")
        }
        let name = json["recordName"]?.stringValue ?? ""
        var wire: WireRecordInput
        do {
            wire = try JSONDecoder().decode(WireRecordInput.self, from: Data(bytes))
        } catch {
            throw ArchiveProblem.refuse("the record '\(ClientText.excerpt(name))' is not a record dictionary")
        }
        wire.recordChangeTag = nil
        wire.createShortGUID = json["shortGUID"] != nil && json["recordType"]?.stringValue != ShareRecord.recordType
        var accepted: [String] = []
        if case .array(let participants)? = wire.participants {
            // The owner is the zone's; the others keep their permission, and those who had accepted
            // accept again once the share is saved.
            var kept: [JSONValue] = []
            for participant in participants
            where participant["type"]?.stringValue != ShareParticipantType.owner.rawValue
                && participant["acceptanceStatus"]?.stringValue != ShareAcceptanceStatus.removed.rawValue {
                guard case .object(var members) = participant, case .object(var identity)? = members["userIdentity"] else {
                    kept.append(participant)
                    continue
                }
                var user: String?
                if case .object(var lookup)? = identity["lookupInfo"], let old = lookup["userRecordName"]?.stringValue {
                    lookup["userRecordName"] = .string(mapping(old))
                    identity["lookupInfo"] = .object(lookup)
                    user = mapping(old)
                }
                if let old = identity["userRecordName"]?.stringValue {
                    identity["userRecordName"] = .string(mapping(old))
                    user = mapping(old)
                }
                members["userIdentity"] = .object(identity)
                if let user, members["acceptanceStatus"]?.stringValue == ShareAcceptanceStatus.accepted.rawValue { accepted.append(user) }
                members["acceptanceStatus"] = nil
                kept.append(.object(members))
            }
            wire.participants = .array(kept)
        }
        let zone = ZoneID(zoneName: zoneName, ownerRecordName: ZoneID.defaultOwnerName)
        let input: RecordInput
        do {
            input = try RecordWire.input(wire, operation: .forceReplace, zone: zone, now: now)
        } catch {
            throw ArchiveProblem.refuse("the record '\(ClientText.excerpt(name))': \(error.reason)")
        }
        return RecordLine(command: RecordStore.Command(type: .forceReplace, input: input), creator: mapping(creator), accepted: accepted, zoneName: zoneName)
    }

    // MARK: Loading

    /// Loads a checked archive into `container` (by default the one it was exported from), each
    /// archived user under `mapping`'s name. NOT_FOUND when the container does not exist.
    public func load(
        _ archive: Verified, into container: String? = nil, mapping: ArchiveUserMapping = ArchiveUserMapping(), logger: Logger,
        progress: @escaping @Sendable (String) -> Void = { _ in }
    ) async throws -> Summary {
        let target = container ?? archive.manifest.container
        guard try await ArchiveStore(store: store).containerExists(target, logger: logger) else {
            throw StratusError(.notFound, "no container '\(ClientText.excerpt(target))'; create it first (stratus container create)")
        }
        let causation = Causation(requestID: "import-\(UUID().uuidString.lowercased())")
        return try await FileSystem.shared.withFileHandle(forReadingAt: FilePath(archive.path)) { handle in
            var summary = Summary()
            summary.container = target
            let files = FileReader(handle: handle, archive: archive)
            try await loadSchema(files, container: target, causation: causation, logger: logger)
            let paths = archive.manifest.files.map(\.path)
            for part in ArchiveLayout.parts(ArchiveLayout.users, in: paths) {
                for line in try await files.lines(part) {
                    var user = try ArchiveUser(line.json)
                    user.userRecordName = mapping(user.userRecordName)
                    try await ArchiveStore(store: store).restore(user, container: target, logger: logger)
                    summary.users += 1
                }
            }
            progress("users: \(summary.users)")
            for part in ArchiveLayout.parts(ArchiveLayout.zones, in: paths) {
                for line in try await files.lines(part) {
                    let zone = try ArchiveZone(line.json)
                    try await loadZone(zone, files: files, container: target, mapping: mapping, causation: causation, summary: &summary, logger: logger)
                    summary.zones += 1
                    progress("zones: \(summary.zones), records: \(summary.records)")
                }
            }
            let subscriptions = SubscriptionStore(store: store)
            for part in ArchiveLayout.parts(ArchiveLayout.subscriptions, in: paths) {
                for line in try await files.lines(part) {
                    let archived = try ArchiveSubscription(line.json)
                    let database = archived.database(in: target, mapping: mapping)
                    var definition = archived.definition
                    if case .object(var members) = definition, case .object(var zoneID)? = members["zoneID"] {
                        zoneID["ownerRecordName"] = nil
                        members["zoneID"] = .object(zoneID)
                        definition = .object(members)
                    }
                    let subscription = try Subscription.parse(definition, scope: archived.scope, databaseOwner: database.owner)
                    let outcome = try await subscriptions.modify(
                        [.create(subscription)], in: database, subscriber: mapping(archived.subscriber), maxPerSubscriber: .max, logger: logger)
                    if case .failure(let error)? = outcome.first { throw error }
                    summary.subscriptions += 1
                }
            }
            return summary
        }
    }

    /// Production's schema, then development's (each unless the target's is that already: an import
    /// run again), each only adding to what the target has (a target whose schema would lose
    /// something is refused before any data is written).
    private func loadSchema(_ files: FileReader, container: String, causation: Causation, logger: Logger) async throws {
        let schemas = SchemaStore(store: store)
        func schema(_ environment: Environment) async throws -> Schema? {
            guard let bytes = try await files.whole(ArchiveLayout.schema(environment)) else { return nil }
            return try SchemaLanguage.parse(String(decoding: bytes, as: UTF8.self))
        }
        func apply(_ outcome: SchemaStore.Outcome) throws {
            if case .refused(let problems) = outcome {
                throw StratusError(.badRequest, "the archive's schema would take from the target's: \(problems.map { "\($0)" }.joined(separator: "; "))")
            }
        }
        let current = try await schemas.schema(container: container, environment: .production, logger: logger)
        if let production = try await schema(.production), !production.recordTypes.isEmpty,
           SchemaLanguage.print(production) != SchemaLanguage.print(current) {
            try apply(try await schemas.importSchema(production, container: container, causation: causation, logger: logger))
            try apply(try await schemas.deploy(container: container, causation: causation, logger: logger))
        }
        let currentDevelopment = try await schemas.schema(container: container, environment: .development, logger: logger)
        if let development = try await schema(.development), SchemaLanguage.print(development) != SchemaLanguage.print(currentDevelopment) {
            try apply(try await schemas.importSchema(development, container: container, causation: causation, logger: logger))
        }
    }

    /// A zone: created (a custom one), then its records a batch at a time through `records/modify`'s
    /// write path, the assets they hold stored first, and the share acceptances.
    private func loadZone(
        _ zone: ArchiveZone, files: FileReader, container: String, mapping: ArchiveUserMapping, causation: Causation, summary: inout Summary,
        logger: Logger
    ) async throws {
        let database = zone.database(in: container, mapping: mapping)
        let zoneID = ZoneID(zoneName: zone.zoneName, ownerRecordName: database.owner)
        if !zoneID.isDefaultZone {
            let outcomes = try await ZoneStore(store: store).modify(
                [.create(zoneID, defaultTimeToLive: .some(zone.defaultTimeToLive))], in: database, causation: causation, logger: logger)
            if case .failure(let error)? = outcomes.first { throw error }
        }
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        var pending: [RecordLine] = []
        for part in zone.records {
            for line in try await files.lines(part) {
                guard var record = try Self.recordLine(line.bytes, json: line.json, mapping: mapping, now: now) else {
                    summary.expired += 1
                    continue
                }
                guard record.zoneName == zone.zoneName else {
                    throw ArchiveProblem.refuse("\(part) holds a record of another zone")
                }
                record.creator = zone.writer(ofRecordCreatedBy: record.creator, in: database)
                if let first = pending.first, first.creator != record.creator || pending.count >= Self.batch {
                    try await save(pending, zone: zoneID, in: database, files: files, causation: causation, summary: &summary, logger: logger)
                    pending.removeAll()
                }
                pending.append(record)
            }
        }
        try await save(pending, zone: zoneID, in: database, files: files, causation: causation, summary: &summary, logger: logger)
    }

    private func save(
        _ lines: [RecordLine], zone: ZoneID, in database: DatabaseID, files: FileReader, causation: Causation, summary: inout Summary, logger: Logger
    ) async throws {
        guard let creator = lines.first?.creator else { return }
        // What an earlier run loaded stays as it is.
        let existing = try await RecordStore(store: store).lookup(lines.map(\.command.input.recordName), zone: zone, in: database, logger: logger)
        let archived = files.archive.files
        let checksum: (String) -> String? = { receipt in
            archived[ArchiveLayout.asset(receipt)].flatMap { ArchiveFile.bytes(hex: $0.sha256) }.map(AssetValue.fileChecksum)
        }
        var placed: [(line: RecordLine, record: Record)] = []
        var pending: [RecordLine] = []
        for line in lines {
            if let record = existing[ExactName(line.command.input.recordName)],
               ArchiveResume.isLoaded(line.command.input, creator: line.creator, existing: record, checksum: checksum) {
                placed.append((line, record))
            } else {
                pending.append(line)
            }
        }
        summary.alreadyLoaded += placed.count
        var commands: [RecordStore.Command] = []
        var stored: [UUID] = []
        for line in pending {
            var command = line.command
            for (field, value) in command.input.fields where value.type.base == .asset {
                command.input.fields[field] = try await assets(
                    value, field: field, record: command.input, zone: zone, in: database, uploader: creator, files: files, stored: &stored, logger: logger)
            }
            commands.append(command)
        }
        summary.assets += stored.count
        var writer = causation
        writer.userRecordName = creator
        let outcomes = commands.isEmpty ? [] : try await RecordStore(store: store).modify(
            commands, zone: zone, in: database, atomic: !zone.isDefaultZone, causation: writer, deviceID: nil, logger: logger)
        var saved = 0
        for (line, outcome) in zip(pending, outcomes) {
            switch outcome {
            case .success(.saved(let record)):
                placed.append((line, record))
                saved += 1
            case .success(.deleted): continue
            case .failure(let failure):
                throw StratusError(failure.error.code, "the record '\(ClientText.excerpt(line.command.input.recordName))' was not loaded: \(failure.error.reason)")
            }
        }
        summary.records += saved
        try await AssetStore(store: store).markBound(stored, logger: logger)
        let shares = ShareStore(store: store)
        // Acceptances are repeated for shares loaded before: the earlier run may have stopped before them.
        for (line, record) in placed where !line.accepted.isEmpty {
            guard let shortGUID = record.shortGUID else { continue }
            for user in line.accepted {
                let results = try await shares.accept(
                    [shortGUID], container: database.container, environment: database.environment, user: user, requestID: causation.requestID, logger: logger)
                if case .failure(let error)? = results[shortGUID] { throw error }
                summary.acceptances += 1
            }
        }
        if ArchiveResume.pauses(records: summary.records + summary.alreadyLoaded, pauseAfterRecords: pauseAfterRecords) {
            logger.warning("import paused (a test setting)", metadata: ["records": "\(summary.records + summary.alreadyLoaded)"])
            while true { try await Task.sleep(for: .seconds(3600)) }
        }
    }

    /// Stores the bytes of each asset a field holds as a new upload of this record's field, and
    /// gives the field the new receipts.
    private func assets(
        _ value: FieldValue, field: String, record: RecordInput, zone: ZoneID, in database: DatabaseID, uploader: String, files: FileReader,
        stored: inout [UUID], logger: Logger
    ) async throws -> FieldValue {
        func load(_ value: FieldValue) async throws -> FieldValue {
            guard case .asset(let json) = value, let receipt = json["receipt"]?.stringValue, let file = files.archive.files[ArchiveLayout.asset(receipt)],
                  let digest = ArchiveFile.bytes(hex: file.sha256)
            else { return value }
            let id = UUID()
            let grant = AssetUploadGrant(
                assetID: id, database: database, zoneName: zone.zoneName, recordName: record.recordName, recordType: record.recordType ?? "",
                fieldName: field, expiresAt: Int64(Date().timeIntervalSince1970 * 1000) + 60_000, uploader: uploader)
            let assets = AssetStore(store: store)
            _ = try await assets.beginUpload(grant, logger: logger)
            do {
                try await files.copy(ArchiveLayout.asset(receipt), to: blobs, key: BlobKey(AssetValue.receipt(id))!, logger: logger)
            } catch {
                try? await assets.abandonUpload(id, logger: logger)
                throw error
            }
            let checksum = AssetValue.fileChecksum(digest)
            try await assets.finishUpload(id, size: file.size, fileChecksum: checksum, usageOwner: grant.usageOwner, quota: 0, logger: logger)
            stored.append(id)
            return .asset(AssetValue(receipt: AssetValue.receipt(id), size: file.size, fileChecksum: checksum).json)
        }
        if case .list(let base, let values) = value {
            var loaded: [FieldValue] = []
            for element in values { loaded.append(try await load(element)) }
            return .list(base, loaded)
        }
        return try await load(value)
    }

    /// Reads files of a checked archive by their place, checking each again against the manifest
    /// as it is read (an archive changed since it was checked is refused).
    struct FileReader {
        let handle: ReadFileHandle
        let archive: Verified

        struct Line {
            var bytes: [UInt8]
            var json: JSONValue
        }

        /// A file's bytes (a part of lines or a schema, each bounded when checked); nil when absent.
        func whole(_ path: String) async throws -> [UInt8]? {
            guard let file = archive.files[path] else { return nil }
            var bytes: [UInt8] = []
            var hash = SHA256()
            for try await chunk in handle.readChunks(in: file.offset..<file.offset + file.size, chunkLength: .kibibytes(256)) {
                let read = Array(chunk.readableBytesView)
                bytes.append(contentsOf: read)
                hash.update(data: read)
            }
            guard ArchiveFile.hex(hash.finalize()) == file.sha256 else {
                throw ArchiveProblem.refuse("'\(path)' changed since the archive was checked")
            }
            return bytes
        }

        /// A part's lines.
        func lines(_ path: String) async throws -> [Line] {
            guard let bytes = try await whole(path) else { throw ArchiveProblem.refuse("'\(path)' is not in the archive") }
            var splitter = ArchiveLineSplitter(file: path, maxLineBytes: .max)
            var lines: [Line] = []
            for line in try splitter.feed(bytes) { lines.append(Line(bytes: line, json: try ArchiveLineSplitter.parse(line, file: path))) }
            try splitter.finish()
            return lines
        }

        /// An asset's bytes into the blob store.
        func copy(_ path: String, to blobs: any BlobStore, key: BlobKey, logger: Logger) async throws {
            guard let file = archive.files[path] else { throw ArchiveProblem.refuse("'\(path)' is not in the archive") }
            try await blobs.put(key: key, body: handle.readChunks(in: file.offset..<file.offset + file.size, chunkLength: .kibibytes(256)), logger: logger)
        }
    }
}
