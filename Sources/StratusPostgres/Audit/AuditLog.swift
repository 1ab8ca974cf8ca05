import Foundation
import Logging
import PostgresNIO
import StratusCore

/// The audit log's table (`audit_log`, migration 0034): appends administrative actions to the hash
/// chain, reads them back filtered, and verifies the chain. Record writes never come here.
public struct AuditLog: Sendable {
    let store: PostgresStore

    public init(store: PostgresStore) {
        self.store = store
    }

    /// Which entries a read returns: each given filter must match exactly; `before` pages back.
    public struct Filter: Sendable, Equatable {
        public var container: String?
        public var actor: String?
        public var action: String?
        /// Only entries with a smaller sequence number (the next page, newest first).
        public var before: Int64?

        public init(container: String? = nil, actor: String? = nil, action: String? = nil, before: Int64? = nil) {
            self.container = container
            self.actor = actor
            self.action = action
            self.before = before
        }
    }

    /// The most entries one read returns.
    public static let maxPage = 1000

    /// Appends an action after the latest entry. The head row's lock makes appenders in any number
    /// of processes take turns, so each entry links to the one committed before it; the time is
    /// PostgreSQL's, one clock for every appender.
    @discardableResult
    public func append(_ draft: AuditDraft, logger: Logger) async throws -> AuditEntry {
        try await store.readCommitted(logger: logger) { transaction in
            let connection = transaction.connection
            let rows = try await connection.query(
                "SELECT sequence, hash, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint FROM audit_head FOR UPDATE", logger: logger)
            var head: (Int64, Data, Int64)?
            for try await row in rows.decode((Int64, Data, Int64).self) { head = row }
            guard let (sequence, previous, now) = head else { throw StratusError(.internalError, "the audit log has no head") }
            let entry = AuditEntry(draft, sequence: sequence + 1, recordedAtMicroseconds: now, previousHash: Array(previous))
            try await connection.query(
                """
                INSERT INTO audit_log
                    (sequence, recorded_at, channel, actor, origin, request_id, action, container, subject, details, previous_hash, hash)
                VALUES (\(entry.sequence), timestamptz 'epoch' + \(entry.recordedAtMicroseconds) * interval '1 microsecond',
                    \(entry.channel), \(entry.actor), \(entry.origin), \(entry.requestID), \(entry.action), \(entry.container),
                    \(entry.subject), \(entry.details), \(Data(entry.previousHash)), \(Data(entry.hash)))
                """, logger: logger)
            try await connection.query(
                "UPDATE audit_head SET sequence = \(entry.sequence), hash = \(Data(entry.hash))", logger: logger)
            return entry
        }
    }

    /// The entries that match `filter`, newest first, at most `limit` (1 to `maxPage`).
    public func entries(_ filter: Filter, limit: Int, logger: Logger) async throws -> [AuditEntry] {
        let limit = min(max(limit, 1), Self.maxPage)
        return try await store.withConnection { connection in
            let rows = try await connection.query(
                """
                SELECT \(unescaped: Self.columns) FROM audit_log
                WHERE (\(filter.container)::text IS NULL OR container = \(filter.container))
                  AND (\(filter.actor)::text IS NULL OR actor = \(filter.actor))
                  AND (\(filter.action)::text IS NULL OR action = \(filter.action))
                  AND (\(filter.before)::bigint IS NULL OR sequence < \(filter.before))
                ORDER BY sequence DESC LIMIT \(limit)
                """, logger: logger)
            return try await Self.decode(rows)
        }
    }

    /// What verifying the whole log found.
    public struct Verification: Sendable, Equatable {
        /// The entries that verified, in order from the first.
        public var verified: Int64
        /// The sequence number and hash the head keeps.
        public var headSequence: Int64
        public var headHash: [UInt8]
        /// The first bad entry, or nil when the whole chain holds.
        public var problem: AuditChain.Break?
    }

    /// Checks every entry's hash and link in sequence order, in pages of `pageSize`, in one
    /// snapshot (appends meanwhile are not seen), then the head against the last entry.
    public func verify(pageSize: Int = 1000, logger: Logger) async throws -> Verification {
        let pageSize = min(max(pageSize, 1), Self.maxPage)
        return try await store.snapshot(logger: logger) { transaction in
            let connection = transaction.connection
            var head: (Int64, Data)?
            for try await row in try await connection.query("SELECT sequence, hash FROM audit_head", logger: logger).decode((Int64, Data).self) {
                head = row
            }
            guard let (headSequence, headHash) = head else { throw StratusError(.internalError, "the audit log has no head") }
            var chain = AuditChain()
            var after: Int64 = 0
            func result(_ problem: AuditChain.Break?) -> Verification {
                Verification(verified: chain.count, headSequence: headSequence, headHash: Array(headHash), problem: problem)
            }
            while true {
                let rows = try await connection.query(
                    "SELECT \(unescaped: Self.columns) FROM audit_log WHERE sequence > \(after) ORDER BY sequence LIMIT \(pageSize)", logger: logger)
                let page = try await Self.decode(rows)
                for entry in page {
                    do throws(AuditChain.Break) { try chain.check(entry) } catch { return result(error) }
                }
                guard let last = page.last, page.count == pageSize else { break }
                after = last.sequence
            }
            do throws(AuditChain.Break) { try chain.checkHead(sequence: headSequence, hash: Array(headHash)) } catch { return result(error) }
            return result(nil)
        }
    }

    static let columns = """
        sequence, (extract(epoch FROM recorded_at) * 1000000)::bigint, channel, actor, origin, request_id, action, container, subject,
        details, previous_hash, hash
        """

    static func decode(_ rows: PostgresRowSequence) async throws -> [AuditEntry] {
        var entries: [AuditEntry] = []
        for try await row in rows {
            let (sequence, micros, channel, actor, origin, requestID, action, container, subject, details, previous, hash) =
                try row.decode((Int64, Int64, String, String, String, String, String, String, String, String, Data, Data).self)
            entries.append(AuditEntry(
                sequence: sequence, recordedAtMicroseconds: micros, channel: channel, actor: actor, origin: origin, requestID: requestID,
                action: action, container: container, subject: subject, details: details, previousHash: Array(previous), hash: Array(hash)))
        }
        return entries
    }
}
