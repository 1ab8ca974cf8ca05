import Foundation
import Logging
import PostgresNIO
import StratusConnections
import StratusCore

/// Records: the serializable write path for `records/modify` and the reads for `records/lookup`.
///
/// Custom zones serialise every writer through the zone's change counter row; default zones have no
/// zone-wide counter — each record is its own compare-and-set — so writers of different records
/// never contend.
public struct RecordStore: Sendable {
    let store: PostgresStore

    /// Creates the record store.
    public init(store: PostgresStore) { self.store = store }

    /// One operation of a request.
    public struct Command: Sendable, Hashable {
        public var type: RecordOperationType
        public var input: RecordInput
        /// The operation's failure, decided before its values were decoded (a record that cannot
        /// fit its limit: `WriteLimits.checkSentRecord`); reported in the operation's place.
        public var refusal: StratusError?
        /// Creates a command.
        public init(type: RecordOperationType, input: RecordInput, refusal: StratusError? = nil) {
            self.type = type
            self.input = input
            self.refusal = refusal
        }
    }

    /// What happened to one operation.
    public enum Outcome: Sendable, Hashable {
        case saved(Record)
        case deleted(recordName: String)
    }

    /// A failed operation: its error and, for CONFLICT, the server's record.
    public struct Failure: Error, Sendable, Hashable {
        public var error: StratusError
        public var serverRecord: Record?

        /// Applies one of Core's write rules: its refusal is the operation's failure.
        static func deciding<T>(_ rule: () throws(StratusError) -> T) throws(Failure) -> T {
            do throws(StratusError) {
                return try rule()
            } catch {
                throw Failure(error: error)
            }
        }
    }

    /// Limits a write must respect (the rules are Core's: `WriteLimits`, `StorageQuota`).
    public typealias Limits = WriteLimits

    /// Applies commands to one zone. Atomic: one transaction; the first failure fails all, the
    /// others get ATOMIC_ERROR. Not atomic: each command is its own transaction and reports its own
    /// outcome, so no item is ever reported stored that was not.
    public func modify(
        _ commands: [Command], zone: ZoneID, in database: DatabaseID, atomic: Bool, causation: Causation, deviceID: String?,
        limits: Limits = Limits(), sharedWith: String? = nil, logger: Logger
    ) async throws -> [Result<Outcome, Failure>] {
        var request = WriteContext(database: database, zone: zone, causation: causation, deviceID: deviceID, limits: limits)
        request.sharedWith = sharedWith
        if atomic {
            do {
                return try await inOneTransaction(commands, request, logger: logger) { writer, transaction in
                    var outcomes: [Result<Outcome, Failure>] = []
                    for (index, command) in commands.enumerated() {
                        do {
                            outcomes.append(.success(try await writer.apply(command, in: transaction)))
                        } catch let failure as Failure {
                            throw AtomicAbort(index: index, failure: failure)
                        }
                    }
                    return outcomes
                }
            } catch let refused as ItemRefused {
                let index = commands.firstIndex { ExactName($0.input.recordName) == ExactName(refused.recordName) } ?? commands.count - 1
                return Self.atomicFailure(commands, at: index, refused.failure)
            } catch let abort as AtomicAbort {
                return Self.atomicFailure(commands, at: abort.index, abort.failure)
            }
        }
        if let outcomes = try await modifyTogether(commands, request, logger: logger) {
            return outcomes
        }
        var outcomes: [Result<Outcome, Failure>] = []
        for command in commands {
            if let refusal = command.refusal {
                outcomes.append(.failure(Failure(error: refusal)))
                continue
            }
            do {
                let outcome = try await SchemaGrowth.holdingLocks { schemaLocks in
                    let context = request.holding(schemaLocks)
                    let write: @Sendable (Transaction) async throws -> Outcome = { transaction in
                        var writer = try await ZoneWriter.open(context, reading: [command], in: transaction)
                        let outcome = try await writer.apply(command, in: transaction)
                        try await writer.close(in: transaction)
                        return outcome
                    }
                    if !zone.isDefaultZone {
                        // Every writer of a custom zone holds the zone's lock.
                        return try await store.locked(logger: logger, locks: [context.zoneKey.rawValue] + schemaLocks, write)
                    } else if command.type.isDelete || command.input.fields.values.contains(where: { $0.references.contains { $0.action != .none } }) {
                        // A default zone has no zone-wide lock. A delete's cascade, and a reference that
                        // binds its target, depend on records other than the one written: only
                        // SERIALIZABLE sees every such dependency (they are rare in a default zone).
                        return try await store.serializable(logger: logger, locks: context.recordLocks(command) + schemaLocks, write)
                    } else {
                        // Any other write depends on its own record alone, which its lock orders.
                        return try await store.locked(logger: logger, locks: context.recordLocks(command) + schemaLocks, write)
                    }
                }
                outcomes.append(.success(outcome))
            } catch let failure as Failure {
                outcomes.append(.failure(failure))
            } catch let refused as ItemRefused {
                outcomes.append(.failure(refused.failure))
            } catch {
                // Once one item is stored the request must report per item: an error for the whole
                // request would tell the client that nothing was stored. Before that, a missing zone
                // is the request's error, as CloudKit reports it.
                let stored = outcomes.contains { if case .success = $0 { true } else { false } }
                if let error = error as? StratusError, error.code == .zoneNotFound, !stored { throw error }
                outcomes.append(.failure(Failure(error: Self.itemError(error, recordName: command.input.recordName, logger: logger))))
            }
        }
        return outcomes
    }

    /// A non-atomic request of a custom zone, in one transaction. Every writer of such a zone holds
    /// the zone's lock, so one transaction is what the request's items would be one after another;
    /// each item runs under a savepoint, and one that fails is undone alone (to its savepoint, and
    /// the writer's state to what it was before the item) and reports its own error, while the
    /// others commit together. What is reported stored is stored: the outcomes are answered only
    /// after the commit. Only for requests that name each record once (the API refuses any other)
    /// and save no share record: a share and its root saved without `atomic` stay separate
    /// transactions, in which a share without `forRecord` is refused (docs/api.md, "Sharing").
    ///
    /// Nil when the transaction cannot finish as a whole (refused at its close by a storage quota,
    /// or failed for anything but one item's refusal): the items are then written each in a
    /// transaction of its own, as before.
    private func modifyTogether(_ commands: [Command], _ request: WriteContext, logger: Logger) async throws -> [Result<Outcome, Failure>]? {
        guard !request.zone.isDefaultZone, commands.count > 1, Set(commands.map { ExactName($0.input.recordName) }).count == commands.count,
            !commands.contains(where: { ShareRecord.isShare($0.input.recordType ?? "") })
        else { return nil }
        do {
            return try await inOneTransaction(commands.filter { $0.refusal == nil }, request, logger: logger) { writer, transaction in
                var outcomes: [Result<Outcome, Failure>] = []
                for command in commands {
                    if let refusal = command.refusal {
                        outcomes.append(.failure(Failure(error: refusal)))
                        continue
                    }
                    let before = writer
                    try await transaction.savepoint()
                    do {
                        outcomes.append(.success(try await writer.apply(command, in: transaction)))
                    } catch let failure as Failure {
                        try await transaction.rollbackToSavepoint()
                        writer = before
                        outcomes.append(.failure(failure))
                    }
                }
                return outcomes
            }
        } catch let error as StratusError where error.code == .zoneNotFound {
            // A missing zone is the request's error, as CloudKit reports it.
            throw error
        } catch {
            logger.debug("a non-atomic request is written record by record", metadata: ["reason": "\(PostgresStore.describe(error))"])
            return nil
        }
    }

    /// Runs `body` in one transaction of the request's zone, under the zone's lock and the schema
    /// growth locks it turns out to need (`SchemaGrowth`): with the zone's writer opened on the
    /// records of `reading`, and closed after `body` (its rows and events written).
    private func inOneTransaction<T: Sendable>(
        _ reading: [Command], _ request: WriteContext, logger: Logger,
        _ body: @escaping @Sendable (inout ZoneWriter, Transaction) async throws -> T
    ) async throws -> T {
        try await SchemaGrowth.holdingLocks { schemaLocks in
            let context = request.holding(schemaLocks)
            return try await store.locked(logger: logger, locks: [context.zoneKey.rawValue] + schemaLocks) { transaction in
                var writer = try await ZoneWriter.open(context, reading: reading, in: transaction)
                let value = try await body(&writer, transaction)
                try await writer.close(in: transaction)
                return value
            }
        }
    }

    /// An atomic request's outcomes when the command at `index` failed: its failure, and
    /// ATOMIC_ERROR for every other command.
    private static func atomicFailure(_ commands: [Command], at index: Int, _ failure: Failure) -> [Result<Outcome, Failure>] {
        commands.indices.map { other in
            other == index ? .failure(failure) : .failure(Failure(error: StratusError(
                .atomicError, "Not applied: the atomic request failed at record '\(ClientText.excerpt(commands[index].input.recordName))'")))
        }
    }

    /// Records by exact name in one zone; absent names are absent from the result.
    public func lookup(_ recordNames: [String], zone: ZoneID, in database: DatabaseID, logger: Logger) async throws -> [ExactName: Record] {
        try await store.withConnection { connection in
            try await Self.lookup(recordNames, zone: zone, in: database, on: connection, logger: logger)
        }
    }

    /// What a caller's `records/lookup` finds: the records it may read, and those the public
    /// database's security roles keep from it.
    public struct Read: Sendable {
        /// The records found that the reader may read, by exact name.
        public var records: [ExactName: Record]
        /// The records found that no READ grant lets the reader read, by exact name, with their record type.
        public var denied: [ExactName: String]

        /// Creates a read.
        public init(records: [ExactName: Record], denied: [ExactName: String]) {
            self.records = records
            self.denied = denied
        }
    }

    /// A private database's records by exact name in one zone, each as its stored JSON text
    /// (`SyncStore.storedText`: answered by copying it), in one statement with the zone's check.
    /// Nil when one of them is a share, whose state lives in other tables: `lookup` reads those.
    public func lookupStored(_ recordNames: [String], zone: ZoneID, in database: DatabaseID, logger: Logger) async throws -> [ExactName: String]? {
        let statements = store.statements
        return try await store.withConnection { connection in
            let query: PostgresQuery = """
                SELECT zone.present, record_name,
                       CASE WHEN record_type <> \(ShareRecord.recordType) THEN \(unescaped: SyncStore.storedText) END
                FROM (SELECT \(zone.isDefaultZone) OR EXISTS (SELECT 1 FROM zones WHERE \(zone: zone.zoneName, of: database) AND NOT deleted)) AS zone (present)
                LEFT JOIN records ON \(zone: zone.zoneName, of: database) AND \(recordNames: recordNames) AND \(unescaped: RecordExpirySQL.live)
                """
            // One name: one row of the primary key, safe to run prepared (`RecordKeys.single`).
            let rows = RecordKeys.single(recordNames)
                ? try await connection.query(query, preparedIn: statements, logger: logger)
                : try await connection.query(query, logger: logger).map { $0 }
            var found: [ExactName: String] = [:]
            for try await (present, name, text) in rows.decode((Bool, String?, String?).self) {
                guard present else { throw StratusError(.zoneNotFound, "Zone '\(ClientText.excerpt(zone.zoneName))' does not exist") }
                // No record joined: none of the names is there.
                guard let name else { continue }
                guard let text else { return nil }
                found[ExactName(name)] = text
            }
            return found
        }
    }

    /// Records by exact name in one zone, as `reader` (a user record name; nil for a caller with only
    /// the API token) may read them: in the public database a record of a type whose READ grants no
    /// role of the reader's reaches is denied. The grants and the reader's roles are read once, in
    /// one statement on the same connection, whatever the number of records.
    public func lookup(_ recordNames: [String], zone: ZoneID, in database: DatabaseID, reader: String?, logger: Logger) async throws -> Read {
        try await store.withConnection { connection in
            var found = try await Self.lookup(recordNames, zone: zone, in: database, on: connection, logger: logger)
            guard database.scope == .public, !found.isEmpty else { return Read(records: found, denied: [:]) }
            let types = Array(Set(found.values.map(\.recordType)))
            let grants = try await SchemaStore.readGrants(recordTypes: types, reader: reader, database: database, on: connection, logger: logger)
            var denied: [ExactName: String] = [:]
            for (name, record) in found where !grants.mayRead(record) {
                denied[name] = record.recordType
                found[name] = nil
            }
            return Read(records: found, denied: denied)
        }
    }

    private static func lookup(
        _ recordNames: [String], zone: ZoneID, in database: DatabaseID, on connection: PostgresConnection, logger: Logger
    ) async throws -> [ExactName: Record] {
        if !zone.isDefaultZone {
            let rows = try await connection.query("""
                SELECT 1 FROM zones WHERE container = \(database.container) AND environment = \(database.environment.rawValue)
                  AND scope = \(database.scope.rawValue) AND owner = \(database.owner) AND zone_name = \(zone.zoneName) AND NOT deleted
                """, logger: logger)
            var exists = false
            for try await _ in rows { exists = true }
            guard exists else { throw StratusError(.zoneNotFound, "Zone '\(ClientText.excerpt(zone.zoneName))' does not exist") }
        }
        return try await RecordRow.live(recordNames, zone: zone.zoneName, of: database, on: Transaction(connection: connection, logger: logger))
    }

    /// The error one item of a non-atomic request reports: a client error as it is, anything else
    /// as INTERNAL_ERROR (the details go to the log, never to the client).
    private static func itemError(_ error: any Error, recordName: String, logger: Logger) -> StratusError {
        if let error = error as? StratusError { return error }
        logger.error("record write failed", metadata: ["record": "\(ClientText.excerpt(recordName))", "error": "\(String(reflecting: error))"])
        return StratusError(.internalError, "Record '\(ClientText.excerpt(recordName))' could not be written")
    }

    struct AtomicAbort: Error {
        var index: Int
        var failure: Failure
    }

    /// A transaction refused at its close because of one record — past its user's storage quota, or
    /// a share saved without its root — and that record, to blame.
    struct ItemRefused: Error {
        var recordName: String
        var failure: Failure
    }
}

/// What every write in one request shares.
struct WriteContext: Sendable {
    var database: DatabaseID
    var zone: ZoneID
    var causation: Causation
    var deviceID: String?
    var limits: RecordStore.Limits
    /// The schema growth locks this attempt holds (`SchemaGrowth`): a save may add fields only to the
    /// record types named here.
    var schemaLocks: Set<String> = []
    /// The participant writing through the shared database, when it is one: every operation is
    /// checked against their access (`checkSharedWrite`).
    var sharedWith: String?

    /// The same context for an attempt that holds `locks`.
    func holding(_ locks: [String]) -> WriteContext {
        var context = self
        context.schemaLocks = Set(locks)
        return context
    }

    var zoneKey: ZoneKey { ZoneKey(database: database, zoneName: zone.zoneName) }

    /// The locks of one default-zone write: its record's and, for references with an action, their targets'.
    func recordLocks(_ command: RecordStore.Command) -> [String] {
        let targets = command.input.fields.values.flatMap(\.references).filter { $0.action != .none }.map(\.recordName)
        return ([command.input.recordName] + targets).map { zoneKey.rawValue + "/" + $0 }
    }
}

/// The writes of one transaction to one zone: loads and locks the zone's counter (custom zones),
/// applies commands, appends their events, and advances the counter at the end.
///
/// Row writes are batched: saved records wait in `pending` and reach the tables in a few statements
/// when something must read them back (a delete's reference walk) or at `close`, so a batch of 200
/// records costs a handful of round trips instead of a thousand. Reads see the pending state through
/// `known`, the records this transaction has read or written.
struct ZoneWriter {
    let context: WriteContext
    let incarnation: UUID?
    var sequence: Int64?
    let startSequence: Int64?
    /// The zone's default time to live in seconds (docs/ttl.md): records created without an expiration get it.
    var defaultTimeToLive: Int64?
    var events: [NewEvent] = []
    /// Records this transaction has read (locked) or written, by exact name; absent ones as nil.
    var known: [ExactName: Record?] = [:]
    var pending: [PendingSave] = []
    /// What this transaction changed each user's stored bytes by.
    var usageChange: [String: Int64] = [:]
    /// The commands applied, in order: each one's record, and what it changed its container's
    /// records and its user's (and container's) bytes by.
    var applied: [ContainerQuota.Applied] = []
    /// What this transaction changed its container's records and bytes by (`ContainerCounts`).
    var containerChange = ContainerTotals()
    /// Whom the writer acts for when it deletes an expired record: the record's creator (so its
    /// DELETE_SELF referrers go with it as they would in its creator's own delete); nil: the caller.
    var actingUser: String?
    /// The record types' schemas this transaction read, and what it added to them.
    var schema = SchemaCheck()
    /// The share records this transaction saved and the roots pointed at them (`ShareWrites`).
    var sharing = ShareWrites()
    /// The writing participant's access to the zone (writes through the shared database).
    var sharedAccess: SharedZone?
    /// The rows of the records this transaction read (locked) or wrote, as they stand in the table:
    /// whom each row's bytes count against and how many (`StorageUsage`). A save replaces the row
    /// found here, or none: every record is read before it is saved (`load`), so the write reads
    /// nothing more to count what it changed.
    var stored: [ExactName: StoredRow] = [:]
    /// Whether the zone may hold tombstones: read with the zone's row, under its lock (only a
    /// writer holding it buries a record), and true once this transaction buried one. A record
    /// created in a zone without any has no tombstone to remove, so its save names none.
    var mayHoldTombstones = false

    /// A record row's share of its user's stored bytes.
    struct StoredRow {
        var usageOwner: String
        var bytes: Int64
    }

    /// A saved record not yet written to the tables.
    struct PendingSave {
        var record: Record
        var fields: Data
        /// Whether the record is new (its tombstone, if any, must go).
        var created: Bool
        /// Whether the stored version had references with an action (their rows must go).
        var hadReferences: Bool
    }

    /// Opens the writer of `commands` (none: one that reads as it goes). One statement reads and
    /// locks the zone's row (a custom zone's), reads and locks the commands' records, and reads the
    /// schema of the record types they save, so a save of one record reads nothing more.
    static func open(_ context: WriteContext, reading commands: [RecordStore.Command] = [], in transaction: Transaction) async throws -> ZoneWriter {
        let isDefault = context.zone.isDefaultZone
        guard !isDefault || !commands.isEmpty else {
            return ZoneWriter(context: context, incarnation: nil, sequence: nil, startSequence: nil)
        }
        let database = context.database
        let names = commands.map(\.input.recordName)
        let recordTypes = Array(Set(commands.filter { !$0.type.isDelete }.compactMap(\.input.recordType))).sorted()
        // The records' rows (as `lock` reads them), and one row of the zone's and the schema's
        // columns, its record columns NULL.
        let headColumn = RecordRow.columnCount + 2
        func nulls(_ count: Int) -> String { Array(repeating: "NULL", count: count).joined(separator: ", ") }
        let rows = try await transaction.query("""
            WITH zone AS (\(zoneRowOf: context)),
            found AS (
                SELECT \(unescaped: RecordRow.columns), \(unescaped: StorageUsage.usageOwner), \(unescaped: StorageUsage.recordBytes) FROM records
                WHERE \(zone: context.zone.zoneName, of: database) AND \(recordNames: names)
                FOR UPDATE)
            SELECT found.*, \(unescaped: nulls(ZoneWriter.zoneRowColumns + SchemaRow.columnCount)) FROM found
            UNION ALL
            SELECT \(unescaped: nulls(headColumn)), zone.*, schema.*
            FROM zone, (\(schemaOf: recordTypes, container: database.container, environment: database.environment)) AS schema
            """, prepared: RecordKeys.single(names))
        var head: (incarnation: UUID?, counter: Int64?, defaultTimeToLive: Int64?, tombstones: Bool, schema: SchemaRow.Read)?
        var records: [PostgresRow] = []
        for try await row in rows {
            let columns = row.makeRandomAccess()
            guard try columns[0].decode(String?.self) == nil else {
                records.append(row)
                continue
            }
            head = (
                try columns[headColumn].decode(UUID?.self), try columns[headColumn + 1].decode(Int64?.self), try columns[headColumn + 2].decode(Int64?.self),
                try columns[headColumn + 3].decode(Bool.self), try SchemaRow.decode(columns, at: headColumn + Self.zoneRowColumns))
        }
        guard let head, isDefault || head.incarnation != nil else {
            throw StratusError(.zoneNotFound, "Zone '\(ClientText.excerpt(context.zone.zoneName))' does not exist")
        }
        var writer = ZoneWriter(context: context, incarnation: head.incarnation, sequence: head.counter, startSequence: head.counter)
        writer.defaultTimeToLive = head.defaultTimeToLive
        writer.mayHoldTombstones = head.tombstones
        writer.schema.enforced = head.schema.enforced
        for type in recordTypes { writer.schema.types[type] = .some(head.schema.types[type]) }
        for name in names { writer.known[ExactName(name)] = .some(nil) }
        for row in records { try writer.remember(row) }
        if let user = context.sharedWith {
            writer.sharedAccess = try await ShareStore.sharedZone(
                context.zone.zoneName, owner: database.owner, user: user, container: database.container, environment: database.environment,
                on: transaction)
        }
        return writer
    }

    /// How many columns the zone's row in `open` has (`\(zoneRowOf:)`).
    static let zoneRowColumns = 4

    var zoneKey: ZoneKey { context.zoneKey }

    mutating func apply(_ command: RecordStore.Command, in transaction: Transaction) async throws -> RecordStore.Outcome {
        if let refusal = command.refusal { throw RecordStore.Failure(error: refusal) }
        let input = command.input
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        var current = try await load(input.recordName, in: transaction)
        if let expired = current, expired.isExpired(at: now) {
            // An expired record is gone for every reader: it is deleted (its event and tombstone
            // tell every device) before the operation, which then finds no record.
            try await deleteAsCreators([expired], in: transaction)
            current = nil
        }
        if let access = sharedAccess {
            try await checkSharedWrite(command, current: current, access: access.access, in: transaction)
            if command.type.isDelete, let current, ShareRecord.isShare(current.recordType) { return try await leave(current, in: transaction) }
        }
        if let current, !(try await mayChange(current, in: transaction)) {
            throw RecordStore.Failure(error: PublicWriteAccess.changeDenied(input.recordName, recordType: current.recordType))
        }
        let stamp = RecordStamp(timestamp: now, userRecordName: context.causation.userRecordName ?? "_server", deviceID: context.deviceID)
        let outcome: RecordDecision.Outcome
        do {
            outcome = try RecordDecision.decide(
                command.type, input, current: current, stamp: stamp, newChangeTag: Self.newChangeTag(), newShortGUID: Self.newShortGUID,
                defaultExpiration: defaultTimeToLive.map { now + $0 * 1000 })
        } catch let conflict as RecordDecision.Conflict {
            throw RecordStore.Failure(error: conflict.error, serverRecord: conflict.serverRecord)
        } catch let error as StratusError {
            throw RecordStore.Failure(error: error)
        }
        switch outcome {
        case .save(var record, let before):
            if let forRecord = input.forRecord { try noteNamedRoot(record, forRecord) }
            if ShareRecord.isShare(record.recordType) {
                record = try await shareSaved(record, before: before, proposal: input.shareProposal, in: transaction)
            } else if let share = record.share, share != before?.share {
                try noteRoot(record.recordName, of: share)
            }
            if isPublic, before == nil, !(try await schema.permits(
                .create, recordType: record.recordType, creator: nil, user: writer, database: context.database, in: transaction)) {
                throw RecordStore.Failure(error: PublicWriteAccess.createDenied(record.recordName, recordType: record.recordType))
            }
            for (field, reference) in record.references where ReferenceRules.needsLiveTarget(reference, from: record.recordName) {
                guard try await exists(reference.recordName, in: transaction) else {
                    throw RecordStore.Failure(error: ReferenceRules.missingTarget(field: field, recordName: record.recordName, target: reference.recordName))
                }
            }
            if isPublic {
                // In the public database a reference may bind only the writer's own records.
                for (field, reference) in record.references where PublicWriteAccess.binds(reference, from: record.recordName) {
                    if let target = try await load(reference.recordName, in: transaction), !(try await mayChange(target, in: transaction)) {
                        throw RecordStore.Failure(error: PublicWriteAccess.bindingDenied(field: field, recordName: record.recordName, reference: reference))
                    }
                }
            }
            // A share record is a system type: its fields (title, thumbnail) grow no schema.
            if !ShareRecord.isShare(record.recordType) {
                do {
                    record.fields = try await schema.admit(
                        record, database: context.database, causation: context.causation, held: context.schemaLocks, events: &events, in: transaction)
                } catch let error as StratusError {
                    throw RecordStore.Failure(error: error)
                }
            }
            let fields = EventCoding.encode(record.fields)
            // The save takes the zone's next version (none in a default zone).
            let version = sequence.map { $0 + 1 }
            record.version = version
            if before == nil { record.createdVersion = version }
            let limits = context.limits
            let event = try RecordStore.Failure.deciding { () throws(StratusError) -> NewEvent in
                try limits.checkRecord(record.recordName, fieldBytes: fields.count)
                return try limits.savedEvent(
                    record, before: before, zoneKey: zoneKey, zoneSequence: version, database: context.database, zone: context.zone,
                    incarnation: incarnation, causation: TraceContext.stamped(context.causation), fieldsJSON: fields)
            }
            sequence = version
            pending.append(PendingSave(
                record: record, fields: fields, created: before == nil,
                hadReferences: before?.references.contains { $0.reference.action != .none } ?? false))
            known[ExactName(record.recordName)] = .some(record)
            events.append(event)
            // Its bytes are known once the row is written (`flush`).
            applied.append(ContainerQuota.Applied(recordName: record.recordName, records: before == nil ? 1 : 0, bytes: 0))
            return .saved(record)
        case .delete(let record):
            let records = containerChange.records
            let bytes = -(try await delete([record], in: transaction))
            applied.append(ContainerQuota.Applied(recordName: record.recordName, records: containerChange.records - records, bytes: bytes))
            return .deleted(recordName: record.recordName)
        }
    }

    /// Whether the database is the public one, where records belong to their creators.
    private var isPublic: Bool { context.database.scope == .public }

    /// Whom the writer acts for.
    private var writer: String { actingUser ?? context.causation.userRecordName ?? "_server" }

    /// Whether the writer may change or delete `record`: anywhere but the public database, and there
    /// when the security roles of its record type give WRITE to a role the writer holds (by default
    /// only `_creator`, the record's creator).
    private mutating func mayChange(_ record: Record, in transaction: Transaction) async throws -> Bool {
        guard isPublic else { return true }
        return try await schema.permits(
            .write, recordType: record.recordType, creator: record.created.userRecordName, user: writer, database: context.database, in: transaction)
    }

    /// Deletes records and, transitively, every record that points at one of them with DELETE_SELF;
    /// refuses (when `checksValidation`) if a record outside that set points at one inside with
    /// VALIDATE. In the public database a reference from another user's record neither cascades nor
    /// blocks (such references are refused when saved; older ones are left dangling). The reference
    /// walk reads one level of the cascade per statement, and the tombstones are written in one, so
    /// a batch of expired records costs a handful of round trips. Returns the bytes freed.
    mutating func delete(_ roots: [Record], checksValidation: Bool = true, in transaction: Transaction) async throws -> Int64 {
        // The reference walk reads the tables: they must hold this transaction's saves first.
        try await flush(in: transaction)
        var order: [(record: Record, cascadedFrom: String?)] = roots.map { ($0, nil) }
        var names = Set(roots.map { ExactName($0.recordName) })
        var level = roots
        while !level.isEmpty {
            let referring = try await referrers(of: level.map(\.recordName), action: .deleteSelf, in: transaction)
            let unknown = Set(referring.values.joined().map(ExactName.init)).filter { known[$0] == nil }.map(\.name)
            if !unknown.isEmpty { try await lock(unknown, in: transaction) }
            var next: [Record] = []
            for record in level {
                for name in referring[ExactName(record.recordName)] ?? [] where !names.contains(ExactName(name)) {
                    guard case .some(.some(let referrer)) = known[ExactName(name)], try await mayChange(referrer, in: transaction) else { continue }
                    names.insert(ExactName(name))
                    order.append((referrer, record.recordName))
                    next.append(referrer)
                }
            }
            level = next
        }
        // A share goes with its root record.
        for (share, root) in try await sharesRooted(at: names, in: transaction) where !names.contains(ExactName(share)) {
            guard let record = try await load(share, in: transaction) else { continue }
            names.insert(ExactName(share))
            order.append((record, root))
        }
        if checksValidation {
            let validating = try await referrers(of: order.map(\.0.recordName), action: .validate, in: transaction)
            for (record, _) in order {
                for name in validating[ExactName(record.recordName)] ?? [] where !names.contains(ExactName(name)) {
                    if isPublic, let referrer = try await load(name, in: transaction), !(try await mayChange(referrer, in: transaction)) { continue }
                    throw RecordStore.Failure(error: ReferenceRules.deleteBlocked(record.recordName, referrer: name))
                }
            }
        }
        let database = context.database
        let list = names.map(\.name)
        // The rows go and their bytes are freed in one statement.
        let gone = try await transaction.connection.query("""
            WITH gone AS (
                DELETE FROM records WHERE \(zone: context.zone.zoneName, of: database) AND record_name = ANY(\(list))
                RETURNING \(unescaped: StorageUsage.usageOwner) AS usage_owner, \(unescaped: StorageUsage.recordBytes) AS bytes),
            counted AS (
                INSERT INTO storage_usage (container, environment, owner, shard, bytes)
                SELECT \(database.container), \(database.environment.rawValue), usage_owner, \(transaction.usageShard), -sum(bytes) FROM gone
                GROUP BY usage_owner HAVING sum(bytes) <> 0
                ON CONFLICT (container, environment, owner, shard) DO UPDATE SET bytes = storage_usage.bytes + EXCLUDED.bytes),
            tallied AS (
                INSERT INTO container_usage (container, shard, records, bytes)
                SELECT \(database.container), \(transaction.containerShard), -count(*), -coalesce(sum(bytes), 0) FROM gone HAVING count(*) > 0
                \(unescaped: ContainerCounts.addRecordsAndBytes))
            SELECT usage_owner, sum(bytes)::int8, count(*)::int8 FROM gone GROUP BY usage_owner
            """, logger: transaction.logger)
        var freed: Int64 = 0
        for try await (owner, bytes, count) in gone.decode((String, Int64, Int64).self) {
            usageChange[owner, default: 0] -= bytes
            freed += bytes
            containerChange.records -= count
            containerChange.bytes -= bytes
        }
        try await transaction.connection.query("""
            DELETE FROM record_references WHERE \(zone: context.zone.zoneName, of: database) AND record_name = ANY(\(list))
            """, logger: transaction.logger)
        try await sharesDeleted(order.map(\.0), in: transaction)
        for name in names {
            known[name] = .some(nil)
            stored[name] = nil
        }
        // The sync index keeps a tombstone per record so devices learn of the delete (custom zones).
        let buried = RecordDeletion.record(
            order, sequence: &sequence, zoneKey: zoneKey, database: database, zone: context.zone,
            incarnation: incarnation, causation: context.causation, events: &events)
        if !buried.isEmpty {
            mayHoldTombstones = true
            // Versions start at 1: -1 stands for "unknown" in the array.
            let created = buried.map { $0.createdVersion ?? -1 }
            try await transaction.connection.query("""
                INSERT INTO record_tombstones (container, environment, scope, owner, zone_name, record_name, record_type, created_version, deleted_version)
                SELECT \(database.container), \(database.environment.rawValue), \(database.scope.rawValue), \(database.owner), \(context.zone.zoneName),
                       t.record_name, t.record_type, NULLIF(t.created_version, -1), t.deleted_version
                FROM unnest(\(buried.map(\.recordName))::text[], \(buried.map(\.recordType))::text[], \(created)::int8[], \(buried.map(\.deletedVersion))::int8[])
                     AS t(record_name, record_type, created_version, deleted_version)
                ON CONFLICT (container, environment, scope, owner, zone_name, record_name) DO UPDATE SET
                    record_type = EXCLUDED.record_type, created_version = EXCLUDED.created_version,
                    deleted_version = EXCLUDED.deleted_version, deleted_at = now()
                """, logger: transaction.logger)
        }
        return freed
    }

    /// Writes the pending saves, appends the events and advances the zone's change counter.
    mutating func close(in transaction: Transaction) async throws {
        // A save grew a record type's schema this attempt may not: nothing of it is kept, and the
        // write runs again holding the growth locks (`SchemaGrowth`).
        if !schema.needed.isEmpty { throw SchemaGrowth(locks: schema.needed) }
        // The zone's change counter moves in the statement that appends the events.
        var advance: EventLog.ZoneAdvance?
        if let sequence, sequence != startSequence {
            advance = EventLog.ZoneAdvance(database: context.database, zoneName: context.zone.zoneName, counter: sequence)
        }
        if !pending.isEmpty, !events.isEmpty, !sharing.hasWrites {
            // The saves' rows, the events and the counter in one statement.
            try await flush(in: transaction, appending: EventLog.traced(events), advancing: advance)
        } else {
            try await flush(in: transaction)
            try await writeShares(in: transaction)
            if let advance, events.isEmpty {
                for try await _ in try await transaction.prepared(advance.query) {}
            } else {
                try await EventLog.append(events, advancing: advance, in: transaction)
            }
        }
        try await checkQuota(in: transaction)
    }

    /// Refuses the transaction (`ItemRefused`) when it adds bytes to a user who then holds more
    /// than the quota (`StorageQuota` decides, and whom to blame). The total is read from this
    /// transaction's snapshot: writers of the same user that commit meanwhile are not seen, so
    /// concurrent writers may pass the quota by what they add between them (docs/configuration.md).
    private func checkQuota(in transaction: Transaction) async throws {
        try await checkContainerQuota(in: transaction)
        let quota = context.limits.userQuotaBytes
        guard quota > 0 else { return }
        for (owner, change) in usageChange.sorted(by: { $0.key < $1.key }) where StorageQuota.needsCheck(quota: quota, change: change) {
            let total = try await StorageUsage.total(
                container: context.database.container, environment: context.database.environment.rawValue, owner: owner,
                on: transaction.connection, logger: transaction.logger)
            if let refusal = StorageQuota.refusal(quota: quota, total: total, change: change, applied: applied.map { ($0.recordName, $0.bytes) }) {
                throw RecordStore.ItemRefused(recordName: refusal.recordName, failure: RecordStore.Failure(error: refusal.error))
            }
        }
    }

    /// Refuses the transaction (`ItemRefused`) when it adds records or bytes to a container that
    /// then holds more than its quota (`ContainerQuota` decides, and whom to blame). Without a
    /// container quota, or when the transaction adds nothing one limits, it reads nothing. As with
    /// the user's quota, the totals are this transaction's snapshot's.
    private func checkContainerQuota(in transaction: Transaction) async throws {
        let quota = context.limits.containerQuota
        guard quota.needsCheck(containerChange) else { return }
        let container = context.database.container
        let total = try await ContainerCounts.totals(container: container, on: transaction.connection, logger: transaction.logger)
        if let refusal = quota.refusal(container: container, total: total, change: containerChange, applied: applied) {
            throw RecordStore.ItemRefused(recordName: refusal.recordName, failure: RecordStore.Failure(error: refusal.error))
        }
    }

    /// Reads and locks records not yet known, remembering absent ones as nil.
    mutating func lock(_ names: [String], in transaction: Transaction) async throws {
        let database = context.database
        let rows = try await transaction.query("""
            SELECT \(unescaped: RecordRow.columns), \(unescaped: StorageUsage.usageOwner), \(unescaped: StorageUsage.recordBytes) FROM records
            WHERE \(zone: context.zone.zoneName, of: database) AND \(recordNames: names)
            FOR UPDATE
            """, prepared: RecordKeys.single(names))
        for name in names { known[ExactName(name)] = .some(nil) }
        for try await row in rows { try remember(row) }
    }

    /// Remembers a record read and locked: a row of `RecordRow.columns`, its user and its bytes.
    private mutating func remember(_ row: PostgresRow) throws {
        let record = try RecordRow.record(row)
        let columns = row.makeRandomAccess()
        known[ExactName(record.recordName)] = .some(record)
        stored[ExactName(record.recordName)] = StoredRow(
            usageOwner: try columns[RecordRow.columnCount].decode(String.self), bytes: try columns[RecordRow.columnCount + 1].decode(Int64.self))
    }

    mutating func load(_ recordName: String, in transaction: Transaction) async throws -> Record? {
        if known[ExactName(recordName)] == nil { try await lock([recordName], in: transaction) }
        return known[ExactName(recordName)] ?? nil
    }

    /// Whether a record exists (and has not expired): a VALIDATE reference needs a live target.
    private func exists(_ recordName: String, in transaction: Transaction) async throws -> Bool {
        if let entry = known[ExactName(recordName)] {
            return entry.map { !$0.isExpired(at: Int64(Date().timeIntervalSince1970 * 1000)) } ?? false
        }
        let rows = try await transaction.connection.query("""
            SELECT 1 FROM records
            WHERE \(zone: context.zone.zoneName, of: context.database) AND record_name = \(recordName) AND \(unescaped: RecordExpirySQL.live)
            """, logger: transaction.logger)
        for try await _ in rows { return true }
        return false
    }

    /// The records that point at any of `recordNames` with `action`, by target, each target's in
    /// name order.
    private func referrers(of recordNames: [String], action: ReferenceAction, in transaction: Transaction) async throws -> [ExactName: [String]] {
        let rows = try await transaction.connection.query("""
            SELECT target, record_name FROM record_references
            WHERE \(zone: context.zone.zoneName, of: context.database) AND target = ANY(\(recordNames)) AND action = \(action.rawValue)
            ORDER BY target, record_name
            """, logger: transaction.logger)
        var referrers: [ExactName: [String]] = [:]
        for try await (target, name) in rows.decode((String, String).self) { referrers[ExactName(target), default: []].append(name) }
        return referrers
    }

    /// Writes the pending saves: the record rows in one upsert, their reference rows, and the
    /// tombstones of re-created records.
    mutating func flushPending(in transaction: Transaction) async throws { try await flush(in: transaction) }

    /// With `events`, the statement also appends them and sets the zone's counter (`advancing`),
    /// as `EventLog.append(_:advancing:in:)` would: one round trip for both.
    private mutating func flush(in transaction: Transaction, appending events: [NewEvent] = [], advancing zone: EventLog.ZoneAdvance? = nil) async throws {
        guard !pending.isEmpty else { return }
        let saves = pending
        pending = []
        let database = context.database
        let records = saves.map(\.record)
        let names = records.map(\.recordName)
        // The rows the saves replace, as this transaction read them: what their users' stored
        // bytes lose (`StorageUsage`), so the statement reads no row to count it.
        let replaced = names.map { stored[ExactName($0)] }
        var freedBytes: [String: Int64] = [:]
        for row in replaced.compactMap({ $0 }) { freedBytes[row.usageOwner, default: 0] += row.bytes }
        let freed = freedBytes.sorted { $0.key < $1.key }
        let freedTotal = freed.reduce(Int64(0)) { $0 + $1.value }
        // The saves of records no row held add one record each to the container's count.
        let newRecords = Int64(replaced.filter { $0 == nil }.count)
        // A re-created record is live again: its tombstone goes. The record keeps the tombstone's
        // creation version, the first version at which a device may hold some incarnation of it,
        // so a later delete is reported to every such device (sync skips tombstones of records
        // created after a device's token). A zone without tombstones has none to remove.
        let created = mayHoldTombstones ? saves.filter { $0.created && $0.record.version != nil }.map(\.record.recordName) : []
        // The rows' columns as arrays (nullable ones as array literals: `SQLArray`), one statement
        // whatever their number. It also adds what the saves changed their users' stored bytes by
        // (the new rows' sizes less the replaced ones') to `storage_usage`. Its only read is the
        // tombstones' removal: without one, or with one name (its primary key), it runs prepared.
        let rows = try await transaction.query("""
            WITH buried AS (
                DELETE FROM record_tombstones
                WHERE \(zone: context.zone.zoneName, of: database) AND \(recordNames: created) \(unescaped: created.isEmpty ? "AND false" : "")
                RETURNING record_name, created_version),
            stored AS (
            INSERT INTO records (container, environment, scope, owner, zone_name, record_name, record_type, fields, change_tag,
                created_at, created_by, created_device, modified_at, modified_by, modified_device, parent, share, short_guid, version, created_version,
                expires_at)
            SELECT \(database.container), \(database.environment.rawValue), \(database.scope.rawValue), \(database.owner), \(context.zone.zoneName),
                r.record_name, r.record_type, r.fields::jsonb, r.change_tag, r.created_at, r.created_by, r.created_device, r.modified_at, r.modified_by,
                r.modified_device, r.parent, r.share, r.short_guid, r.version, least(b.created_version, r.created_version), r.expires_at
            FROM unnest(\(names)::text[], \(records.map(\.recordType))::text[], \(saves.map { String(decoding: $0.fields, as: UTF8.self) })::text[],
                        \(records.map(\.changeTag))::text[], \(records.map(\.created.timestamp))::int8[], \(records.map(\.created.userRecordName))::text[],
                        \(SQLArray.literal(records.map(\.created.deviceID)))::text[], \(records.map(\.modified.timestamp))::int8[],
                        \(records.map(\.modified.userRecordName))::text[], \(SQLArray.literal(records.map(\.modified.deviceID)))::text[],
                        \(SQLArray.literal(records.map(\.parent)))::text[], \(SQLArray.literal(records.map(\.share)))::text[],
                        \(SQLArray.literal(records.map(\.shortGUID)))::text[], \(SQLArray.literal(records.map(\.version)))::int8[],
                        \(SQLArray.literal(records.map(\.createdVersion)))::int8[], \(SQLArray.literal(records.map(\.expirationDate)))::int8[])
                 AS r(record_name, record_type, fields, change_tag, created_at, created_by, created_device, modified_at, modified_by, modified_device,
                      parent, share, short_guid, version, created_version, expires_at)
            LEFT JOIN buried AS b ON b.record_name = r.record_name
            ON CONFLICT (container, environment, scope, owner, zone_name, record_name) DO UPDATE SET
                record_type = EXCLUDED.record_type, fields = EXCLUDED.fields, change_tag = EXCLUDED.change_tag,
                modified_at = EXCLUDED.modified_at, modified_by = EXCLUDED.modified_by, modified_device = EXCLUDED.modified_device,
                parent = EXCLUDED.parent, share = EXCLUDED.share, short_guid = EXCLUDED.short_guid, version = EXCLUDED.version,
                expires_at = EXCLUDED.expires_at
            RETURNING record_name, created_version, \(unescaped: StorageUsage.usageOwner) AS usage_owner, \(unescaped: StorageUsage.recordBytes) AS bytes),
            counted AS (
                INSERT INTO storage_usage (container, environment, owner, shard, bytes)
                SELECT \(database.container), \(database.environment.rawValue), usage_owner, \(transaction.usageShard), sum(bytes) FROM (
                    SELECT usage_owner, bytes FROM stored
                    UNION ALL
                    SELECT usage_owner, -bytes FROM unnest(\(freed.map(\.key))::text[], \(freed.map(\.value))::int8[]) AS f(usage_owner, bytes)
                ) AS change
                GROUP BY usage_owner HAVING sum(bytes) <> 0
                ON CONFLICT (container, environment, owner, shard) DO UPDATE SET bytes = storage_usage.bytes + EXCLUDED.bytes),
            tallied AS (
                INSERT INTO container_usage (container, shard, records, bytes)
                SELECT \(database.container), \(transaction.containerShard), d.records, d.bytes
                FROM (SELECT \(newRecords)::int8, (SELECT coalesce(sum(bytes), 0) FROM stored)::int8 - \(freedTotal)::int8) AS d(records, bytes)
                WHERE d.records <> 0 OR d.bytes <> 0
                \(unescaped: ContainerCounts.addRecordsAndBytes))\(thenAppending: events, advancing: zone)
            SELECT record_name, created_version, usage_owner, bytes FROM stored\(unescaped: events.isEmpty ? "" : ", notified")
            """, prepared: RecordKeys.single(created))
        containerChange.records += newRecords
        containerChange.bytes -= freedTotal
        var changes: [ExactName: Int64] = [:]
        for (name, row) in zip(names, replaced) { changes[ExactName(name)] = -(row?.bytes ?? 0) }
        for (owner, bytes) in freed { usageChange[owner, default: 0] -= bytes }
        for try await (name, createdVersion, owner, bytes) in rows.decode((String, Int64?, String, Int64).self) {
            usageChange[owner, default: 0] += bytes
            containerChange.bytes += bytes
            changes[ExactName(name), default: 0] += bytes
            stored[ExactName(name)] = StoredRow(usageOwner: owner, bytes: bytes)
            if case .some(.some(var record)) = known[ExactName(name)], record.createdVersion != createdVersion {
                record.createdVersion = createdVersion
                known[ExactName(name)] = .some(record)
            }
        }
        for index in applied.indices { if let delta = changes[ExactName(applied[index].recordName)] { applied[index].bytes += delta } }
        let stale = saves.filter(\.hadReferences).map(\.record.recordName)
        if !stale.isEmpty {
            try await transaction.connection.query("""
                DELETE FROM record_references WHERE container = \(database.container) AND environment = \(database.environment.rawValue)
                  AND scope = \(database.scope.rawValue) AND owner = \(database.owner) AND zone_name = \(context.zone.zoneName) AND record_name = ANY(\(stale))
                """, logger: transaction.logger)
        }
        var sources: [String] = []
        var targets: [String] = []
        var actions: [String] = []
        for save in saves {
            var seen = Set<[ExactName]>()
            for (_, reference) in save.record.references
            where reference.action != .none && seen.insert([ExactName(reference.recordName), ExactName(reference.action.rawValue)]).inserted {
                sources.append(save.record.recordName)
                targets.append(reference.recordName)
                actions.append(reference.action.rawValue)
            }
        }
        if !sources.isEmpty {
            try await transaction.connection.query("""
                INSERT INTO record_references (container, environment, scope, owner, zone_name, record_name, target, action)
                SELECT \(database.container), \(database.environment.rawValue), \(database.scope.rawValue), \(database.owner), \(context.zone.zoneName),
                       source, target, action
                FROM unnest(\(sources)::text[], \(targets)::text[], \(actions)::text[]) AS t(source, target, action)
                """, logger: transaction.logger)
        }
    }

    /// A new opaque change tag.
    static func newChangeTag() -> String {
        var generator = SystemRandomNumberGenerator()
        return String(UInt64.random(in: 0...UInt64.max, using: &generator), radix: 36)
    }

    /// A new short GUID for share URLs.
    static func newShortGUID() -> String {
        let alphabet = Array("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
        var generator = SystemRandomNumberGenerator()
        return String((0..<22).map { _ in alphabet[Int.random(in: 0..<alphabet.count, using: &generator)] })
    }
}

/// Reads record rows.
enum RecordRow {
    /// Live (unexpired) records of a zone by exact name, share records with their state; absent
    /// names are absent.
    static func live(_ names: [String], zone zoneName: String, of database: DatabaseID, on transaction: Transaction) async throws -> [ExactName: Record] {
        let rows = try await transaction.query("""
            SELECT \(unescaped: columns) FROM records
            WHERE \(zone: zoneName, of: database) AND \(recordNames: names) AND \(unescaped: RecordExpirySQL.live)
            """, prepared: RecordKeys.single(names))
        let records = try await ShareTables.attachStates(try await decode(rows), zone: zoneName, of: database, on: transaction.connection, logger: transaction.logger)
        return Dictionary(records.map { (ExactName($0.recordName), $0) }, uniquingKeysWith: { first, _ in first })
    }

    static let columns = """
        record_name, record_type, fields::text, change_tag, created_at, created_by, created_device, modified_at, modified_by,
        modified_device, parent, share, short_guid, version, created_version, expires_at
        """

    /// How many columns `columns` names.
    static let columnCount = 16

    static func decode<Rows: AsyncSequence>(_ rows: Rows) async throws -> [Record] where Rows.Element == PostgresRow {
        var records: [Record] = []
        for try await row in rows { records.append(try record(row)) }
        return records
    }

    /// The record of a row that starts with `columns`.
    static func record(_ row: PostgresRow) throws -> Record {
        let (name, type, fields, tag, createdAt, createdBy, createdDevice, modifiedAt, modifiedBy) =
            try row.decode((String, String, String, String, Int64, String, String?, Int64, String).self)
        let columns = row.makeRandomAccess()
        let modifiedDevice = try columns[9].decode(String?.self)
        let parent = try columns[10].decode(String?.self)
        let share = try columns[11].decode(String?.self)
        let shortGUID = try columns[12].decode(String?.self)
        let version = try columns[13].decode(Int64?.self)
        let createdVersion = try columns[14].decode(Int64?.self)
        let expirationDate = try columns[15].decode(Int64?.self)
        let decodedFields = try EventCoding.decodeFields(fields)
        return Record(
            recordName: name, recordType: type, fields: decodedFields, changeTag: tag,
            created: RecordStamp(timestamp: createdAt, userRecordName: createdBy, deviceID: createdDevice),
            modified: RecordStamp(timestamp: modifiedAt, userRecordName: modifiedBy, deviceID: modifiedDevice),
            parent: parent, share: share, shortGUID: shortGUID, version: version, createdVersion: createdVersion,
            expirationDate: expirationDate)
    }
}

extension PostgresQuery.StringInterpolation {
    /// The zone's row a writer opens with (`ZoneWriter.open`), locked: its incarnation, change
    /// counter, default time to live and whether it may hold tombstones. A default zone has no
    /// row: a constant one stands for it.
    fileprivate mutating func appendInterpolation(zoneRowOf context: WriteContext) {
        guard !context.zone.isDefaultZone else {
            appendLiteral("SELECT NULL::uuid AS incarnation, NULL::int8 AS change_counter, NULL::int8 AS default_time_to_live, false AS tombstones")
            return
        }
        appendLiteral("SELECT incarnation, change_counter, default_time_to_live, EXISTS (SELECT 1 FROM record_tombstones WHERE ")
        appendInterpolation(zone: context.zone.zoneName, of: context.database)
        appendLiteral(") AS tombstones FROM zones WHERE ")
        appendInterpolation(zone: context.zone.zoneName, of: context.database)
        appendLiteral(" AND NOT deleted FOR UPDATE")
    }
}
