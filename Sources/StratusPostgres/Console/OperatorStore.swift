import Foundation
import Logging
import PostgresNIO
import StratusCore

/// The console's operators and their sessions. An operator is a person who runs the deployment,
/// not an app user: a login, a PBKDF2 password hash and, optionally, the containers they may reach.
public struct OperatorStore: Sendable {
    let store: PostgresStore
    let rounds: Int

    /// Creates the store; `rounds` is the password hashing work factor for new passwords.
    public init(store: PostgresStore, rounds: Int = PasswordHash.defaultRounds) {
        self.store = store
        self.rounds = rounds
    }

    /// A signed-in operator, as a session names them.
    public struct Operator: Sendable, Equatable {
        /// The login.
        public var login: String
        /// The containers the operator may reach; nil: every container.
        public var containers: [String]?

        /// Creates an operator's description.
        public init(login: String, containers: [String]?) {
            self.login = login
            self.containers = containers
        }

        /// Whether the operator may reach `container`.
        public func mayReach(_ container: String) -> Bool { containers?.contains(container) ?? true }
    }

    /// A session: its operator, its CSRF token and when it ends.
    public struct Session: Sendable, Equatable {
        /// Who signed in.
        public var `operator`: Operator
        /// The token every form of this session posts back.
        public var csrfToken: String
        /// When the session ends.
        public var expiresAt: Date
    }

    /// The most containers one operator may be limited to.
    public static let maxContainers = 100

    /// Adds an operator. EXISTS when the login is taken; NOT_FOUND when a named container does not exist.
    public func create(login: String, password: String, containers: [String]?, logger: Logger) async throws {
        let login = try UserStore.validate(login: login)
        if let containers {
            guard !containers.isEmpty, containers.count <= Self.maxContainers else {
                throw StratusError(.badRequest, "an operator is limited to 1 to \(Self.maxContainers) containers")
            }
        }
        let rounds = rounds
        let hash = try await PasswordHashing.run { try PasswordHash.make(password, rounds: rounds) }
        try await store.withConnection { connection in
            for container in containers ?? [] {
                let known = try await connection.query("SELECT 1 FROM containers WHERE container = \(container)", logger: logger)
                var exists = false
                for try await _ in known { exists = true }
                guard exists else { throw StratusError(.notFound, "no container '\(ClientText.excerpt(container))'") }
            }
            let rows = try await connection.query(
                """
                INSERT INTO operators (login, password_hash, containers) VALUES (\(login), \(hash), \(containers))
                ON CONFLICT (login) DO NOTHING RETURNING 1
                """, logger: logger)
            for try await _ in rows { return }
            throw StratusError(.exists, "the operator login is taken")
        }
    }

    /// The operator of a login whose password matches, or nil. Spends the same hashing time whether or
    /// not the login exists.
    public func authenticate(login: String, password: String, logger: Logger) async throws -> Operator? {
        guard let login = try? UserStore.validate(login: login) else { return nil }
        let found: (String, [String]?)? = try await store.withConnection { connection in
            let rows = try await connection.query("SELECT password_hash, containers FROM operators WHERE login = \(login)", logger: logger)
            for try await row in rows.decode((String, [String]?).self) { return row }
            return nil
        }
        let stored = found?.0 ?? PasswordHash.decoy
        let matches = try await PasswordHashing.run { PasswordHash.verify(password, against: stored) }
        guard let found, matches else { return nil }
        return Operator(login: login, containers: found.1)
    }

    /// Opens a session for an operator who has just signed in; returns the cookie value (shown to
    /// the browser only; the database keeps its digest) and the session. Sessions that have ended
    /// are removed on the way, so the table holds only live ones.
    public func openSession(for signedIn: Operator, lifetime: Duration, logger: Logger) async throws -> (token: String, session: Session) {
        let token = APIToken.generate()
        let csrf = APIToken.generate()
        let seconds = lifetime / .seconds(1)
        let expiresAt: Date = try await store.withConnection { connection in
            try await connection.query("DELETE FROM operator_sessions WHERE expires_at <= now()", logger: logger)
            let rows = try await connection.query(
                """
                INSERT INTO operator_sessions (session_digest, login, csrf_token, expires_at)
                VALUES (\(Data(APIToken.digest(token))), \(signedIn.login), \(csrf), now() + make_interval(secs => \(seconds)))
                RETURNING expires_at
                """, logger: logger)
            for try await expiresAt in rows.decode(Date.self) { return expiresAt }
            throw StratusError(.internalError, "no session was stored")
        }
        return (token, Session(operator: signedIn, csrfToken: csrf, expiresAt: expiresAt))
    }

    /// The live session of a cookie value, or nil (unknown, ended, or its operator removed).
    public func session(token: String, logger: Logger) async throws -> Session? {
        guard token.utf8.count == 64 else { return nil }
        return try await store.withConnection { connection in
            let rows = try await connection.query(
                """
                SELECT o.login, o.containers, s.csrf_token, s.expires_at
                FROM operator_sessions s JOIN operators o USING (login)
                WHERE s.session_digest = \(Data(APIToken.digest(token))) AND s.expires_at > now()
                """, logger: logger)
            for try await (login, containers, csrf, expiresAt) in rows.decode((String, [String]?, String, Date).self) {
                return Session(operator: Operator(login: login, containers: containers), csrfToken: csrf, expiresAt: expiresAt)
            }
            return nil
        }
    }

    /// Ends a session (sign-out); ending one that has already ended is no error.
    public func closeSession(token: String, logger: Logger) async throws {
        try await store.withConnection { connection in
            try await connection.query("DELETE FROM operator_sessions WHERE session_digest = \(Data(APIToken.digest(token)))", logger: logger)
        }
    }

    /// The containers an operator may reach, in name order, at most `limit`.
    public func containers(for signedIn: Operator, limit: Int, logger: Logger) async throws -> [String] {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                """
                SELECT container FROM containers
                WHERE \(signedIn.containers)::text[] IS NULL OR container = ANY(\(signedIn.containers)::text[])
                ORDER BY container LIMIT \(limit)
                """, logger: logger)
            var names: [String] = []
            for try await name in rows.decode(String.self) { names.append(name) }
            return names
        }
    }
}
