import Foundation
import Logging
import PostgresNIO
import StratusCore

/// Sessions: one row per sign-in, named by the web auth tokens it issued. Revoking one (a user's
/// sign-out, an operator's revocation) notifies every API process (migration 0033's trigger), whose
/// cached answers end at once; `ContainerStore.access` reads whether a token's session is active.
public struct SessionStore: Sendable {
    let store: PostgresStore

    /// Creates the session store.
    public init(store: PostgresStore) { self.store = store }

    /// Starts a session for a user who just signed in; returns its id.
    public func create(
        container: String, userRecordName: String, method: Session.Method, issuer: String? = nil, expiresAt: Int64, logger: Logger
    ) async throws -> String {
        try await store.withConnection { connection in
            try await Self.insert(
                on: connection, container: container, userRecordName: userRecordName, method: method, issuer: issuer, expiresAt: expiresAt, logger: logger)
        }
    }

    /// Inserts a session on `connection` (inside the caller's transaction when it has one).
    static func insert(
        on connection: PostgresConnection, container: String, userRecordName: String, method: Session.Method, issuer: String?, expiresAt: Int64,
        logger: Logger
    ) async throws -> String {
        let sessionID = Session.generateID()
        try await connection.query(
            """
            INSERT INTO sessions (session_id, container, user_record_name, method, issuer, expires_at)
            VALUES (\(sessionID), \(container), \(userRecordName), \(method.rawValue), \(issuer), to_timestamp(\(Double(expiresAt))))
            """, logger: logger)
        return sessionID
    }

    /// A user's sessions, the newest first (at most `Session.listLimit`), revoked and expired ones
    /// included.
    public func list(container: String, userRecordName: String, logger: Logger) async throws -> [Session] {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                """
                SELECT session_id, method, issuer, extract(epoch FROM created_at)::bigint, extract(epoch FROM expires_at)::bigint,
                       extract(epoch FROM revoked_at)::bigint
                FROM sessions WHERE container = \(container) AND user_record_name = \(userRecordName)
                ORDER BY created_at DESC, session_id LIMIT \(Session.listLimit)
                """, logger: logger)
            var sessions: [Session] = []
            for try await (id, method, issuer, created, expires, revoked) in rows.decode((String, String, String?, Int64, Int64, Int64?).self) {
                sessions.append(Session(
                    sessionID: id, container: container, userRecordName: userRecordName, method: Session.Method(rawValue: method) ?? .password,
                    issuer: issuer, createdAt: created, expiresAt: expires, revokedAt: revoked))
            }
            return sessions
        }
    }

    /// Revokes one of a user's sessions; false when the user has no such session (a session already
    /// revoked stays as it was and answers true).
    public func revoke(container: String, userRecordName: String, sessionID: String, logger: Logger) async throws -> Bool {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                """
                WITH found AS (
                    SELECT session_id FROM sessions
                    WHERE session_id = \(sessionID) AND container = \(container) AND user_record_name = \(userRecordName)),
                revoked AS (
                    UPDATE sessions SET revoked_at = now() WHERE session_id IN (SELECT session_id FROM found) AND revoked_at IS NULL)
                SELECT count(*)::bigint FROM found
                """, logger: logger)
            for try await count in rows.decode(Int64.self) { return count > 0 }
            return false
        }
    }

    /// Signs a user out everywhere: revokes every session of the user and raises the user's
    /// credential epoch, so tokens issued without a session end too. Returns how many sessions
    /// were revoked; NOT_FOUND when the directory has no such user.
    public func revokeAll(container: String, userRecordName: String, logger: Logger) async throws -> Int {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                """
                WITH raised AS (
                    UPDATE users SET credential_epoch = credential_epoch + 1, updated_at = now()
                    WHERE container = \(container) AND user_record_name = \(userRecordName) RETURNING 1),
                revoked AS (
                    UPDATE sessions SET revoked_at = now()
                    WHERE container = \(container) AND user_record_name = \(userRecordName) AND revoked_at IS NULL RETURNING 1)
                SELECT (SELECT count(*) FROM raised)::bigint, (SELECT count(*) FROM revoked)::bigint
                """, logger: logger)
            for try await (users, revoked) in rows.decode((Int64, Int64).self) {
                guard users > 0 else { throw StratusError(.notFound, "no such user in this container") }
                return Int(revoked)
            }
            throw StratusError(.notFound, "no such user in this container")
        }
    }

    /// The user a session belongs to, for an operator who names only the session.
    public func session(container: String, sessionID: String, logger: Logger) async throws -> Session? {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                """
                SELECT user_record_name, method, issuer, extract(epoch FROM created_at)::bigint, extract(epoch FROM expires_at)::bigint,
                       extract(epoch FROM revoked_at)::bigint
                FROM sessions WHERE container = \(container) AND session_id = \(sessionID)
                """, logger: logger)
            for try await (user, method, issuer, created, expires, revoked) in rows.decode((String, String, String?, Int64, Int64, Int64?).self) {
                return Session(
                    sessionID: sessionID, container: container, userRecordName: user, method: Session.Method(rawValue: method) ?? .password,
                    issuer: issuer, createdAt: created, expiresAt: expires, revokedAt: revoked)
            }
            return nil
        }
    }
}
