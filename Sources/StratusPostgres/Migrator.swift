import Crypto
import Foundation
import Logging
import PostgresNIO

/// One numbered SQL file from `migrations/`.
public struct Migration: Sendable, Hashable {
    /// The number the file name starts with.
    public var version: Int
    /// The file name.
    public var name: String
    /// The SQL text.
    public var sql: String
    /// SHA-256 of the text, hex: an applied file that changes afterwards is an error.
    public var checksum: String { SHA256.hash(data: Data(sql.utf8)).map { String(format: "%02x", $0) }.joined() }

    /// Creates a migration.
    public init(version: Int, name: String, sql: String) {
        self.version = version
        self.name = name
        self.sql = sql
    }

    /// Loads `NNNN_name.sql` files from a folder, ordered by number; duplicate numbers are an error.
    public static func load(from directory: URL) throws -> [Migration] {
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasSuffix(".sql") }
        var migrations: [Migration] = []
        for name in names {
            guard let version = Int(name.prefix(while: \.isNumber)) else {
                throw MigrationError("migration file \(name) must start with its number, e.g. 0001_name.sql")
            }
            let sql = try String(contentsOf: directory.appendingPathComponent(name), encoding: .utf8)
            migrations.append(Migration(version: version, name: name, sql: sql))
        }
        migrations.sort { $0.version < $1.version }
        for (a, b) in zip(migrations, migrations.dropFirst()) where a.version == b.version {
            throw MigrationError("migrations \(a.name) and \(b.name) share number \(a.version)")
        }
        return migrations
    }

    /// Finds the migrations folder: `STRATUS_MIGRATIONS_DIR`, `./migrations`, the installed share folder, or the source tree.
    public static func defaultDirectory(environment: [String: String] = ProcessInfo.processInfo.environment) -> URL {
        var candidates: [String] = []
        if let configured = environment["STRATUS_MIGRATIONS_DIR"] { return URL(fileURLWithPath: configured) }
        candidates.append(FileManager.default.currentDirectoryPath + "/migrations")
        candidates.append("/usr/share/stratus/migrations")
        // The source tree, for builds run from a checkout (tests, the local stack).
        let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        candidates.append(source.appendingPathComponent("migrations").path)
        let found = candidates.first { FileManager.default.fileExists(atPath: $0 + "/0001_spine.sql") }
        return URL(fileURLWithPath: found ?? candidates.last!)
    }
}

/// A migration problem, described for an operator.
public struct MigrationError: Error, Sendable, CustomStringConvertible {
    /// What is wrong.
    public var description: String
    /// Creates the error.
    public init(_ description: String) { self.description = description }
}

/// Applies migrations in order, each in its own transaction, recording version and checksum.
public struct Migrator: Sendable {
    let store: PostgresStore
    let migrations: [Migration]

    /// Creates a migrator over the given migrations.
    public init(store: PostgresStore, migrations: [Migration]) {
        self.store = store
        self.migrations = migrations
    }

    /// Applies what is pending and returns the applied migrations' names. Re-running is a no-op.
    /// Holds an advisory lock so two processes never migrate at once.
    @discardableResult
    public func migrate(logger: Logger) async throws -> [String] {
        try await store.withConnection { connection in
            // A migration may build indexes for longer than the pool's statement limit, and may wait
            // for another process's migration: this session lifts both limits (and restores them).
            try await connection.execute("SET statement_timeout = 0", logger: logger)
            try await connection.execute("SET lock_timeout = 0", logger: logger)
            try await connection.execute("SELECT pg_advisory_lock(\(Self.lockKey))", logger: logger)
            do {
                try await Self.ensureTable(connection, logger: logger)
                let applied = try await Self.applied(connection, logger: logger)
                try verifyChecksums(applied)
                var done: [String] = []
                for migration in migrations where applied[migration.version] == nil {
                    try await connection.query("BEGIN", logger: logger)
                    do {
                        for statement in SQLScript.statements(migration.sql) {
                            try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                        }
                        try await connection.query(
                            "INSERT INTO schema_migrations (version, name, checksum) VALUES (\(migration.version), \(migration.name), \(migration.checksum))",
                            logger: logger)
                        try await connection.commit()
                    } catch {
                        _ = try? await connection.query("ROLLBACK", logger: logger)
                        throw MigrationError("migration \(migration.name) failed: \(String(reflecting: error))")
                    }
                    logger.info("applied migration", metadata: ["migration": "\(migration.name)"])
                    done.append(migration.name)
                }
                try await connection.execute("SELECT pg_advisory_unlock(\(Self.lockKey))", logger: logger)
                try await Self.restoreLimits(connection, logger: logger)
                return done
            } catch {
                try? await connection.execute("SELECT pg_advisory_unlock(\(Self.lockKey))", logger: logger)
                try? await Self.restoreLimits(connection, logger: logger)
                throw error
            }
        }
    }

    /// Gives the connection back the pool's limits (RESET returns to the session's startup values).
    private static func restoreLimits(_ connection: PostgresConnection, logger: Logger) async throws {
        try await connection.execute("RESET statement_timeout", logger: logger)
        try await connection.execute("RESET lock_timeout", logger: logger)
    }

    /// Throws unless every known migration is applied with an unchanged checksum: services refuse to start otherwise.
    public func verify(logger: Logger) async throws {
        let applied = try await store.withConnection { connection in
            try await Self.ensureTableExists(connection, logger: logger) ? try await Self.applied(connection, logger: logger) : [:]
        }
        try verifyChecksums(applied)
        let pending = migrations.filter { applied[$0.version] == nil }.map(\.name)
        guard pending.isEmpty else {
            throw MigrationError("the database is not migrated (pending: \(pending.joined(separator: ", "))); run `stratus migrate` first")
        }
    }

    private func verifyChecksums(_ applied: [Int: String]) throws {
        for migration in migrations {
            if let checksum = applied[migration.version], checksum != migration.checksum {
                throw MigrationError("migration \(migration.name) was changed after it was applied; add a new migration instead")
            }
        }
    }

    private static let lockKey: Int64 = 0x5354_5241_5455_5301  // "STRATUS" + 1

    private static func ensureTable(_ connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query("""
            CREATE TABLE IF NOT EXISTS schema_migrations (
                version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now())
            """, logger: logger)
    }

    private static func ensureTableExists(_ connection: PostgresConnection, logger: Logger) async throws -> Bool {
        let rows = try await connection.query("SELECT to_regclass('schema_migrations') IS NOT NULL", logger: logger)
        for try await exists in rows.decode(Bool.self) { return exists }
        return false
    }

    private static func applied(_ connection: PostgresConnection, logger: Logger) async throws -> [Int: String] {
        var applied: [Int: String] = [:]
        let rows = try await connection.query("SELECT version, checksum FROM schema_migrations", logger: logger)
        for try await (version, checksum) in rows.decode((Int, String).self) { applied[version] = checksum }
        return applied
    }
}
