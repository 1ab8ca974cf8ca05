import Foundation
import Logging
import PostgresNIO
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
        /// Creates a command.
        public init(type: RecordOperationType, input: RecordInput) {
            self.type = type
            self.input = input
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
    }

    /// Limits a write must respect.
    public struct Limits: Sendable {
        /// Bytes of one record's fields, encoded.
        public var maxRecordBytes: Int = 1_000_000
        /// Creates the defaults.
        public init() {}
    }

    /// Applies commands to one zone. Atomic: one transaction; the first failure fails all, the
    /// others get ATOMIC_ERROR. Not atomic: each command is its own transaction and reports its own
    /// outcome, so no item is ever reported stored that was not.
    public func modify(
        _ commands: [Command], zone: ZoneID, in database: DatabaseID, atomic: Bool, causation: Causation, deviceID: String?,
        limits: Limits = Limits(), logger: Logger
    ) async throws -> [Result<Outcome, Failure>] {
        let context = WriteContext(database: database, zone: zone, causation: causation, deviceID: deviceID, limits: limits)
        if atomic {
            do {
                return try await store.serializable(logger: logger, lock: context.zoneKey.rawValue) { transaction in
                    var writer = try await ZoneWriter.open(context, in: transaction)
                    var outcomes: [Result<Outcome, Failure>] = []
                    for (index, command) in commands.enumerated() {
                        do {
                            outcomes.append(.success(try await writer.apply(command, in: transaction)))
                        } catch let failure as Failure {
                            throw AtomicAbort(index: index, failure: failure)
                        }
                    }
                    try await writer.close(in: transaction)
                    return outcomes
                }
            } catch let abort as AtomicAbort {
                return commands.indices.map { index in
                    index == abort.index ? .failure(abort.failure) : .failure(Failure(error: StratusError(
                        .atomicError, "Not applied: the atomic request failed at record '\(commands[abort.index].input.recordName.prefix(255))'")))
                }
            }
        }
        var outcomes: [Result<Outcome, Failure>] = []
        for command in commands {
            do {
                // Custom zones serialise on the zone; default zones only on the record.
                let lock = zone.isDefaultZone ? context.zoneKey.rawValue + "/" + command.input.recordName : context.zoneKey.rawValue
                let outcome = try await store.serializable(logger: logger, lock: lock) { transaction in
                    var writer = try await ZoneWriter.open(context, in: transaction)
                    let outcome = try await writer.apply(command, in: transaction)
                    try await writer.close(in: transaction)
                    return outcome
                }
                outcomes.append(.success(outcome))
            } catch let failure as Failure {
                outcomes.append(.failure(failure))
            } catch let error as StratusError where error.code != .tryAgainLater && error.code != .zoneNotFound {
                outcomes.append(.failure(Failure(error: error)))
            }
        }
        return outcomes
    }

    /// Records by name in one zone; absent names are absent from the result.
    public func lookup(_ recordNames: [String], zone: ZoneID, in database: DatabaseID, logger: Logger) async throws -> [String: Record] {
        try await store.withConnection { connection in
            if !zone.isDefaultZone {
                let rows = try await connection.query("""
                    SELECT 1 FROM zones WHERE container = \(database.container) AND environment = \(database.environment.rawValue)
                      AND scope = \(database.scope.rawValue) AND owner = \(database.owner) AND zone_name = \(zone.zoneName) AND NOT deleted
                    """, logger: logger)
                var exists = false
                for try await _ in rows { exists = true }
                guard exists else { throw StratusError(.zoneNotFound, "Zone '\(zone.zoneName.prefix(255))' does not exist") }
            }
            let rows = try await connection.query("""
                SELECT \(unescaped: RecordRow.columns) FROM records
                WHERE container = \(database.container) AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue)
                  AND owner = \(database.owner) AND zone_name = \(zone.zoneName) AND record_name = ANY(\(recordNames))
                """, logger: logger)
            var records: [String: Record] = [:]
            for record in try await RecordRow.decode(rows) { records[record.recordName] = record }
            return records
        }
    }

    struct AtomicAbort: Error {
        var index: Int
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

    var zoneKey: ZoneKey { ZoneKey(database: database, zoneName: zone.zoneName) }
}

/// The writes of one transaction to one zone: loads and locks the zone's counter (custom zones),
/// applies commands, appends their events, and advances the counter at the end.
struct ZoneWriter {
    let context: WriteContext
    let incarnation: UUID?
    var sequence: Int64?
    let startSequence: Int64?
    var events: [NewEvent] = []

    static func open(_ context: WriteContext, in transaction: Transaction) async throws -> ZoneWriter {
        guard !context.zone.isDefaultZone else {
            return ZoneWriter(context: context, incarnation: nil, sequence: nil, startSequence: nil)
        }
        let database = context.database
        let rows = try await transaction.connection.query("""
            SELECT incarnation, change_counter FROM zones
            WHERE container = \(database.container) AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue)
              AND owner = \(database.owner) AND zone_name = \(context.zone.zoneName) AND NOT deleted
            FOR UPDATE
            """, logger: transaction.logger)
        for try await (incarnation, counter) in rows.decode((UUID, Int64).self) {
            return ZoneWriter(context: context, incarnation: incarnation, sequence: counter, startSequence: counter)
        }
        throw StratusError(.zoneNotFound, "Zone '\(context.zone.zoneName.prefix(255))' does not exist")
    }

    var zoneKey: ZoneKey { context.zoneKey }

    mutating func nextSequence() -> Int64? {
        guard let current = sequence else { return nil }
        sequence = current + 1
        return current + 1
    }

    mutating func apply(_ command: RecordStore.Command, in transaction: Transaction) async throws -> RecordStore.Outcome {
        let input = command.input
        let current = try await load(input.recordName, in: transaction)
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let stamp = RecordStamp(timestamp: now, userRecordName: context.causation.userRecordName ?? "_server", deviceID: context.deviceID)
        let outcome: RecordDecision.Outcome
        do {
            outcome = try RecordDecision.decide(command.type, input, current: current, stamp: stamp, newChangeTag: Self.newChangeTag(), newShortGUID: Self.newShortGUID)
        } catch let conflict as RecordDecision.Conflict {
            throw RecordStore.Failure(error: conflict.error, serverRecord: conflict.serverRecord)
        } catch let error as StratusError {
            throw RecordStore.Failure(error: error)
        }
        switch outcome {
        case .save(var record, let before):
            for (field, reference) in record.references where reference.action == .validate {
                guard reference.recordName == record.recordName ? true : try await exists(reference.recordName, in: transaction) else {
                    throw RecordStore.Failure(error: StratusError(.validatingReferenceError,
                        "Field '\(field)' of record '\(record.recordName.prefix(255))' refers to '\(reference.recordName.prefix(255))', which does not exist"))
                }
            }
            let fields = EventCoding.encode(record.fields)
            guard fields.count <= context.limits.maxRecordBytes else {
                throw RecordStore.Failure(error: StratusError(.limitExceeded,
                    "Record '\(record.recordName.prefix(255))' is \(fields.count) bytes; the limit is \(context.limits.maxRecordBytes)"))
            }
            let version = nextSequence()
            record.version = version
            if before == nil { record.createdVersion = version }
            try await store(record, fields: fields, in: transaction)
            if before == nil, version != nil {
                // A re-created record is live again: its old tombstone no longer applies.
                let database = context.database
                try await transaction.connection.query("""
                    DELETE FROM record_tombstones WHERE container = \(database.container) AND environment = \(database.environment.rawValue)
                      AND scope = \(database.scope.rawValue) AND owner = \(database.owner) AND zone_name = \(context.zone.zoneName)
                      AND record_name = \(record.recordName)
                    """, logger: transaction.logger)
            }
            events.append(NewEvent(zoneKey: zoneKey, zoneSequence: version, payload: RecordSaved(
                database: context.database, zoneID: context.zone, zoneIncarnation: incarnation, record: record, before: before), causation: context.causation))
            return .saved(record)
        case .delete(let record):
            try await delete(record, in: transaction)
            return .deleted(recordName: record.recordName)
        }
    }

    /// Deletes a record and, transitively, every record that points at it with DELETE_SELF; refuses
    /// when a record outside that set points at one inside with VALIDATE.
    private mutating func delete(_ root: Record, in transaction: Transaction) async throws {
        var order: [(Record, cascadedFrom: String?)] = [(root, nil)]
        var names: Set<String> = [root.recordName]
        var index = 0
        while index < order.count {
            let (record, _) = order[index]
            index += 1
            for name in try await referrers(of: record.recordName, action: .deleteSelf, in: transaction) where !names.contains(name) {
                guard let referrer = try await load(name, in: transaction) else { continue }
                names.insert(name)
                order.append((referrer, record.recordName))
            }
        }
        for (record, _) in order {
            for name in try await referrers(of: record.recordName, action: .validate, in: transaction) where !names.contains(name) {
                throw RecordStore.Failure(error: StratusError(.validatingReferenceError,
                    "Record '\(record.recordName.prefix(255))' cannot be deleted: '\(name.prefix(255))' refers to it with VALIDATE"))
            }
        }
        let database = context.database
        let list = Array(names)
        try await transaction.connection.query("""
            DELETE FROM records WHERE container = \(database.container) AND environment = \(database.environment.rawValue)
              AND scope = \(database.scope.rawValue) AND owner = \(database.owner) AND zone_name = \(context.zone.zoneName) AND record_name = ANY(\(list))
            """, logger: transaction.logger)
        try await transaction.connection.query("""
            DELETE FROM record_references WHERE container = \(database.container) AND environment = \(database.environment.rawValue)
              AND scope = \(database.scope.rawValue) AND owner = \(database.owner) AND zone_name = \(context.zone.zoneName) AND record_name = ANY(\(list))
            """, logger: transaction.logger)
        for (record, cascadedFrom) in order {
            let version = nextSequence()
            if let version {
                // The sync index keeps a tombstone so devices learn of the delete.
                try await transaction.connection.query("""
                    INSERT INTO record_tombstones (container, environment, scope, owner, zone_name, record_name, record_type, created_version, deleted_version)
                    VALUES (\(database.container), \(database.environment.rawValue), \(database.scope.rawValue), \(database.owner), \(context.zone.zoneName),
                            \(record.recordName), \(record.recordType), \(record.createdVersion), \(version))
                    ON CONFLICT (container, environment, scope, owner, zone_name, record_name) DO UPDATE SET
                        record_type = EXCLUDED.record_type, created_version = EXCLUDED.created_version,
                        deleted_version = EXCLUDED.deleted_version, deleted_at = now()
                    """, logger: transaction.logger)
            }
            events.append(NewEvent(zoneKey: zoneKey, zoneSequence: version, payload: RecordDeleted(
                database: database, zoneID: context.zone, zoneIncarnation: incarnation, record: record, cascadedFrom: cascadedFrom), causation: context.causation))
        }
    }

    /// Appends the events and advances the zone's change counter.
    func close(in transaction: Transaction) async throws {
        try await EventLog.append(events, on: transaction.connection, logger: transaction.logger)
        if let sequence, sequence != startSequence {
            let database = context.database
            try await transaction.connection.query("""
                UPDATE zones SET change_counter = \(sequence), modified_at = now()
                WHERE container = \(database.container) AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue)
                  AND owner = \(database.owner) AND zone_name = \(context.zone.zoneName)
                """, logger: transaction.logger)
        }
    }

    private func load(_ recordName: String, in transaction: Transaction) async throws -> Record? {
        let database = context.database
        let rows = try await transaction.connection.query("""
            SELECT \(unescaped: RecordRow.columns) FROM records
            WHERE container = \(database.container) AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue)
              AND owner = \(database.owner) AND zone_name = \(context.zone.zoneName) AND record_name = \(recordName)
            FOR UPDATE
            """, logger: transaction.logger)
        return try await RecordRow.decode(rows).first
    }

    private func exists(_ recordName: String, in transaction: Transaction) async throws -> Bool {
        let database = context.database
        let rows = try await transaction.connection.query("""
            SELECT 1 FROM records
            WHERE container = \(database.container) AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue)
              AND owner = \(database.owner) AND zone_name = \(context.zone.zoneName) AND record_name = \(recordName)
            """, logger: transaction.logger)
        for try await _ in rows { return true }
        return false
    }

    private func referrers(of recordName: String, action: ReferenceAction, in transaction: Transaction) async throws -> [String] {
        let database = context.database
        let rows = try await transaction.connection.query("""
            SELECT record_name FROM record_references
            WHERE container = \(database.container) AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue)
              AND owner = \(database.owner) AND zone_name = \(context.zone.zoneName) AND target = \(recordName) AND action = \(action.rawValue)
            ORDER BY record_name
            """, logger: transaction.logger)
        var names: [String] = []
        for try await name in rows.decode(String.self) { names.append(name) }
        return names
    }

    private func store(_ record: Record, fields: Data, in transaction: Transaction) async throws {
        let database = context.database
        let fieldsText = String(decoding: fields, as: UTF8.self)
        try await transaction.connection.query("""
            INSERT INTO records (container, environment, scope, owner, zone_name, record_name, record_type, fields, change_tag,
                created_at, created_by, created_device, modified_at, modified_by, modified_device, parent, share, short_guid, version, created_version)
            VALUES (\(database.container), \(database.environment.rawValue), \(database.scope.rawValue), \(database.owner), \(context.zone.zoneName),
                \(record.recordName), \(record.recordType), \(fieldsText)::jsonb, \(record.changeTag),
                \(record.created.timestamp), \(record.created.userRecordName), \(record.created.deviceID),
                \(record.modified.timestamp), \(record.modified.userRecordName), \(record.modified.deviceID),
                \(record.parent), \(record.share), \(record.shortGUID), \(record.version), \(record.createdVersion))
            ON CONFLICT (container, environment, scope, owner, zone_name, record_name) DO UPDATE SET
                record_type = EXCLUDED.record_type, fields = EXCLUDED.fields, change_tag = EXCLUDED.change_tag,
                modified_at = EXCLUDED.modified_at, modified_by = EXCLUDED.modified_by, modified_device = EXCLUDED.modified_device,
                parent = EXCLUDED.parent, share = EXCLUDED.share, short_guid = EXCLUDED.short_guid, version = EXCLUDED.version
            """, logger: transaction.logger)
        try await transaction.connection.query("""
            DELETE FROM record_references WHERE container = \(database.container) AND environment = \(database.environment.rawValue)
              AND scope = \(database.scope.rawValue) AND owner = \(database.owner) AND zone_name = \(context.zone.zoneName) AND record_name = \(record.recordName)
            """, logger: transaction.logger)
        var seen = Set<String>()
        for (_, reference) in record.references where reference.action != .none && seen.insert("\(reference.recordName)\u{0}\(reference.action.rawValue)").inserted {
            try await transaction.connection.query("""
                INSERT INTO record_references (container, environment, scope, owner, zone_name, record_name, target, action)
                VALUES (\(database.container), \(database.environment.rawValue), \(database.scope.rawValue), \(database.owner),
                        \(context.zone.zoneName), \(record.recordName), \(reference.recordName), \(reference.action.rawValue))
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
    static let columns = """
        record_name, record_type, fields::text, change_tag, created_at, created_by, created_device, modified_at, modified_by,
        modified_device, parent, share, short_guid, version, created_version
        """

    static func decode(_ rows: PostgresRowSequence) async throws -> [Record] {
        var records: [Record] = []
        for try await row in rows {
            let (name, type, fields, tag, createdAt, createdBy, createdDevice, modifiedAt, modifiedBy) =
                try row.decode((String, String, String, String, Int64, String, String?, Int64, String).self)
            let columns = row.makeRandomAccess()
            let modifiedDevice = try columns[9].decode(String?.self)
            let parent = try columns[10].decode(String?.self)
            let share = try columns[11].decode(String?.self)
            let shortGUID = try columns[12].decode(String?.self)
            let version = try columns[13].decode(Int64?.self)
            let createdVersion = try columns[14].decode(Int64?.self)
            let decodedFields = try EventCoding.decoder.decode([String: FieldValue].self, from: Data(fields.utf8))
            records.append(Record(
                recordName: name, recordType: type, fields: decodedFields, changeTag: tag,
                created: RecordStamp(timestamp: createdAt, userRecordName: createdBy, deviceID: createdDevice),
                modified: RecordStamp(timestamp: modifiedAt, userRecordName: modifiedBy, deviceID: modifiedDevice),
                parent: parent, share: share, shortGUID: shortGUID, version: version, createdVersion: createdVersion))
        }
        return records
    }
}
