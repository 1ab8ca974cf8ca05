import Foundation
import Logging
import PostgresNIO
import StratusCore

/// The built-in user directory: logins and password hashes per container, each mapped to an opaque
/// container-scoped user record name.
public struct UserStore: Sendable {
    let store: PostgresStore
    let rounds: Int

    /// Creates the directory; `rounds` is the password hashing work factor for new passwords.
    public init(store: PostgresStore, rounds: Int = PasswordHash.defaultRounds) {
        self.store = store
        self.rounds = rounds
    }

    /// Checks a login's shape: 1 to 255 characters, no control characters.
    public static func validate(login: String) throws(StratusError) -> String {
        let trimmed = login.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !trimmed.isEmpty, trimmed.utf8.count <= 255, !trimmed.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw StratusError(.badRequest, "a login is 1 to 255 characters without control characters")
        }
        return trimmed
    }

    /// Adds a user with the identity `identity` gives (email, name, discoverability; a user whose
    /// discoverability it leaves open gets the container's sign-up option); returns the new user
    /// record name. EXISTS when the login, or the email address, is taken.
    public func create(
        container: String, login: String, password: String, identity: UserIdentityChange = UserIdentityChange(), logger: Logger
    ) async throws -> String {
        let login = try Self.validate(login: login)
        let identity = try identity.validated()
        let rounds = rounds
        let hash = try await PasswordHashing.run { try PasswordHash.make(password, rounds: rounds) }
        let userRecordName = UserRecordName.generate()
        return try await store.withConnection { connection in
            let known = try await connection.query("SELECT 1 FROM containers WHERE container = \(container)", logger: logger)
            var exists = false
            for try await _ in known { exists = true }
            guard exists else { throw StratusError(.notFound, "no container '\(ClientText.excerpt(container))'") }
            let rows = try await connection.query(
                """
                INSERT INTO users (container, login, user_record_name, password_hash, email, given_name, family_name, discoverable)
                SELECT \(container), \(login), \(userRecordName), \(hash), NULLIF(\(identity.emailAddress)::text, ''),
                       NULLIF(\(identity.givenName)::text, ''), NULLIF(\(identity.familyName)::text, ''),
                       COALESCE(\(identity.discoverable)::boolean, c.users_discoverable_by_default)
                FROM containers c WHERE c.container = \(container)
                ON CONFLICT DO NOTHING RETURNING user_record_name
                """, logger: logger)
            for try await name in rows.decode(String.self) { return name }
            throw StratusError(.exists, "the login or the email address is taken in this container")
        }
    }

    /// Sets a user's password and raises the user's credential epoch, so every web auth token issued
    /// before is refused from now on; NOT_FOUND for an unknown login.
    public func setPassword(container: String, login: String, password: String, logger: Logger) async throws {
        let login = try Self.validate(login: login)
        let rounds = rounds
        let hash = try await PasswordHashing.run { try PasswordHash.make(password, rounds: rounds) }
        try await store.withConnection { connection in
            let rows = try await connection.query(
                """
                UPDATE users SET password_hash = \(hash), credential_epoch = credential_epoch + 1, updated_at = now()
                WHERE container = \(container) AND login = \(login) RETURNING 1
                """, logger: logger)
            for try await _ in rows { return }
            throw StratusError(.notFound, "no such login in this container")
        }
    }

    /// A user of the directory, as a web auth token names it.
    public struct SignedInUser: Sendable, Equatable {
        /// The container-scoped user record name.
        public var userRecordName: String
        /// The credential epoch a web auth token issued now carries.
        public var credentialEpoch: Int64
    }

    /// The user of a login whose password matches, or nil. Spends the same hashing time whether or
    /// not the login exists.
    public func authenticate(container: String, login: String, password: String, logger: Logger) async throws -> SignedInUser? {
        guard let login = try? Self.validate(login: login) else { return nil }
        let found: (String, String, Int64)? = try await store.withConnection { connection in
            let rows = try await connection.query(
                "SELECT user_record_name, password_hash, credential_epoch FROM users WHERE container = \(container) AND login = \(login)",
                logger: logger)
            for try await row in rows.decode((String, String, Int64).self) { return row }
            return nil
        }
        let stored = found?.1 ?? PasswordHash.decoy
        let matches = try await PasswordHashing.run { PasswordHash.verify(password, against: stored) }
        guard let found, matches else { return nil }
        return SignedInUser(userRecordName: found.0, credentialEpoch: found.2)
    }

    /// The credential epoch of a user record name in a container's directory; nil when the directory
    /// has no such user.
    public func credentialEpoch(container: String, userRecordName: String, logger: Logger) async throws -> Int64? {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                "SELECT credential_epoch FROM users WHERE container = \(container) AND user_record_name = \(userRecordName)", logger: logger)
            for try await epoch in rows.decode(Int64.self) { return epoch }
            return nil
        }
    }
}
