import Foundation
import Logging
import PostgresNIO
import StratusConnections
import StratusCore

/// Email sign-up's tables: each container's sign-up mode, its invitations, and the email tokens
/// sent. Who may sign up and whether a token may be redeemed are Core's decisions (`SignUpRules`,
/// `EmailToken.redeem`); this store reads what they need and carries them out, a redemption in one
/// transaction with what it does, so a refused one changes nothing.
public struct EmailSignUpStore: Sendable {
    let store: PostgresStore
    let rounds: Int

    /// Creates the store; `rounds` is the password hashing work factor, as `UserStore`'s.
    public init(store: PostgresStore, rounds: Int = PasswordHash.defaultRounds) {
        self.store = store
        self.rounds = rounds
    }

    // MARK: The operator's settings

    /// A container's sign-up mode; NOT_FOUND for an unknown container.
    public func mode(container: String, logger: Logger) async throws -> SignUpMode {
        try await store.withConnection { connection in
            let rows = try await connection.query("SELECT sign_up FROM containers WHERE container = \(container)", logger: logger)
            for try await mode in rows.decode(String.self) { return try SignUpMode.parse(mode) }
            throw StratusError(.notFound, "no container '\(ClientText.excerpt(container))'")
        }
    }

    /// Sets a container's sign-up mode; NOT_FOUND for an unknown container.
    public func setMode(container: String, _ mode: SignUpMode, logger: Logger) async throws {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                "UPDATE containers SET sign_up = \(mode.rawValue) WHERE container = \(container) RETURNING 1", logger: logger)
            for try await _ in rows { return }
            throw StratusError(.notFound, "no container '\(ClientText.excerpt(container))'")
        }
    }

    /// Invites an address to sign up (capitals folded); false when it was invited already.
    public func invite(container: String, email: String, logger: Logger) async throws -> Bool {
        let email = try EmailAddress.validate(email).lowercased()
        return try await store.withConnection { connection in
            let rows = try await connection.query(
                """
                INSERT INTO sign_up_invitations (container, email) SELECT container, \(email) FROM containers WHERE container = \(container)
                ON CONFLICT DO NOTHING RETURNING 1
                """, logger: logger)
            for try await _ in rows { return true }
            let known = try await connection.query("SELECT 1 FROM containers WHERE container = \(container)", logger: logger)
            for try await _ in known { return false }
            throw StratusError(.notFound, "no container '\(ClientText.excerpt(container))'")
        }
    }

    /// Withdraws an invitation; false when there was none.
    public func uninvite(container: String, email: String, logger: Logger) async throws -> Bool {
        let email = try EmailAddress.validate(email).lowercased()
        return try await store.withConnection { connection in
            let rows = try await connection.query(
                "DELETE FROM sign_up_invitations WHERE container = \(container) AND email = \(email) RETURNING 1", logger: logger)
            for try await _ in rows { return true }
            return false
        }
    }

    /// A container's invited addresses, at most `limit`, in order.
    public func invitations(container: String, limit: Int = 1000, logger: Logger) async throws -> [String] {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                "SELECT email FROM sign_up_invitations WHERE container = \(container) ORDER BY email LIMIT \(min(max(limit, 0), 10_000))",
                logger: logger)
            var found: [String] = []
            for try await email in rows.decode(String.self) { found.append(email) }
            return found
        }
    }

    // MARK: Requests

    /// A sign-up request: the password is hashed (off the cooperative threads) whatever happens,
    /// so the answer takes the same time for every address; then `SignUpRules` decides, and when it
    /// says send, a verification token until `now + lifetime` is stored. Returns the token to send,
    /// or nil. ACCESS_DENIED when sign-up is off.
    public func requestSignUp(
        container: String, email: String, password: String, lifetime: Int64, now: Int64, logger: Logger
    ) async throws -> (token: String?, skipped: String?) {
        let rounds = rounds
        let hash = try await PasswordHashing.run { try PasswordHash.make(password, rounds: rounds) }
        return try await store.withConnection { connection in
            let rows = try await connection.query(
                """
                SELECT c.sign_up,
                       EXISTS (SELECT 1 FROM sign_up_invitations i WHERE i.container = c.container AND i.email = lower(\(email))),
                       EXISTS (SELECT 1 FROM users u WHERE u.container = c.container AND (lower(u.email) = lower(\(email)) OR lower(u.login) = lower(\(email))))
                FROM containers c WHERE c.container = \(container)
                """, logger: logger)
            var facts: (String, Bool, Bool)?
            for try await row in rows.decode((String, Bool, Bool).self) { facts = row }
            guard let facts else { throw StratusError(.notFound, "no container '\(ClientText.excerpt(container))'") }
            let (mode, invited, taken) = facts
            switch try SignUpRules.decide(mode: try SignUpMode.parse(mode), invited: invited, addressTaken: taken) {
            case .skip(let why):
                return (nil, why)
            case .send:
                let token = try await Self.insertToken(
                    .verify, container: container, email: email, passwordHash: hash, user: nil, expiresAt: now + lifetime, on: connection, logger: logger)
                return (token, nil)
            }
        }
    }

    /// A password reset request: a reset token for the user whose email address or login this is,
    /// or nil when there is none (`SignUpRules.decideReset`).
    public func requestReset(container: String, email: String, lifetime: Int64, now: Int64, logger: Logger) async throws -> (token: String?, skipped: String?) {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                """
                SELECT user_record_name FROM users
                WHERE container = \(container) AND (lower(email) = lower(\(email)) OR lower(login) = lower(\(email)))
                ORDER BY (lower(login) = lower(\(email))) DESC LIMIT 1
                """, logger: logger)
            var user: String?
            for try await name in rows.decode(String.self) { user = name }
            switch SignUpRules.decideReset(userFound: user != nil) {
            case .skip(let why):
                return (nil, why)
            case .send:
                let token = try await Self.insertToken(
                    .reset, container: container, email: email, passwordHash: nil, user: user, expiresAt: now + lifetime, on: connection, logger: logger)
                return (token, nil)
            }
        }
    }

    /// How long a token is kept after it expired (used or not), for the record, before a new
    /// token's insert deletes it.
    static let keptAfterExpiry: Int64 = 7 * 86_400

    /// Stores a new token (its digest) and answers the token to send; first deletes up to 100
    /// tokens that expired more than `keptAfterExpiry` ago (through the expiry index), so the table
    /// holds about a week of requests.
    static func insertToken(
        _ purpose: EmailTokenPurpose, container: String, email: String, passwordHash: String?, user: String?, expiresAt: Int64,
        on connection: PostgresConnection, logger: Logger
    ) async throws -> String {
        try await connection.query(
            """
            DELETE FROM email_tokens WHERE token_digest IN (
                SELECT token_digest FROM email_tokens WHERE expires_at < now() - make_interval(secs => \(Double(keptAfterExpiry))) LIMIT 100)
            """, logger: logger)
        let token = EmailToken.generate()
        try await connection.query(
            """
            INSERT INTO email_tokens (token_digest, container, purpose, email, password_hash, user_record_name, expires_at)
            VALUES (\(Data(EmailToken.digest(token))), \(container), \(purpose.rawValue), \(email), \(passwordHash), \(user),
                    to_timestamp(\(Double(expiresAt))))
            """, logger: logger)
        return token
    }

    // MARK: Redemptions

    /// A user signed in by redeeming a token.
    public struct Redeemed: Sendable, Equatable {
        public var userRecordName: String
        public var credentialEpoch: Int64
        public var sessionID: String
    }

    /// Confirms a sign-up's address: uses the token up, creates the user (its login the address in
    /// lower case, its email address the address as given, the password chosen at sign-up) and starts a password session until
    /// `sessionExpiresAt`. One transaction: a refused token, or an address taken meanwhile, stores
    /// nothing.
    public func verify(container: String, token: String, now: Int64, sessionExpiresAt: Int64, logger: Logger) async throws -> Redeemed {
        do {
            return try await redeem(container: container, token: token, purpose: .verify, now: now, logger: logger) { connection, row in
                let userRecordName = UserRecordName.generate()
                let rows = try await connection.query(
                    """
                    INSERT INTO users (container, login, user_record_name, password_hash, email, discoverable)
                    SELECT \(container), lower(\(row.email)), \(userRecordName), \(row.passwordHash ?? PasswordHash.noPassword), \(row.email),
                           c.users_discoverable_by_default
                    FROM containers c WHERE c.container = \(container)
                    ON CONFLICT DO NOTHING RETURNING 1
                    """, logger: logger)
                var created = false
                for try await _ in rows { created = true }
                guard created else { throw StratusError(.exists, "a user of this container has this address already; sign in or reset the password") }
                let sessionID = try await SessionStore.insert(
                    on: connection, container: container, userRecordName: userRecordName, method: .password, issuer: nil, expiresAt: sessionExpiresAt,
                    logger: logger)
                return Redeemed(userRecordName: userRecordName, credentialEpoch: 1, sessionID: sessionID)
            }
        } catch where PostgresErrors.sqlState(error) == "23505" {
            throw StratusError(.exists, "a user of this container has this address already; sign in or reset the password")
        }
    }

    /// Resets a password: uses the token up, sets the password (hashed off the cooperative threads
    /// before the transaction), raises the user's credential epoch (ending every token issued
    /// before), and starts a password session until `sessionExpiresAt`.
    public func reset(container: String, token: String, password: String, now: Int64, sessionExpiresAt: Int64, logger: Logger) async throws -> Redeemed {
        let rounds = rounds
        let hash = try await PasswordHashing.run { try PasswordHash.make(password, rounds: rounds) }
        return try await redeem(container: container, token: token, purpose: .reset, now: now, logger: logger) { connection, row in
            let rows = try await connection.query(
                """
                UPDATE users SET password_hash = \(hash), credential_epoch = credential_epoch + 1, updated_at = now()
                WHERE container = \(container) AND user_record_name = \(row.userRecordName) RETURNING user_record_name, credential_epoch
                """, logger: logger)
            for try await (user, epoch) in rows.decode((String, Int64).self) {
                let sessionID = try await SessionStore.insert(
                    on: connection, container: container, userRecordName: user, method: .password, issuer: nil, expiresAt: sessionExpiresAt,
                    logger: logger)
                return Redeemed(userRecordName: user, credentialEpoch: epoch, sessionID: sessionID)
            }
            throw StratusError(.authenticationFailed, "this token is not valid; ask for a new message")
        }
    }

    struct TokenRow: Sendable {
        var email: String
        var passwordHash: String?
        var userRecordName: String?
    }

    /// Finds a token by its digest under a row lock, lets `EmailToken.redeem` judge it, marks it
    /// used and runs `body`, all in one transaction.
    private func redeem<T: Sendable>(
        container: String, token: String, purpose: EmailTokenPurpose, now: Int64, logger: Logger,
        _ body: @escaping @Sendable (PostgresConnection, TokenRow) async throws -> T
    ) async throws -> T {
        let digest = Data(EmailToken.digest(token))
        return try await store.locked(logger: logger, locks: []) { transaction in
            let connection = transaction.connection
            let rows = try await connection.query(
                """
                SELECT purpose, extract(epoch FROM expires_at)::bigint, extract(epoch FROM used_at)::bigint, email, password_hash, user_record_name
                FROM email_tokens WHERE token_digest = \(digest) AND container = \(container) FOR UPDATE
                """, logger: logger)
            var found: (EmailToken.Stored, TokenRow)?
            for try await (kind, expiresAt, usedAt, email, hash, user) in rows.decode((String, Int64, Int64?, String, String?, String?).self) {
                guard let kind = EmailTokenPurpose(rawValue: kind) else { continue }
                found = (EmailToken.Stored(purpose: kind, expiresAt: expiresAt, usedAt: usedAt), TokenRow(email: email, passwordHash: hash, userRecordName: user))
            }
            try EmailToken.redeem(found?.0, for: purpose, now: now)
            try await connection.query("UPDATE email_tokens SET used_at = to_timestamp(\(Double(now))) WHERE token_digest = \(digest)", logger: logger)
            return try await body(connection, found!.1)
        }
    }
}
