import Foundation
import Logging
import StratusCore
import StratusKafka
import StratusPostgres
import StratusPush
import StratusWorkers

/// What the admin CLI does, as functions tests can call too.
public enum Admin {
    /// Applies pending migrations; returns their names. Then seals the trusted issuers' client
    /// secrets still stored in plain text (from before migration 0049) with the server's key.
    public static func migrate(_ configuration: StratusConfiguration, logger: Logger) async throws -> [String] {
        let migrations = try Migration.load(from: Migration.defaultDirectory())
        return try await StratusProcess.withStore(configuration, logger: logger) { store in
            let applied = try await Migrator(store: store, migrations: migrations).migrate(logger: logger)
            let sealed = try await IdentityStore(store: store).sealPlainClientSecrets(key: configuration.api.secretKey, logger: logger)
            if sealed > 0 { logger.notice("sealed the client secrets stored in plain text", metadata: ["issuers": "\(sealed)"]) }
            return applied
        }
    }

    /// Marks events from an id unpublished; returns how many.
    public static func republish(from id: Int64, _ configuration: StratusConfiguration, logger: Logger) async throws -> Int {
        try await StratusProcess.withStore(configuration, logger: logger) { store in
            try await StratusProcess.verifyMigrated(store, logger: logger)
            return try await EventLog(store: store).republish(from: id, logger: logger)
        }
    }

    /// One retention pass of the event log now, as stratus-gc runs them (`EventLogPruner`).
    public static func pruneEvents(_ configuration: StratusConfiguration, logger: Logger) async throws -> EventRetention.Plan {
        try await withMigratedStore(configuration, logger: logger) { store in
            try await EventLogPruner(store: store, configuration: configuration.eventRetention, logger: logger).pruneOnce()
        }
    }

    /// Rebuilds a worker from the event log, recorded as a maintenance run (refused while a run of
    /// the same kind runs, e.g. one the console started); returns the number of events read.
    public static func replay(
        worker: String, _ configuration: StratusConfiguration, logger: Logger, progress: @escaping @Sendable (Rebuild.Progress) -> Void
    ) async throws -> Int {
        _ = try Maintenance.definition(worker)
        try StratusProcess.verifyKafkaLibrary()
        let broker = Maintenance.Broker(
            kafka: configuration.kafka, topic: configuration.relay.topic, consumerGroupSuffix: configuration.worker.consumerGroupSuffix)
        return try await withMigratedStore(configuration, logger: logger) { store in
            try await Maintenance.run(.replay(worker: worker), startedBy: "cli", store: store, logger: logger, progress: progress) { progress in
                try await Maintenance.replay(worker: worker, store: store, broker: broker, logger: logger, progress: progress)
            }
        }
    }

    /// Rebuilds the query index into a new generation and swaps it in, recorded as a maintenance run;
    /// `language` (a PostgreSQL text search configuration) changes how text is tokenised, nil keeps
    /// the current one.
    public static func reindex(
        _ configuration: StratusConfiguration, language: String? = nil, logger: Logger, progress: @escaping @Sendable (Rebuild.Progress) -> Void
    ) async throws -> (generation: Int, events: Int) {
        try await withMigratedStore(configuration, logger: logger) { store in
            try await Maintenance.run(.reindex, startedBy: "cli", store: store, logger: logger, progress: progress) { progress in
                try await Reindex(store: store).run(language: language, logger: logger, progress: progress)
            }
        }
    }

    /// Creates a container and an API token; `anonymousPublicReads` decides whether callers without a
    /// user may read its public database (nil: a new container allows it, an existing one keeps its
    /// setting).
    public static func createContainer(
        _ container: String, label: String, anonymousPublicReads: Bool? = nil, usersDiscoverableByDefault: Bool? = nil,
        _ configuration: StratusConfiguration, logger: Logger
    ) async throws -> String {
        guard !container.isEmpty, container.utf8.count <= 255, !container.contains("/") else {
            throw ConfigurationProblem("a container identifier is 1 to 255 characters without '/'")
        }
        return try await withMigratedStore(configuration, logger: logger) { store in
            let containers = ContainerStore(store: store)
            let token = try await containers.create(container: container, label: label, logger: logger)
            if let anonymousPublicReads {
                try await containers.setAnonymousPublicReads(container: container, allowed: anonymousPublicReads, logger: logger)
            }
            if let usersDiscoverableByDefault {
                try await UserDirectory(store: store).setDiscoverableByDefault(container: container, usersDiscoverableByDefault, logger: logger)
            }
            return token
        }
    }

    /// Lets (or stops letting) callers without a user read a container's public database.
    public static func setAnonymousPublicReads(_ container: String, allowed: Bool, _ configuration: StratusConfiguration, logger: Logger) async throws {
        try await withMigratedStore(configuration, logger: logger) { store in
            guard try await ContainerStore(store: store).setAnonymousPublicReads(container: container, allowed: allowed, logger: logger) else {
                throw ConfigurationProblem("no container '\(container)'")
            }
        }
    }

    /// Sets the web origins whose pages may call a container from a browser (nil: any origin).
    public static func setAllowedOrigins(_ container: String, _ origins: [String]?, _ configuration: StratusConfiguration, logger: Logger) async throws {
        try await withMigratedStore(configuration, logger: logger) { store in
            guard try await ContainerStore(store: store).setAllowedOrigins(container: container, origins: origins, logger: logger) else {
                throw ConfigurationProblem("no container '\(container)'")
            }
        }
    }

    /// Names the heir of a container's public records (nil: none).
    public static func setPublicRecordsHeir(_ container: String, _ heir: String?, _ configuration: StratusConfiguration, logger: Logger) async throws {
        try await withMigratedStore(configuration, logger: logger) { store in
            do {
                guard try await ContainerStore(store: store).setPublicRecordsHeir(container: container, heir: heir, logger: logger) else {
                    throw ConfigurationProblem("no container '\(container)'")
                }
            } catch let error as StratusError {
                throw ConfigurationProblem(error.reason)
            }
        }
    }

    /// The heir of a container's public records, if it names one.
    public static func publicRecordsHeir(_ container: String, _ configuration: StratusConfiguration, logger: Logger) async throws -> String? {
        try await withMigratedStore(configuration, logger: logger) { store in
            try await ContainerStore(store: store).publicRecordsHeir(container: container, logger: logger)
        }
    }

    /// Suspends or resumes a container (every API process refuses its requests at once while it is
    /// suspended).
    public static func setContainerSuspended(_ container: String, _ suspended: Bool, _ configuration: StratusConfiguration, logger: Logger) async throws {
        try await withMigratedStore(configuration, logger: logger) { store in
            guard try await ContainerStore(store: store).setSuspended(container: container, suspended, logger: logger) else {
                throw ConfigurationProblem("no container '\(container)'")
            }
        }
    }

    /// Changes a container's own limits (each by its text: a number, or `default`); returns them all.
    public static func setContainerLimits(
        _ container: String, _ changes: [(ContainerLimits.Setting, String)], _ configuration: StratusConfiguration, logger: Logger
    ) async throws -> ContainerLimits {
        try await withMigratedStore(configuration, logger: logger) { store in
            let containers = ContainerStore(store: store)
            guard var limits = try await containers.limits(of: container, logger: logger) else { throw ConfigurationProblem("no container '\(container)'") }
            for (setting, text) in changes { try limits.set(setting, text) }
            guard try await containers.setLimits(of: container, limits, logger: logger) else { throw ConfigurationProblem("no container '\(container)'") }
            return limits
        }
    }

    /// One container's usage and own limits; nil when there is no such container.
    public static func containerDetails(
        _ container: String, _ configuration: StratusConfiguration, logger: Logger
    ) async throws -> (ContainerUsage, ContainerLimits)? {
        try await withMigratedStore(configuration, logger: logger) { store in
            let containers = ContainerStore(store: store)
            guard let usage = try await containers.usage(of: container, limit: 1, logger: logger).first,
                  let limits = try await containers.limits(of: container, logger: logger)
            else { return nil }
            return (usage, limits)
        }
    }

    /// The containers (or one) with what each holds.
    public static func containerUsage(
        _ container: String?, after: String?, limit: Int, _ configuration: StratusConfiguration, logger: Logger
    ) async throws -> [ContainerUsage] {
        try await withMigratedStore(configuration, logger: logger) { store in
            try await ContainerStore(store: store).usage(of: container, after: after, limit: limit, logger: logger)
        }
    }

    /// Registers a server-to-server public key (PEM or base64 DER) for a container; returns its key id.
    public static func createServerKey(
        container: String, publicKey text: String, label: String, _ configuration: StratusConfiguration, logger: Logger
    ) async throws -> String {
        let publicKey = try ServerPublicKey(text: text)
        return try await withMigratedStore(configuration, logger: logger) { store in
            try await ServerKeyStore(store: store).register(container: container, publicKey: publicKey, label: label, logger: logger).keyID
        }
    }

    /// Revokes a server-to-server key.
    public static func revokeServerKey(_ keyID: String, _ configuration: StratusConfiguration, logger: Logger) async throws {
        try await withMigratedStore(configuration, logger: logger) { store in
            guard try await ServerKeyStore(store: store).revoke(id: keyID, logger: logger) else {
                throw ConfigurationProblem("no active key '\(keyID)'")
            }
        }
    }

    /// Adds a user to a container's directory; returns the user record name.
    public static func createUser(
        container: String, login: String, password: String, identity: UserIdentityChange = UserIdentityChange(),
        _ configuration: StratusConfiguration, logger: Logger
    ) async throws -> String {
        try await withMigratedStore(configuration, logger: logger) { store in
            try await UserStore(store: store).create(container: container, login: login, password: password, identity: identity, logger: logger)
        }
    }

    /// Changes a directory user's email address, name or discoverability.
    public static func changeUser(
        container: String, login: String, _ change: UserIdentityChange, _ configuration: StratusConfiguration, logger: Logger
    ) async throws {
        try await withMigratedStore(configuration, logger: logger) { store in
            try await UserDirectory(store: store).change(container: container, login: login, change, logger: logger)
        }
    }

    /// Sets a container's sign-up option: whether users it gains from now on start discoverable.
    public static func setUsersDiscoverableByDefault(_ container: String, _ discoverable: Bool, _ configuration: StratusConfiguration, logger: Logger) async throws {
        try await withMigratedStore(configuration, logger: logger) { store in
            guard try await UserDirectory(store: store).setDiscoverableByDefault(container: container, discoverable, logger: logger) else {
                throw ConfigurationProblem("no container '\(container)'")
            }
        }
    }

    /// Sets a directory user's password.
    public static func setPassword(
        container: String, login: String, password: String, _ configuration: StratusConfiguration, logger: Logger
    ) async throws {
        try await withMigratedStore(configuration, logger: logger) { store in
            try await UserStore(store: store).setPassword(container: container, login: login, password: password, logger: logger)
        }
    }

    /// Adds a console operator who signs in with a login and password; `containers` limits the
    /// operator to those containers (nil: every container).
    public static func createOperator(
        login: String, password: String, containers: [String]?, _ configuration: StratusConfiguration, logger: Logger
    ) async throws {
        try await withMigratedStore(configuration, logger: logger) { store in
            do {
                try await OperatorStore(store: store).create(login: login, password: password, containers: containers, logger: logger)
            } catch let error as StratusError {
                throw ConfigurationProblem(error.reason)
            }
        }
    }

    /// Registers a webhook for an existing container after checking its URL (`WebhookURLPolicy`:
    /// https, or plain http to a loopback host when `allowInsecureLoopback`); returns it with its
    /// new secret, which is shown only here.
    public static func createWebhook(
        container: String, url: String, allowInsecureLoopback: Bool, _ configuration: StratusConfiguration, logger: Logger
    ) async throws -> DeliveryStore.Webhook {
        do {
            _ = try WebhookURLPolicy.check(url, allowInsecureLoopback: allowInsecureLoopback)
        } catch {
            throw ConfigurationProblem("refused webhook URL: \(error.message)")
        }
        return try await withMigratedStore(configuration, logger: logger) { store in
            guard try await ContainerStore(store: store).exists(container: container, logger: logger) else {
                throw ConfigurationProblem("no container '\(container)'")
            }
            return try await DeliveryStore(store: store).createWebhook(container: container, url: url, logger: logger)
        }
    }

    /// The webhooks of a container, or of every container when nil.
    public static func webhooks(container: String?, _ configuration: StratusConfiguration, logger: Logger) async throws -> [DeliveryStore.Webhook] {
        try await withMigratedStore(configuration, logger: logger) { store in
            try await DeliveryStore(store: store).webhooks(container: container, logger: logger)
        }
    }

    /// Removes a webhook and its pending deliveries.
    public static func deleteWebhook(_ id: String, _ configuration: StratusConfiguration, logger: Logger) async throws {
        guard let webhookID = UUID(uuidString: id) else { throw ConfigurationProblem("'\(id)' is not a webhook id") }
        try await withMigratedStore(configuration, logger: logger) { store in
            guard try await DeliveryStore(store: store).deleteWebhook(webhookID, logger: logger) else {
                throw ConfigurationProblem("no webhook '\(id)'")
            }
        }
    }

    /// Sets (or replaces) an existing container's APNs provider key after parsing it, so a key
    /// APNs would refuse is refused here rather than at the first push.
    public static func setAPNsKey(
        container: String, teamID: String, keyID: String, privateKeyPEM: String, topic: String,
        _ configuration: StratusConfiguration, logger: Logger
    ) async throws {
        for (name, value) in [("team id", teamID), ("key id", keyID), ("topic", topic)] where value.isEmpty || value.contains(where: \.isWhitespace) {
            throw ConfigurationProblem("the \(name) must be non-empty and without spaces, got '\(value)'")
        }
        do {
            _ = try APNsCredentials(teamID: teamID, keyID: keyID, privateKeyPEM: privateKeyPEM, topic: topic, environment: .production)
        } catch {
            throw ConfigurationProblem("refused APNs key: \(error.message)")
        }
        try await withMigratedStore(configuration, logger: logger) { store in
            guard try await ContainerStore(store: store).exists(container: container, logger: logger) else {
                throw ConfigurationProblem("no container '\(container)'")
            }
            try await DeliveryStore(store: store).setAPNsKey(
                .init(container: container, teamID: teamID, keyID: keyID, privateKey: privateKeyPEM, topic: topic), logger: logger)
        }
    }

    /// Trusts an issuer for ID-token sign-in in an existing container (or replaces its JWKS URL and
    /// audiences).
    public static func trustIssuer(container: String, _ issuer: TrustedIssuer, _ configuration: StratusConfiguration, logger: Logger) async throws {
        try await withMigratedStore(configuration, logger: logger) { store in
            do {
                try await IdentityStore(store: store).trust(container: container, issuer, sealingWith: configuration.api.secretKey, logger: logger)
            } catch let error as StratusError {
                throw ConfigurationProblem(error.reason)
            }
        }
    }

    /// Sets who may sign up by email in a container.
    public static func setSignUp(_ container: String, _ mode: SignUpMode, _ configuration: StratusConfiguration, logger: Logger) async throws {
        try await withMigratedStore(configuration, logger: logger) { store in
            do {
                try await EmailSignUpStore(store: store).setMode(container: container, mode, logger: logger)
            } catch let error as StratusError {
                throw ConfigurationProblem(error.reason)
            }
        }
    }

    /// Invites an address to sign up (true) or withdraws its invitation (false); answers whether
    /// anything changed.
    public static func invite(
        _ container: String, email: String, invited: Bool, _ configuration: StratusConfiguration, logger: Logger
    ) async throws -> Bool {
        try await withMigratedStore(configuration, logger: logger) { store in
            do {
                let signUps = EmailSignUpStore(store: store)
                return invited
                    ? try await signUps.invite(container: container, email: email, logger: logger)
                    : try await signUps.uninvite(container: container, email: email, logger: logger)
            } catch let error as StratusError {
                throw ConfigurationProblem(error.reason)
            }
        }
    }

    /// The addresses a container invited to sign up.
    public static func invitations(_ container: String, _ configuration: StratusConfiguration, logger: Logger) async throws -> [String] {
        try await withMigratedStore(configuration, logger: logger) { store in
            try await EmailSignUpStore(store: store).invitations(container: container, logger: logger)
        }
    }

    /// The issuers a container trusts.
    public static func trustedIssuers(container: String, _ configuration: StratusConfiguration, logger: Logger) async throws -> [TrustedIssuer] {
        try await withMigratedStore(configuration, logger: logger) { store in
            try await IdentityStore(store: store).trustedIssuers(container: container, logger: logger)
        }
    }

    /// Stops trusting an issuer.
    public static func distrustIssuer(container: String, issuer: String, _ configuration: StratusConfiguration, logger: Logger) async throws {
        try await withMigratedStore(configuration, logger: logger) { store in
            guard try await IdentityStore(store: store).distrust(container: container, issuer: issuer, logger: logger) else {
                throw ConfigurationProblem("container '\(container)' does not trust '\(issuer)'")
            }
        }
    }

    /// A user's sessions, the newest first.
    public static func sessions(container: String, user: String, _ configuration: StratusConfiguration, logger: Logger) async throws -> [Session] {
        try await withMigratedStore(configuration, logger: logger) { store in
            try await SessionStore(store: store).list(container: container, userRecordName: user, logger: logger)
        }
    }

    /// Revokes a session: its tokens are refused from now on, on every API process.
    public static func revokeSession(container: String, sessionID: String, _ configuration: StratusConfiguration, logger: Logger) async throws {
        let checked: String
        do { checked = try Session.validateID(sessionID, "the session id") } catch { throw ConfigurationProblem(error.reason) }
        try await withMigratedStore(configuration, logger: logger) { store in
            let sessionID = checked
            let sessions = SessionStore(store: store)
            guard let session = try await sessions.session(container: container, sessionID: sessionID, logger: logger) else {
                throw ConfigurationProblem("container '\(container)' has no session '\(sessionID)'")
            }
            _ = try await sessions.revoke(container: container, userRecordName: session.userRecordName, sessionID: sessionID, logger: logger)
        }
    }

    /// Signs a user out everywhere; returns how many sessions were revoked.
    public static func signOutEverywhere(container: String, user: String, _ configuration: StratusConfiguration, logger: Logger) async throws -> Int {
        try await withMigratedStore(configuration, logger: logger) { store in
            do {
                return try await SessionStore(store: store).revokeAll(container: container, userRecordName: user, logger: logger)
            } catch let error as StratusError {
                throw ConfigurationProblem(error.reason)
            }
        }
    }

    static func withMigratedStore<T: Sendable>(
        _ configuration: StratusConfiguration, logger: Logger, _ body: @Sendable (PostgresStore) async throws -> T
    ) async throws -> T {
        try await StratusProcess.withStore(configuration, logger: logger) { store in
            try await StratusProcess.verifyMigrated(store, logger: logger)
            return try await body(store)
        }
    }

    /// Issues a web auth token signed with the configured secret key. For a user of the container's
    /// directory the token carries the user's current credential epoch (so the next password change
    /// ends it too); for any other user record name it carries none.
    public static func webAuthToken(
        container: String, user: String?, days: Int, _ configuration: StratusConfiguration, logger: Logger
    ) async throws -> String {
        let userRecordName = user ?? UserRecordName.generate()
        // Clamped to a century: a larger count would overflow the expiry.
        let expiresAt = Int64(Date().timeIntervalSince1970) + Int64(min(max(days, 0), 36_500)) * 86_400
        let epoch = try await withMigratedStore(configuration, logger: logger) { store in
            try await UserStore(store: store).credentialEpoch(container: container, userRecordName: userRecordName, logger: logger)
        }
        return WebAuthToken(userRecordName: userRecordName, container: container, expiresAt: expiresAt, credentialEpoch: epoch)
            .signed(with: configuration.api.secretKey)
    }
}
