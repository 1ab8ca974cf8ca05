import Foundation
import Logging
import PostgresNIO
import StratusConnections
import StratusCore

/// ID-token sign-in's tables: the issuers each container trusts, the accounts linked to users, and
/// the nonces already used. What a sign-in or a link does is `AccountLinking`'s decision; this store
/// reads what it needs and carries it out, in one transaction with the nonce and the session, so a
/// refused request stores nothing.
public struct IdentityStore: Sendable {
    let store: PostgresStore

    /// Creates the identity store.
    public init(store: PostgresStore) { self.store = store }

    // MARK: Trusted issuers

    /// Trusts an issuer for a container, or replaces what is known of it; NOT_FOUND when the
    /// container does not exist. A client secret is stored only sealed with `key` (the server's
    /// secret key); one given without a key is refused.
    public func trust(container: String, _ issuer: TrustedIssuer, sealingWith key: SecretKey? = nil, logger: Logger) async throws {
        let issuer = try issuer.validated()
        if issuer.clientSecret != nil, key == nil {
            throw StratusError(.internalError, "a client secret is stored only sealed, and no server key was given to seal it")
        }
        let sealed = key.flatMap { issuer.sealClientSecret(container: container, key: $0)?.bytes }
        try await store.withConnection { connection in
            let rows = try await connection.query(
                """
                INSERT INTO trusted_issuers (container, issuer, jwks_url, audiences, web_client_id, authorization_url, redirect_url, token_url, client_secret_sealed)
                SELECT container, \(issuer.issuer), \(issuer.keySetURL), \(issuer.audiences), \(issuer.webClientID), \(issuer.authorizationURL),
                       \(issuer.redirectURL), \(issuer.tokenURL), \(sealed.map { Data($0) })
                FROM containers WHERE container = \(container)
                ON CONFLICT (container, issuer) DO UPDATE SET jwks_url = EXCLUDED.jwks_url, audiences = EXCLUDED.audiences,
                    web_client_id = EXCLUDED.web_client_id, authorization_url = EXCLUDED.authorization_url, redirect_url = EXCLUDED.redirect_url,
                    token_url = EXCLUDED.token_url, client_secret = NULL, client_secret_sealed = EXCLUDED.client_secret_sealed
                RETURNING 1
                """, logger: logger)
            for try await _ in rows { return }
            throw StratusError(.notFound, "no container '\(ClientText.excerpt(container))'")
        }
    }

    /// Seals the client secrets stored in plain text before secrets were sealed (migration 0049)
    /// with `key`, and empties their plain-text column; returns how many. `stratus migrate` runs it
    /// after the migrations, so a deployment's secrets are sealed as it upgrades.
    public func sealPlainClientSecrets(key: SecretKey, logger: Logger) async throws -> Int {
        var sealed = 0
        while true {
            let batch = try await store.withConnection { connection in
                let rows = try await connection.query(
                    """
                    SELECT container, issuer, client_secret FROM trusted_issuers WHERE client_secret IS NOT NULL
                    ORDER BY container, issuer LIMIT 100
                    """, logger: logger)
                var found: [(String, String, String)] = []
                for try await row in rows.decode((String, String, String).self) { found.append(row) }
                return found
            }
            if batch.isEmpty { return sealed }
            var changed = 0
            for (container, issuer, secret) in batch {
                let value = SealedSecret.seal(secret, purpose: .clientSecret, binding: [container, issuer], key: key)
                changed += try await store.withConnection { connection in
                    // Only the value read: a secret set again meanwhile is already sealed.
                    let rows = try await connection.query(
                        """
                        UPDATE trusted_issuers SET client_secret_sealed = \(Data(value.bytes)), client_secret = NULL
                        WHERE container = \(container) AND issuer = \(issuer) AND client_secret = \(secret)
                        RETURNING 1
                        """, logger: logger)
                    var count = 0
                    for try await _ in rows { count += 1 }
                    return count
                }
            }
            sealed += changed
            // Rows that changed under this pass are another writer's; nothing is left to seal here.
            if changed == 0 { return sealed }
        }
    }

    /// The issuers a container trusts, by issuer.
    public func trustedIssuers(container: String, logger: Logger) async throws -> [TrustedIssuer] {
        try await issuers(
            """
            SELECT issuer, jwks_url, audiences, web_client_id, authorization_url, redirect_url, token_url, client_secret, client_secret_sealed
            FROM trusted_issuers WHERE container = \(container) ORDER BY issuer
            """, logger: logger)
    }

    /// The trusted issuer of a container with this `iss`, if any.
    public func trustedIssuer(container: String, issuer: String, logger: Logger) async throws -> TrustedIssuer? {
        try await issuers(
            """
            SELECT issuer, jwks_url, audiences, web_client_id, authorization_url, redirect_url, token_url, client_secret, client_secret_sealed
            FROM trusted_issuers WHERE container = \(container) AND issuer = \(issuer)
            """, logger: logger
        ).first
    }

    /// Stops trusting an issuer; false when it was not trusted. Accounts linked through it stay
    /// linked (trusting it again lets them sign in again) and their sessions go on.
    public func distrust(container: String, issuer: String, logger: Logger) async throws -> Bool {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                "DELETE FROM trusted_issuers WHERE container = \(container) AND issuer = \(issuer) RETURNING 1", logger: logger)
            for try await _ in rows { return true }
            return false
        }
    }

    private func issuers(_ query: PostgresQuery, logger: Logger) async throws -> [TrustedIssuer] {
        try await store.withConnection { connection in
            var found: [TrustedIssuer] = []
            let rows = try await connection.query(query, logger: logger)
            for try await (issuer, url, audiences, client, authorization, redirect, token, secret, sealed) in rows.decode(
                (String, String, [String], String?, String?, String?, String?, String?, Data?).self)
            {
                var trusted = TrustedIssuer(
                    issuer: issuer, keySetURL: url, audiences: audiences, webClientID: client, authorizationURL: authorization, redirectURL: redirect,
                    tokenURL: token, clientSecret: secret)
                trusted.sealedClientSecret = sealed.map { SealedSecret(bytes: Array($0)) }
                found.append(trusted)
            }
            return found
        }
    }

    // MARK: Sign-in and linking

    /// What a sign-in gave.
    public struct SignIn: Sendable, Equatable {
        /// The user.
        public var userRecordName: String
        /// The user's credential epoch, for the token.
        public var credentialEpoch: Int64
        /// Whether the user was created by this sign-in.
        public var created: Bool
        /// The new session.
        public var sessionID: String
    }

    /// Signs in with an account a checked ID token names: uses its nonce up (a used one is refused),
    /// finds the user it is linked to or creates one (`AccountLinking`), and starts a session until
    /// `expiresAt`. One transaction: nothing is stored when any part is refused.
    public func signIn(container: String, account: IDTokenRules.Account, expiresAt: Int64, logger: Logger) async throws -> SignIn {
        do {
            return try await signInOnce(container: container, account: account, expiresAt: expiresAt, logger: logger)
        } catch where PostgresErrors.sqlState(error) == "23505" {
            // Another user took the email address between the check and the insert.
            throw StratusError(.tryAgainLater, "the directory changed during the sign-in; retry it")
        }
    }

    private func signInOnce(container: String, account: IDTokenRules.Account, expiresAt: Int64, logger: Logger) async throws -> SignIn {
        try await store.locked(logger: logger, locks: [Self.lockKey(container: container, account: account)]) { transaction in
            let connection = transaction.connection
            try await Self.useNonce(account, on: connection, logger: logger)
            let linked = try await Self.linkedUser(container: container, account: account, on: connection, logger: logger)
            let user: (name: String, epoch: Int64)
            let created: Bool
            switch try AccountLinking.decide(linkedUser: linked?.name, caller: nil) {
            case .signIn:
                // `decide` answers signIn only for a linked account.
                user = linked!
                created = false
            case .createUser:
                user = (try await Self.createUser(container: container, account: account, on: connection, logger: logger), 1)
                try await Self.link(container: container, account: account, to: user.name, on: connection, logger: logger)
                created = true
            case .link, .alreadyLinked:
                throw StratusError(.internalError, "a sign-in cannot link an account")
            }
            let sessionID = try await SessionStore.insert(
                on: connection, container: container, userRecordName: user.name, method: .idToken, issuer: account.issuer, expiresAt: expiresAt,
                logger: logger)
            return SignIn(userRecordName: user.name, credentialEpoch: user.epoch, created: created, sessionID: sessionID)
        }
    }

    /// Links an account a checked ID token names to the signed-in user `userRecordName` (using its
    /// nonce up); EXISTS when it is linked to another user. Returns what was decided.
    public func link(container: String, account: IDTokenRules.Account, to userRecordName: String, logger: Logger) async throws -> AccountLinking.Decision {
        try await store.locked(logger: logger, locks: [Self.lockKey(container: container, account: account)]) { transaction in
            let connection = transaction.connection
            try await Self.useNonce(account, on: connection, logger: logger)
            let linked = try await Self.linkedUser(container: container, account: account, on: connection, logger: logger)
            let decision = try AccountLinking.decide(linkedUser: linked?.name, caller: userRecordName)
            if case .link(let user) = decision {
                let known = try await connection.query(
                    "SELECT 1 FROM users WHERE container = \(container) AND user_record_name = \(user)", logger: logger)
                var exists = false
                for try await _ in known { exists = true }
                guard exists else { throw StratusError(.notFound, "only a user of this container's directory can link an account") }
                try await Self.link(container: container, account: account, to: user, on: connection, logger: logger)
            }
            return decision
        }
    }

    /// The accounts linked to a user: (issuer, subject), by issuer.
    public func linkedAccounts(container: String, userRecordName: String, logger: Logger) async throws -> [(issuer: String, subject: String)] {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                """
                SELECT issuer, subject FROM linked_accounts WHERE container = \(container) AND user_record_name = \(userRecordName)
                ORDER BY issuer, subject LIMIT 100
                """, logger: logger)
            var found: [(issuer: String, subject: String)] = []
            for try await (issuer, subject) in rows.decode((String, String).self) { found.append((issuer, subject)) }
            return found
        }
    }

    /// One account's sign-ins and links queue behind each other (two first sign-ins would each
    /// create a user otherwise).
    static func lockKey(container: String, account: IDTokenRules.Account) -> String {
        "account:" + IDTokenRules.hashedNonce([container, account.issuer, account.subject].joined(separator: "\u{1F}"))
    }

    /// Records the token's nonce as used until the token expires; a nonce used before is refused.
    /// Expired nonces are forgotten a few at a time on the way.
    static func useNonce(_ account: IDTokenRules.Account, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query(
            """
            DELETE FROM used_nonces WHERE ctid = ANY(ARRAY(SELECT ctid FROM used_nonces WHERE expires_at < now() LIMIT 20 FOR UPDATE SKIP LOCKED))
            """, logger: logger)
        let rows = try await connection.query(
            """
            INSERT INTO used_nonces (issuer, nonce_digest, expires_at)
            VALUES (\(account.issuer), \(Data(IDTokenRules.nonceDigest(account.nonce))), to_timestamp(\(Double(account.expiresAt))))
            ON CONFLICT DO NOTHING RETURNING 1
            """, logger: logger)
        for try await _ in rows { return }
        throw StratusError(.authenticationFailed, "idToken's nonce was used before: a token is exchanged only once; sign in with the provider again")
    }

    static func linkedUser(
        container: String, account: IDTokenRules.Account, on connection: PostgresConnection, logger: Logger
    ) async throws -> (name: String, epoch: Int64)? {
        let rows = try await connection.query(
            """
            SELECT u.user_record_name, u.credential_epoch FROM linked_accounts a JOIN users u USING (user_record_name)
            WHERE a.container = \(container) AND a.issuer = \(account.issuer) AND a.subject = \(account.subject)
            """, logger: logger)
        for try await (name, epoch) in rows.decode((String, Int64).self) { return (name, epoch) }
        return nil
    }

    /// A new directory user for an account: the login is the user record name (the user has no
    /// password), the email address and name from the claims, discoverable as the container's
    /// sign-up option says.
    static func createUser(container: String, account: IDTokenRules.Account, on connection: PostgresConnection, logger: Logger) async throws -> String {
        let userRecordName = UserRecordName.generate()
        var taken = false
        if let email = account.email {
            let rows = try await connection.query(
                "SELECT 1 FROM users WHERE container = \(container) AND lower(email) = lower(\(email))", logger: logger)
            for try await _ in rows { taken = true }
        }
        let email = AccountLinking.emailForNewUser(account, takenByAnother: taken)
        let rows = try await connection.query(
            """
            INSERT INTO users (container, login, user_record_name, password_hash, email, given_name, family_name, discoverable)
            SELECT \(container), \(userRecordName), \(userRecordName), \(PasswordHash.noPassword), \(email),
                   \(account.nameComponents.givenName), \(account.nameComponents.familyName), c.users_discoverable_by_default
            FROM containers c WHERE c.container = \(container)
            RETURNING 1
            """, logger: logger)
        for try await _ in rows { return userRecordName }
        throw StratusError(.notFound, "no container '\(ClientText.excerpt(container))'")
    }

    static func link(
        container: String, account: IDTokenRules.Account, to userRecordName: String, on connection: PostgresConnection, logger: Logger
    ) async throws {
        try await connection.query(
            """
            INSERT INTO linked_accounts (container, issuer, subject, user_record_name, email)
            VALUES (\(container), \(account.issuer), \(account.subject), \(userRecordName), \(account.email))
            """, logger: logger)
    }
}
