import Foundation
import Logging
import PostgresNIO
import StratusCore

/// The relay's bookkeeping: the single-publisher lock and how many messages each topic should hold.
public struct RelayStore: Sendable {
    let store: PostgresStore

    /// Creates the relay store.
    public init(store: PostgresStore) { self.store = store }

    /// Holds the relay's advisory lock on one dedicated connection while `body` runs, so exactly one
    /// relay publishes across processes. Returns nil without running `body` when another relay holds it.
    public func whileLeader<T: Sendable>(logger: Logger, _ body: @escaping @Sendable () async throws -> T) async throws -> T? {
        try await store.withDedicatedConnection { connection in
            let rows = try await connection.query("SELECT pg_try_advisory_lock(\(Self.lockKey))", logger: logger)
            var acquired = false
            for try await value in rows.decode(Bool.self) { acquired = value }
            guard acquired else { return nil }
            do {
                let value = try await body()
                try? await connection.execute("SELECT pg_advisory_unlock(\(Self.lockKey))", logger: logger)
                return value
            } catch {
                try? await connection.execute("SELECT pg_advisory_unlock(\(Self.lockKey))", logger: logger)
                throw error
            }
        }
    }

    /// Calls `onNotification` for every commit that appended events, until cancelled.
    public func listen(logger: Logger, _ onNotification: @escaping @Sendable () -> Void) async throws {
        try await store.withDedicatedConnection { connection in
            try await connection.listen(on: EventLog.channel) { notifications in
                for try await _ in notifications { onNotification() }
            }
        }
    }

    /// The high watermark of each partition of a topic when the relay last looked.
    public func watermarks(topic: String, logger: Logger) async throws -> [Int32: Int64] {
        try await store.withConnection { connection in
            let rows = try await connection.query("SELECT watermarks::text FROM relay_topics WHERE topic = \(topic)", logger: logger)
            for try await text in rows.decode(String.self) {
                let decoded = (try? JSONDecoder().decode([String: Int64].self, from: Data(text.utf8))) ?? [:]
                return Dictionary(uniqueKeysWithValues: decoded.compactMap { key, value in Int32(key).map { ($0, value) } })
            }
            return [:]
        }
    }

    /// Remembers the high watermarks the relay saw.
    public func saveWatermarks(_ watermarks: [Int32: Int64], topic: String, logger: Logger) async throws {
        let text = String(decoding: EventCoding.encode(Dictionary(uniqueKeysWithValues: watermarks.map { (String($0.key), $0.value) })), as: UTF8.self)
        _ = try await store.withConnection { connection in
            try await connection.query("""
                INSERT INTO relay_topics (topic, watermarks) VALUES (\(topic), \(text)::jsonb)
                ON CONFLICT (topic) DO UPDATE SET watermarks = EXCLUDED.watermarks, updated_at = now()
                """, logger: logger)
        }
    }

    /// Whether the log holds an event that was published (is not queued for the relay): a topic
    /// that holds nothing then lost what it was sent, or is a new topic the log was never sent to.
    public func holdsPublishedEvents(logger: Logger) async throws -> Bool {
        try await store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT EXISTS (SELECT 1 FROM events AS e WHERE NOT EXISTS (SELECT 1 FROM unpublished_events AS u WHERE u.id = e.id))
                """, logger: logger)
            for try await held in rows.decode(Bool.self) { return held }
            return false
        }
    }

    /// A topic came back empty: everything is sent again, and the watermarks start over. One transaction.
    public func refill(topic: String, logger: Logger) async throws -> Int {
        try await store.withConnection { connection in
            try await connection.query("BEGIN", logger: logger)
            do {
                try await connection.query("""
                    INSERT INTO relay_topics (topic) VALUES (\(topic))
                    ON CONFLICT (topic) DO UPDATE SET watermarks = '{}', updated_at = now()
                    """, logger: logger)
                let count = try await EventLog.requeue(from: 0, on: connection, logger: logger)
                try await connection.query("COMMIT", logger: logger)
                return count
            } catch {
                _ = try? await connection.query("ROLLBACK", logger: logger)
                throw error
            }
        }
    }

    private static let lockKey: Int64 = 0x5354_5241_5455_5302
}
