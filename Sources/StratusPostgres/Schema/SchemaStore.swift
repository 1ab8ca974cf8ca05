import Foundation
import Logging
import PostgresNIO
import StratusCore

/// Schemas per container and environment (`schema_*` tables, migration 0016): read whole for
/// export, deploy and queries, and replaced whole by deploy, import and reset, each in one
/// transaction that also appends its `schema.changed` event. Saves read and grow them through
/// `SchemaCheck`, inside their own transaction.
public struct SchemaStore: Sendable {
    let store: PostgresStore

    /// Creates the schema store.
    public init(store: PostgresStore) { self.store = store }

    /// An environment's whole schema.
    public func schema(container: String, environment: Environment, logger: Logger) async throws -> Schema {
        try await store.snapshot(logger: logger) { transaction in
            try await Self.load(container: container, environment: environment, in: transaction)
        }
    }

    /// Whether the environment's schema is enforced (production, once deployed).
    public func isEnforced(container: String, environment: Environment, logger: Logger) async throws -> Bool {
        try await store.withConnection { connection in
            try await Self.enforced(container: container, environment: environment, on: connection, logger: logger)
        }
    }

    /// What a query of `recordType` may filter and sort on: nil where nothing is enforced (development,
    /// and production before its first deploy), else the record type's flags (none for a type the
    /// schema lacks).
    public func queryPolicy(container: String, environment: Environment, recordType: String, logger: Logger) async throws -> IndexPolicy? {
        // One statement: whether the environment is enforced, and the type's fields.
        let statements = store.statements
        return try await store.withConnection { connection in
            let (enforced, types) = try await Self.fields(
                container: container, environment: environment, recordTypes: [recordType],
                in: Transaction(connection: connection, logger: logger, statements: statements))
            guard enforced else { return nil }
            return Schema(recordTypes: Array(types.values)).indexPolicy
        }
    }

    /// What an operator's change did: applied, or refused with every problem.
    public enum Outcome: Sendable, Hashable {
        /// The schema was replaced.
        case applied(Schema)
        /// Nothing changed: the replacement would lose these.
        case refused([SchemaChangeProblem])
    }

    /// Copies development's schema to production, only if that adds (no record type or field of
    /// production deleted, no field's type changed); from then on production is enforced.
    public func deploy(container: String, causation: Causation, logger: Logger) async throws -> Outcome {
        try await replace(container: container, environment: .production, cause: .deploy, causation: causation, logger: logger) { transaction in
            try await Self.load(container: container, environment: .development, in: transaction)
        }
    }

    /// Makes development's schema production's again (the types and fields only development has go;
    /// records keep their values).
    public func reset(container: String, causation: Causation, logger: Logger) async throws -> Outcome {
        try await replace(container: container, environment: .development, cause: .reset, causation: causation, logger: logger) { transaction in
            try await Self.load(container: container, environment: .production, in: transaction)
        }
    }

    /// Makes `schema` (a schema file as read) development's schema, if it only adds to production's,
    /// as CloudKit's tools import a schema.
    public func importSchema(_ schema: Schema, container: String, causation: Causation, logger: Logger) async throws -> Outcome {
        try await replace(container: container, environment: .development, cause: .import, causation: causation, logger: logger) { _ in schema }
    }

    private func replace(
        container: String, environment: Environment, cause: SchemaChanged.Cause, causation: Causation, logger: Logger,
        _ source: @escaping @Sendable (Transaction) async throws -> Schema
    ) async throws -> Outcome {
        // One schema change of a container at a time; saves are not held up (they take no such lock).
        try await store.serializable(logger: logger, lock: "schema/" + container) { transaction in
            let schema = try await source(transaction).normalized
            let production = try await Self.load(container: container, environment: .production, in: transaction)
            // Production's data must stay readable: whatever replaces production, or development
            // (which is deployed later), may only add to it. A reset copies production itself.
            let problems = cause == .reset ? [] : schema.problems(replacing: production)
            guard problems.isEmpty else { return .refused(problems) }
            try await Self.write(schema, container: container, environment: environment, in: transaction)
            if environment == .production {
                try await transaction.connection.execute("""
                    INSERT INTO schema_environments (container, environment) VALUES (\(container), \(environment.rawValue))
                    ON CONFLICT (container, environment) DO UPDATE SET deployed_at = now()
                    """, logger: transaction.logger)
            }
            let event = NewEvent(
                zoneKey: SchemaChanged.key(container: container, environment: environment), zoneSequence: nil,
                payload: SchemaChanged(container: container, environment: environment, cause: cause, recordTypes: schema.recordTypes.map(\.name)),
                causation: causation)
            try await EventLog.append([event], in: transaction)
            return .applied(schema)
        }
    }

    /// The custom roles assigned to a user in an environment.
    static func roles(of user: String, container: String, environment: Environment, on connection: PostgresConnection, logger: Logger) async throws -> Set<String> {
        var roles: Set<String> = []
        for try await role in try await connection.query("""
            SELECT role_name FROM schema_role_members
            WHERE container = \(container) AND environment = \(environment.rawValue) AND user_record_name = \(user)
            """, logger: logger).decode(String.self) {
            roles.insert(role)
        }
        return roles
    }

    /// In one statement: the grants of the named record types (a type the schema lacks is absent)
    /// and the custom roles `reader` holds (none without a user). A public-database read's one read
    /// of the security roles, however many records it returns.
    static func readGrants(
        recordTypes: [String], reader: String?, database: DatabaseID, on connection: PostgresConnection, logger: Logger
    ) async throws -> PublicReadGrants {
        let rows = try await connection.query("""
            SELECT r.roles, t.record_type, t.grants::text
            FROM (SELECT ARRAY(SELECT role_name FROM schema_role_members
                               WHERE container = \(database.container) AND environment = \(database.environment.rawValue)
                                 AND user_record_name = \(reader))::text[] AS roles) AS r
            LEFT JOIN schema_record_types AS t
              ON t.container = \(database.container) AND t.environment = \(database.environment.rawValue) AND t.record_type = ANY(\(recordTypes))
            """, logger: logger)
        var grants = PublicReadGrants(types: [:], holder: RoleHolder(userRecordName: reader))
        for try await (roles, type, text) in rows.decode(([String], String?, String?).self) {
            grants.holder.roles = Set(roles)
            guard let type, let text else { continue }
            grants.types[type] = RecordTypeSchema(name: type, grants: try SchemaGrant.list(json: text))
        }
        return grants
    }

    /// The same, in a worker's transaction (stratus-subscriptions: who may be told of a public record).
    public static func readGrants(recordTypes: [String], reader: String?, database: DatabaseID, in transaction: Transaction) async throws -> PublicReadGrants {
        try await readGrants(recordTypes: recordTypes, reader: reader, database: database, on: transaction.connection, logger: transaction.logger)
    }

    /// Assigns a role the environment's schema creates to a user (or with `remove`, takes it away);
    /// false when the schema creates no such role.
    public func assignRole(
        _ role: String, to user: String, remove: Bool = false, container: String, environment: Environment, logger: Logger
    ) async throws -> Bool {
        try await store.serializable(logger: logger) { transaction in
            var exists = false
            for try await _ in try await transaction.connection.query("""
                SELECT 1 FROM schema_roles WHERE container = \(container) AND environment = \(environment.rawValue) AND role_name = \(role)
                """, logger: transaction.logger) { exists = true }
            guard exists else { return false }
            if remove {
                try await transaction.connection.execute("""
                    DELETE FROM schema_role_members WHERE container = \(container) AND environment = \(environment.rawValue)
                      AND role_name = \(role) AND user_record_name = \(user)
                    """, logger: transaction.logger)
            } else {
                try await transaction.connection.execute("""
                    INSERT INTO schema_role_members (container, environment, role_name, user_record_name)
                    VALUES (\(container), \(environment.rawValue), \(role), \(user)) ON CONFLICT DO NOTHING
                    """, logger: transaction.logger)
            }
            return true
        }
    }

    /// The users holding the custom roles of an environment, by role, at most `limit` in all (in
    /// role, then user order).
    public func roleMembers(container: String, environment: Environment, limit: Int, logger: Logger) async throws -> [String: [String]] {
        try await store.withConnection { connection in
            var members: [String: [String]] = [:]
            for try await (role, user) in try await connection.query("""
                SELECT role_name, user_record_name FROM schema_role_members
                WHERE container = \(container) AND environment = \(environment.rawValue)
                ORDER BY role_name, user_record_name LIMIT \(limit)
                """, logger: logger).decode((String, String).self) {
                members[role, default: []].append(user)
            }
            return members
        }
    }

    static func enforced(container: String, environment: Environment, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        let rows = try await connection.query("""
            SELECT 1 FROM schema_environments WHERE container = \(container) AND environment = \(environment.rawValue)
            """, logger: logger)
        for try await _ in rows { return true }
        return false
    }

    /// In one statement: whether the environment is enforced, and the fields of the named record
    /// types (a type the schema lacks is absent). A save's one read of the schema when its writer
    /// did not read it with the zone (`ZoneWriter.open`).
    static func fields(
        container: String, environment: Environment, recordTypes: [String], in transaction: Transaction
    ) async throws -> SchemaRow.Read {
        let rows = try await transaction.prepared("\(schemaOf: recordTypes, container: container, environment: environment)")
        for try await row in rows { return try SchemaRow.decode(row.makeRandomAccess(), at: 0) }
        throw StratusError(.internalError, "The schema could not be read")
    }

    static func field(name: String, type text: String, queryable: Bool, searchable: Bool, sortable: Bool) throws -> SchemaField {
        guard let type = SchemaLanguage.fieldType(text) else {
            throw StratusError(.internalError, "The stored schema has a field type that cannot be read")
        }
        var indexes: FieldIndexes = []
        if queryable { indexes.insert(.queryable) }
        if searchable { indexes.insert(.searchable) }
        if sortable { indexes.insert(.sortable) }
        return SchemaField(name: name, type: type, indexes: indexes)
    }

    /// An environment's whole schema, read in `transaction`.
    static func load(container: String, environment: Environment, in transaction: Transaction) async throws -> Schema {
        let connection = transaction.connection
        let logger = transaction.logger
        var schema = Schema()
        for try await role in try await connection.query("""
            SELECT role_name FROM schema_roles WHERE container = \(container) AND environment = \(environment.rawValue)
            """, logger: logger).decode(String.self) {
            schema.roles.append(role)
        }
        var types: [String: RecordTypeSchema] = [:]
        for try await (name, grants) in try await connection.query("""
            SELECT record_type, grants::text FROM schema_record_types WHERE container = \(container) AND environment = \(environment.rawValue)
            """, logger: logger).decode((String, String).self) {
            types[name] = RecordTypeSchema(name: name, grants: try SchemaGrant.list(json: grants))
        }
        for try await (type, name, typeText, queryable, searchable, sortable) in try await connection.query("""
            SELECT record_type, field_name, field_type, queryable, searchable, sortable FROM schema_fields
            WHERE container = \(container) AND environment = \(environment.rawValue)
            """, logger: logger).decode((String, String, String, Bool, Bool, Bool).self) {
            types[type]?.fields.append(try field(name: name, type: typeText, queryable: queryable, searchable: searchable, sortable: sortable))
        }
        schema.recordTypes = Array(types.values)
        return schema.normalized
    }

    /// Replaces an environment's whole schema.
    static func write(_ schema: Schema, container: String, environment: Environment, in transaction: Transaction) async throws {
        let connection = transaction.connection
        let logger = transaction.logger
        try await connection.execute("""
            DELETE FROM schema_record_types WHERE container = \(container) AND environment = \(environment.rawValue)
            """, logger: logger)
        try await connection.execute("""
            DELETE FROM schema_roles WHERE container = \(container) AND environment = \(environment.rawValue)
            """, logger: logger)
        try await connection.execute("""
            INSERT INTO schema_roles (container, environment, role_name)
            SELECT \(container), \(environment.rawValue), role FROM unnest(\(schema.roles)::text[]) AS r(role)
            """, logger: logger)
        try await insert(schema.recordTypes, fieldsOnly: false, container: container, environment: environment, on: connection, logger: logger)
    }

    /// Inserts record types (their rows and fields), or with `fieldsOnly` only the fields of types
    /// that exist. Rows that exist already are left as they are: a concurrent save that added the
    /// same field first wins, and this transaction, finding it unseen in its snapshot, is retried.
    static func insert(
        _ types: [RecordTypeSchema], fieldsOnly: Bool, container: String, environment: Environment, on connection: PostgresConnection, logger: Logger
    ) async throws {
        if !fieldsOnly {
            let names = types.map(\.name)
            let grants = types.map { String(decoding: EventCoding.encode($0.grants), as: UTF8.self) }
            try await connection.execute("""
                INSERT INTO schema_record_types (container, environment, record_type, grants)
                SELECT \(container), \(environment.rawValue), t.name, t.grants::jsonb FROM unnest(\(names)::text[], \(grants)::text[]) AS t(name, grants)
                ON CONFLICT DO NOTHING
                """, logger: logger)
        }
        let fields = types.flatMap { type in type.fields.map { (type.name, $0) } }
        guard !fields.isEmpty else { return }
        try await connection.execute("""
            INSERT INTO schema_fields (container, environment, record_type, field_name, field_type, queryable, searchable, sortable)
            SELECT \(container), \(environment.rawValue), f.record_type, f.field_name, f.field_type, f.queryable, f.searchable, f.sortable
            FROM unnest(\(fields.map(\.0))::text[], \(fields.map(\.1.name))::text[], \(fields.map(\.1.type.description))::text[],
                        \(fields.map { $0.1.indexes.contains(.queryable) })::bool[], \(fields.map { $0.1.indexes.contains(.searchable) })::bool[],
                        \(fields.map { $0.1.indexes.contains(.sortable) })::bool[])
                 AS f(record_type, field_name, field_type, queryable, searchable, sortable)
            ON CONFLICT DO NOTHING
            """, logger: logger)
    }
}

/// A save that must grow its record type's schema without holding the type's growth lock: it is
/// run again, from a new snapshot, holding the lock.
///
/// Saves of one new type or field would otherwise race to insert the same schema rows, and under
/// REPEATABLE READ every loser aborts (it cannot see the winner's row): independent writers — other
/// zones, other users — would abort each other. Holding the lock from before the snapshot is taken,
/// growers of one record type take turns, each seeing what the one before committed. Saves that
/// find their fields in place (all but the first few) never take it.
struct SchemaGrowth: Error {
    /// The advisory lock keys of the record types to grow (`SchemaGrowthPlan.lock`).
    var locks: [String]

    /// Runs `write` with no growth lock and, when an attempt found record types to grow, once more
    /// holding their locks (again only if meanwhile another type turned out to need growing).
    static func holdingLocks<T>(_ write: ([String]) async throws -> T) async throws -> T {
        var locks: [String] = []
        while true {
            do {
                return try await write(locks)
            } catch let growth as SchemaGrowth where !Set(growth.locks).isSubset(of: locks) {
                locks = Array(Set(locks).union(growth.locks)).sorted()
            }
        }
    }
}

/// The schema's part in one save transaction: reads each record type's schema once (in the
/// transaction, so never stale) and the writer's custom roles when a grant needs them, and carries
/// out what Core decides from them: what a save does to the schema (`SchemaGrowthPlan`: development
/// grows, production once deployed refuses what its schema lacks) and, in the public database, what
/// the record type's security roles let the writer do (`PublicWriteAccess`).
struct SchemaCheck {
    /// nil until the first read.
    var enforced: Bool?
    /// The record types read or grown in this transaction; absent types as nil.
    var types: [String: RecordTypeSchema?] = [:]
    /// The writer's custom roles, read once when a grant names one.
    var roles: Set<String>?
    /// The growth locks of the record types this attempt must grow but may not (`SchemaGrowth`).
    var needed: [String] = []

    /// Reads a record type's schema (and whether the environment is enforced) unless this
    /// transaction has read it.
    mutating func load(_ recordType: String, database: DatabaseID, in transaction: Transaction) async throws {
        guard enforced == nil || types[recordType] == nil else { return }
        let (isEnforced, read) = try await SchemaStore.fields(
            container: database.container, environment: database.environment, recordTypes: [recordType], in: transaction)
        enforced = isEnforced
        types[recordType] = .some(read[recordType])
    }

    /// Whether `user` may `permission` a record of `recordType` created by `creator` (nil: creating
    /// one), by the type's grants; a type the schema lacks has CloudKit's default grants.
    mutating func permits(
        _ permission: SchemaPermission, recordType: String, creator: String?, user: String?, database: DatabaseID, in transaction: Transaction
    ) async throws -> Bool {
        try await load(recordType, database: database, in: transaction)
        let schema = types[recordType] ?? nil
        if let permitted = PublicWriteAccess.permits(permission, recordType: recordType, schema: schema, creator: creator, user: user, roles: roles) {
            return permitted
        }
        // The grants name a custom role: the answer needs the writer's roles, read once.
        guard let user else { return false }
        let read = try await SchemaStore.roles(of: user, container: database.container, environment: database.environment,
                                               on: transaction.connection, logger: transaction.logger)
        roles = read
        return PublicWriteAccess.permits(permission, recordType: recordType, schema: schema, creator: creator, user: user, roles: read) ?? false
    }

    /// The record's fields as stored (`SchemaAdmission`), after growing the schema when the save
    /// brings new types or fields; `events` gets the `schema.changed` event of the growth.
    mutating func admit(
        _ record: Record, database: DatabaseID, causation: Causation, held: Set<String>, events: inout [NewEvent], in transaction: Transaction
    ) async throws -> [String: FieldValue] {
        try await load(record.recordType, database: database, in: transaction)
        let plan = try SchemaGrowthPlan.decide(
            record, schema: types[record.recordType] ?? nil, enforced: enforced ?? false, database: database, held: held, causation: causation)
        // Later records of this transaction are checked against the grown type either way.
        if let grown = plan.grown { types[record.recordType] = .some(grown) }
        switch plan.growth {
        case nil:
            break
        case .needsLock(let lock):
            // Not this attempt's to grow: the write goes on (a later failure still decides the
            // request) and `close` asks for another attempt holding the lock.
            if !needed.contains(lock) { needed.append(lock) }
        case .grow(let added, let fieldsOnly, let event):
            try await SchemaStore.insert([added], fieldsOnly: fieldsOnly, container: database.container, environment: database.environment,
                                         on: transaction.connection, logger: transaction.logger)
            events.append(event)
        }
        return plan.fields
    }
}

/// The schema a save reads (`\(schemaOf:container:environment:)`): one row, whether the environment
/// is enforced and the named record types' fields as parallel arrays, so a statement that reads
/// other rows (`ZoneWriter.open`) can carry it in one of its own.
enum SchemaRow {
    /// How many columns the row has.
    static let columnCount = 8

    /// What the row says: whether the environment is enforced, and the types found by name.
    typealias Read = (enforced: Bool, types: [String: RecordTypeSchema])

    /// The row's schema, its columns starting at `first`.
    static func decode(_ columns: PostgresRandomAccessRow, at first: Int) throws -> Read {
        let enforced = try columns[first].decode(Bool.self)
        let recordTypes = try columns[first + 1].decode([String].self)
        let names = try columns[first + 2].decode([String].self)
        let fieldTypes = try columns[first + 3].decode([String].self)
        let queryable = try columns[first + 4].decode([Bool].self)
        let searchable = try columns[first + 5].decode([Bool].self)
        let sortable = try columns[first + 6].decode([Bool].self)
        let grants = try columns[first + 7].decode([String].self)
        let count = recordTypes.count
        guard [names.count, fieldTypes.count, queryable.count, searchable.count, sortable.count, grants.count].allSatisfy({ $0 == count }) else {
            throw StratusError(.internalError, "The stored schema could not be read")
        }
        var types: [String: RecordTypeSchema] = [:]
        for index in 0..<count {
            let type = recordTypes[index]
            let field = try SchemaStore.field(
                name: names[index], type: fieldTypes[index], queryable: queryable[index], searchable: searchable[index], sortable: sortable[index])
            if types[type] == nil { types[type] = RecordTypeSchema(name: type, grants: try SchemaGrant.list(json: grants[index])) }
            types[type]?.fields.append(field)
        }
        return (enforced, types)
    }
}

extension PostgresQuery.StringInterpolation {
    /// The SELECT of `SchemaRow`'s one row: whether the environment is enforced, and the fields of
    /// `recordTypes` with their type's grants (an aggregate over no field is still one row).
    mutating func appendInterpolation(schemaOf recordTypes: [String], container: String, environment: Environment) {
        appendLiteral("SELECT EXISTS (SELECT 1 FROM schema_environments WHERE container = ")
        appendInterpolation(container)
        appendLiteral(" AND environment = ")
        appendInterpolation(environment.rawValue)
        appendLiteral("""
            ),
                   coalesce(array_agg(f.record_type), '{}'), coalesce(array_agg(f.field_name), '{}'), coalesce(array_agg(f.field_type), '{}'),
                   coalesce(array_agg(f.queryable), '{}'), coalesce(array_agg(f.searchable), '{}'), coalesce(array_agg(f.sortable), '{}'),
                   coalesce(array_agg(t.grants::text), '{}')
            FROM schema_fields AS f
            JOIN schema_record_types AS t ON t.container = f.container AND t.environment = f.environment AND t.record_type = f.record_type
            """)
        appendLiteral("\nWHERE f.container = ")
        appendInterpolation(container)
        appendLiteral(" AND f.environment = ")
        appendInterpolation(environment.rawValue)
        appendLiteral(" AND f.record_type = ANY(")
        appendInterpolation(recordTypes)
        appendLiteral(")")
    }
}
