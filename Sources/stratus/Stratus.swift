import ArgumentParser
import Foundation
import Logging
import StratusCore
import StratusRuntime

/// The admin CLI: migrate, run the relay, re-publish, replay workers, manage containers, webhooks and APNs keys.
@main
struct Stratus: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stratus",
        abstract: "Administer a Stratus deployment.",
        subcommands: [Migrate.self, RelayCommand.self, Republish.self, EventsCommand.self, Replay.self, Reindex.self, ContainerCommand.self, KeyCommand.self, UserCommand.self,
                      SessionCommand.self, WebhookCommand.self, APNsCommand.self, SchemaCommand.self, OperatorCommand.self, AuditCommand.self,
                      ExportCommand.self, ImportCommand.self]
    )
}

/// Options every subcommand shares; flags override the environment.
struct CommonOptions: ParsableArguments {
    @Option(help: "PostgreSQL URL (default: $STRATUS_DATABASE_URL).")
    var databaseURL: String?

    @Option(help: "Kafka bootstrap brokers (default: $STRATUS_KAFKA_BROKERS).")
    var kafkaBrokers: String?

    @Option(help: "Who runs the command, as the audit log records it (default: the OS user).")
    var actor: String?

    func resolve(label: String) throws -> (StratusConfiguration, Logger) {
        var configuration = try StratusConfiguration.fromEnvironment()
        if let databaseURL { configuration.databaseURL = databaseURL }
        if let kafkaBrokers { configuration.kafka.brokers = kafkaBrokers }
        CLI.bootstrapOnce(level: configuration.logLevel)
        return (configuration, Logger(label: label))
    }

    /// Appends the command's entry to the audit log, once what it did has succeeded.
    func audit(
        _ action: AuditAction, container: String = "", subject: String = "", details: [(String, String)] = [],
        _ configuration: StratusConfiguration, _ logger: Logger
    ) async throws {
        let draft = AuditDraft(actor: Admin.cliActor(explicit: actor), action: action, container: container, subject: subject, details: details)
        try await Admin.audit(draft, configuration, logger: logger)
    }
}

enum CLI {
    nonisolated(unsafe) static var bootstrapped = false
    static func bootstrapOnce(level: Logger.Level) {
        guard !bootstrapped else { return }
        bootstrapped = true
        Observability.bootstrap(level: level)
    }
}

struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Apply pending migrations from migrations/ (a no-op when up to date).")
    @OptionGroup var options: CommonOptions

    func run() async throws {
        let (configuration, logger) = try options.resolve(label: "stratus-migrate")
        let applied = try await Admin.migrate(configuration, logger: logger)
        print(applied.isEmpty ? "database is up to date" : "applied: \(applied.joined(separator: ", "))")
        try await options.audit(.databaseMigrate, details: [("applied", applied.isEmpty ? "none" : applied.joined(separator: ","))], configuration, logger)
    }
}

struct RelayCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "relay", abstract: "Run the event relay alone (outbox → Kafka) until interrupted.")
    @OptionGroup var options: CommonOptions

    func run() async throws {
        let (configuration, logger) = try options.resolve(label: "stratus-relay")
        try await StratusProcess.runRelay(configuration, logger: logger)
    }
}

struct Republish: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Publish the event log again from an event id (the running relay sends it).")
    @OptionGroup var options: CommonOptions
    @Option(help: "The first event id to publish again.")
    var from: Int64

    func run() async throws {
        let (configuration, logger) = try options.resolve(label: "stratus-republish")
        let count = try await Admin.republish(from: from, configuration, logger: logger)
        print("marked \(count) events for publishing from id \(from)")
        try await options.audit(.eventsRepublish, details: [("from", "\(from)"), ("events", "\(count)")], configuration, logger)
    }
}

struct EventsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "events", abstract: "The event log's retention (STRATUS_EVENT_RETENTION_SECONDS).", subcommands: [Prune.self])

    struct Prune: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Run one retention pass now: drop the log's partitions every worker and the relay have passed and the window no longer holds, and create the ones ahead.")
        @OptionGroup var options: CommonOptions

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-events")
            let plan = try await Admin.pruneEvents(configuration, logger: logger)
            let below = plan.prunedBelow.map { "every event below id \($0) is gone" } ?? "nothing was old enough and passed by every reader"
            print("dropped \(plan.drop.count) partitions\(plan.truncateDefault ? " and emptied the default one" : ""), created \(plan.create.count); \(below)")
            try await options.audit(
                .eventsPrune, details: [("dropped", "\(plan.drop.count)"), ("prunedBelow", plan.prunedBelow.map(String.init) ?? "none")], configuration, logger)
        }
    }
}

struct Replay: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Rebuild a worker's state from the beginning of the event log and reset its consumer group.",
        discussion: "Stop the worker first so its consumer group can be moved; a running worker stays correct but keeps its position.")
    @OptionGroup var options: CommonOptions
    @Argument(help: "The worker: stratus-indexer, stratus-subscriptions, stratus-gc or stratus-shares.")
    var worker: String

    func run() async throws {
        let (configuration, logger) = try options.resolve(label: "stratus-replay")
        let count = try await Admin.replay(worker: worker, configuration, logger: logger) { progress in
            print(String(format: "replay %@: %d events, at id %lld of %lld, %.0f events/s", worker, progress.events, progress.position, progress.target, progress.eventsPerSecond))
        }
        print("replay \(worker) done: \(count) events")
        try await options.audit(.workerReplay, subject: worker, details: [("events", "\(count)")], configuration, logger)
    }
}

struct Reindex: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Build a fresh query index generation from the event log while the live one serves, then swap it in.")
    @OptionGroup var options: CommonOptions
    @Option(help: "The text search configuration of the new generation (a PostgreSQL one: simple, english, german, …); default: the current one's.")
    var language: String?

    func run() async throws {
        let (configuration, logger) = try options.resolve(label: "stratus-reindex")
        let result = try await Admin.reindex(configuration, language: language, logger: logger) { progress in
            print(String(format: "reindex: %d events, at id %lld of %lld, %.0f events/s", progress.events, progress.position, progress.target, progress.eventsPerSecond))
        }
        print("reindex done: generation \(result.generation) is live, \(result.events) events")
        try await options.audit(
            .indexReindex, details: [("generation", "\(result.generation)"), ("events", "\(result.events)"), ("language", language ?? "current")],
            configuration, logger)
    }
}

struct ContainerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "container", abstract: "Manage containers.",
        subcommands: [Create.self, Set.self, List.self, Show.self, Suspend.self, Resume.self, Delete.self, Deletion.self, Auth.self, Invite.self, Invitations.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a container (if new) and a new API token for it; prints the token once.")
        @OptionGroup var options: CommonOptions
        @Argument(help: "The container identifier, e.g. iCloud.com.example.notes.")
        var container: String
        @Option(help: "A label for the token.")
        var label: String = ""
        @Flag(inversion: .prefixedNo, help: """
            Whether callers without a user (API token only) may read the public database. A new container \
            allows it, as Apple's service does; an existing one keeps its setting unless a flag is given.
            """)
        var anonymousPublicReads: Bool?
        @Option(help: """
            The sign-up option: whether users the container's directory gains start discoverable (found by \
            users/discover and users/lookup/*): true or false. A new container says false; an existing one keeps its setting.
            """)
        var usersDiscoverableByDefault: Bool?

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-container")
            let token = try await Admin.createContainer(
                container, label: label, anonymousPublicReads: anonymousPublicReads, usersDiscoverableByDefault: usersDiscoverableByDefault,
                configuration, logger: logger)
            print(token)
            var details = [("label", label), ("token", AuditEntry.hex(APIToken.digest(token)))]
            if let anonymousPublicReads { details.append(("anonymousPublicReads", "\(anonymousPublicReads)")) }
            if let usersDiscoverableByDefault { details.append(("usersDiscoverableByDefault", "\(usersDiscoverableByDefault)")) }
            try await options.audit(.containerCreate, container: container, details: details, configuration, logger)
        }
    }

    struct Set: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Change a container's settings.")
        @OptionGroup var options: CommonOptions
        @Argument(help: "The container identifier.")
        var container: String
        @Option(help: "Whether callers without a user (API token only) may read the public database: true or false.")
        var anonymousPublicReads: Bool?
        @Option(help: "The sign-up option: whether users the directory gains from now on start discoverable: true or false.")
        var usersDiscoverableByDefault: Bool?
        @Option(help: "Who may sign up by email: open (anyone), invite-only (the addresses invited), or off (nobody; the default).")
        var signUp: String?
        @OptionGroup var limits: ContainerLimitOptions
        @Option(help: "A web origin (scheme://host[:port]) whose pages may call the container from a browser (CORS); repeat for several; '*' alone: any origin (the default).")
        var allowedOrigin: [String] = []
        @Option(help: "A user record name: the user who takes the public-database records of a user who is deleted (they are deleted otherwise); 'none': nobody.")
        var publicRecordsHeir: String?

        func validate() throws {
            guard anonymousPublicReads != nil || usersDiscoverableByDefault != nil || signUp != nil || !allowedOrigin.isEmpty || !limits.changes.isEmpty
                    || publicRecordsHeir != nil else {
                throw ValidationError(
                    "give --anonymous-public-reads, --users-discoverable-by-default, --sign-up, --allowed-origin, --public-records-heir or a limit (--request-rate, …)")
            }
            if let signUp, SignUpMode(rawValue: signUp) == nil { throw ValidationError("--sign-up is open, invite-only or off") }
            do { _ = try AllowedOrigins.validated(allowedOrigin) } catch { throw ValidationError(error.reason) }
            if let publicRecordsHeir {
                do throws(StratusError) { _ = try UserDeletion.validate(heir: publicRecordsHeir) } catch { throw ValidationError(error.reason) }
            }
            try limits.validate()
        }

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-container")
            if let anonymousPublicReads {
                try await Admin.setAnonymousPublicReads(container, allowed: anonymousPublicReads, configuration, logger: logger)
                print("\(container): anonymous public reads \(anonymousPublicReads ? "allowed" : "not allowed")")
            }
            if let usersDiscoverableByDefault {
                try await Admin.setUsersDiscoverableByDefault(container, usersDiscoverableByDefault, configuration, logger: logger)
                print("\(container): new users \(usersDiscoverableByDefault ? "start" : "do not start") discoverable")
            }
            if let mode = signUp.flatMap(SignUpMode.init(rawValue:)) {
                try await Admin.setSignUp(container, mode, configuration, logger: logger)
                print("\(container): sign-up \(mode.rawValue)")
            }
            if !allowedOrigin.isEmpty {
                let origins = try AllowedOrigins.validated(allowedOrigin)
                try await Admin.setAllowedOrigins(container, origins, configuration, logger: logger)
                print("\(container): browsers may call it from \(origins?.joined(separator: ", ") ?? "any origin")")
            }
            if let publicRecordsHeir {
                let heir = try UserDeletion.validate(heir: publicRecordsHeir)
                try await Admin.setPublicRecordsHeir(container, heir, configuration, logger: logger)
                print("\(container): a deleted user's public records \(heir.map { "go to \($0)" } ?? "are deleted with them")")
            }
            var details: [(String, String)] = []
            if let anonymousPublicReads { details.append(("anonymousPublicReads", "\(anonymousPublicReads)")) }
            if let usersDiscoverableByDefault { details.append(("usersDiscoverableByDefault", "\(usersDiscoverableByDefault)")) }
            if let signUp { details.append(("signUp", signUp)) }
            if !limits.changes.isEmpty {
                let set = try await Admin.setContainerLimits(container, limits.changes, configuration, logger: logger)
                for setting in ContainerLimits.Setting.allCases { print("\(container): \(setting.rawValue) \(set.text(of: setting))") }
                for (setting, _) in limits.changes { details.append((setting.rawValue, set.text(of: setting))) }
            }
            if !allowedOrigin.isEmpty { details.append(("allowedOrigins", allowedOrigin.joined(separator: ","))) }
            if let publicRecordsHeir { details.append(("publicRecordsHeir", publicRecordsHeir)) }
            try await options.audit(.containerSettings, container: container, details: details, configuration, logger)
        }
    }
}

extension ContainerCommand {
    struct Invite: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Invite an email address to sign up to an invite-only container, or withdraw its invitation (a user it became stays).")
        @OptionGroup var options: CommonOptions
        @Argument(help: "The container identifier.")
        var container: String
        @Option(help: "The address.")
        var email: String
        @Flag(help: "Withdraw the invitation instead.")
        var remove = false

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-container")
            let changed = try await Admin.invite(container, email: email, invited: !remove, configuration, logger: logger)
            if remove, !changed { throw ValidationError("\(email) is not invited to \(container)") }
            print("\(container): \(email) \(remove ? "is no longer invited" : changed ? "is invited" : "was invited already")")
            try await options.audit(remove ? .signUpUninvite : .signUpInvite, container: container, subject: email.lowercased(), configuration, logger)
        }
    }

    struct Invitations: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the addresses invited to sign up to a container.")
        @OptionGroup var options: CommonOptions
        @Argument(help: "The container identifier.")
        var container: String

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-container")
            for email in try await Admin.invitations(container, configuration, logger: logger) { print(email) }
        }
    }

    /// The issuers a container trusts for ID-token sign-in.
    struct Auth: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "The issuers (Sign in with Apple, OpenID Connect providers) whose ID tokens sign users in to a container.",
            subcommands: [Add.self, List.self, Remove.self])

        struct Add: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Trust an issuer (or change its JWKS URL and audiences).")
            @OptionGroup var options: CommonOptions
            @Argument(help: "The container identifier.")
            var container: String
            @Option(help: "The issuer, exactly as its tokens' 'iss' says, e.g. https://appleid.apple.com.")
            var issuer: String
            @Option(help: "Where the issuer publishes its keys (JWKS), e.g. https://appleid.apple.com/auth/keys.")
            var jwksURL: String
            @Option(help: "A client id tokens must be issued to ('aud'), e.g. the app's bundle id; repeat for several.")
            var audience: [String] = []
            @Option(help: "The client id the hosted sign-in page signs in with (one of the audiences, e.g. a Services ID): the page then offers a button for the issuer.")
            var webClientID: String?
            @Option(help: "The issuer's authorization endpoint, when its discovery document (ISSUER/.well-known/openid-configuration) does not give it.")
            var authorizationURL: String?
            @Option(help: "The redirect URL registered at the issuer, when it is not PUBLIC_URL/auth/1/CONTAINER/signin/provider/callback.")
            var redirectURL: String?
            @Option(help: "The issuer's token endpoint: the hosted page then signs in with the authorization-code flow and PKCE, exchanging the code there for the ID token.")
            var tokenURL: String?
            @Option(help: "A file holding the web client's secret, sent to the token endpoint (never shown nor logged); without it the client has none.")
            var clientSecretFile: String?

            func run() async throws {
                let (configuration, logger) = try options.resolve(label: "stratus-container")
                var clientSecret: String?
                if let clientSecretFile {
                    guard let data = FileManager.default.contents(atPath: clientSecretFile), data.count <= TrustedIssuer.maxClientSecretBytes + 2,
                          let text = String(data: data, encoding: .utf8)
                    else {
                        throw ValidationError("cannot read a client secret of at most \(TrustedIssuer.maxClientSecretBytes) bytes from '\(clientSecretFile)'")
                    }
                    clientSecret = text.trimmingCharacters(in: .newlines)
                }
                let trusted = TrustedIssuer(
                    issuer: issuer, keySetURL: jwksURL, audiences: audience, webClientID: webClientID, authorizationURL: authorizationURL, redirectURL: redirectURL,
                    tokenURL: tokenURL, clientSecret: clientSecret)
                try await Admin.trustIssuer(container: container, trusted, configuration, logger: logger)
                let flow = tokenURL == nil ? "" : " (the authorization-code flow with PKCE\(clientSecret == nil ? "" : " and a client secret"))"
                print("\(container): trusts \(issuer)\(webClientID.map { "; the hosted page signs in with client id \($0)\(flow)" } ?? "")")
                var details = [("jwksURL", jwksURL), ("audiences", audience.joined(separator: ","))]
                for (name, value) in [("webClientID", webClientID), ("authorizationURL", authorizationURL), ("redirectURL", redirectURL), ("tokenURL", tokenURL)] {
                    if let value { details.append((name, value)) }
                }
                // The secret itself is never audited: only that one is set.
                if clientSecret != nil { details.append(("clientSecret", "set")) }
                try await options.audit(.issuerTrust, container: container, subject: issuer, details: details, configuration, logger)
            }
        }

        struct List: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: """
                    List the issuers a container trusts (issuer, JWKS URL, audiences, the hosted page's web client id, authorization URL, redirect URL, \
                    token URL, whether a client secret is set; '-' for none).
                    """)
            @OptionGroup var options: CommonOptions
            @Argument(help: "The container identifier.")
            var container: String

            func run() async throws {
                let (configuration, logger) = try options.resolve(label: "stratus-container")
                for issuer in try await Admin.trustedIssuers(container: container, configuration, logger: logger) {
                    let web = [issuer.webClientID, issuer.authorizationURL, issuer.redirectURL, issuer.tokenURL, issuer.hasClientSecret ? "secret set" : nil]
                        .map { $0 ?? "-" }.joined(separator: "\t")
                    print("\(issuer.issuer)\t\(issuer.keySetURL)\t\(issuer.audiences.joined(separator: ","))\t\(web)")
                }
            }
        }

        struct Remove: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Stop trusting an issuer: its tokens no longer sign in (sessions already begun go on).")
            @OptionGroup var options: CommonOptions
            @Argument(help: "The container identifier.")
            var container: String
            @Option(help: "The issuer.")
            var issuer: String

            func run() async throws {
                let (configuration, logger) = try options.resolve(label: "stratus-container")
                try await Admin.distrustIssuer(container: container, issuer: issuer, configuration, logger: logger)
                print("\(container): no longer trusts \(issuer)")
                try await options.audit(.issuerDistrust, container: container, subject: issuer, configuration, logger)
            }
        }
    }
}

/// A user's sessions, for an operator.
struct SessionCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "session", abstract: "Users' sessions (one per sign-in): list them, revoke one, sign a user out everywhere.",
        subcommands: [List.self, Revoke.self, RevokeAll.self])

    /// The user a command is about: the container and the user record name.
    struct ContainerUser: ParsableArguments {
        @Argument(help: "The container identifier.")
        var container: String
        @Option(help: "The user record name.")
        var user: String
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List a user's sessions, newest first (id, method, issuer, created, expires, state).")
        @OptionGroup var options: CommonOptions
        @OptionGroup var named: ContainerUser

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-session")
            let now = Int64(Date().timeIntervalSince1970)
            for session in try await Admin.sessions(container: named.container, user: named.user, configuration, logger: logger) {
                let state = session.revokedAt != nil ? "revoked" : session.isActive(now: now) ? "active" : "expired"
                print([session.sessionID, session.method.rawValue, session.issuer ?? "-", ISO8601Time.text(session.createdAt),
                       ISO8601Time.text(session.expiresAt), state].joined(separator: "\t"))
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke a session: its web auth tokens are refused from now on.")
        @OptionGroup var options: CommonOptions
        @Argument(help: "The container identifier.")
        var container: String
        @Argument(help: "The session id.")
        var sessionID: String

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-session")
            try await Admin.revokeSession(container: container, sessionID: sessionID, configuration, logger: logger)
            print("revoked \(sessionID)")
            try await options.audit(.sessionRevoke, container: container, subject: sessionID, configuration, logger)
        }
    }

    struct RevokeAll: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "revoke-all", abstract: "Sign a user out everywhere: every session is revoked and every token issued before is refused.")
        @OptionGroup var options: CommonOptions
        @OptionGroup var named: ContainerUser

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-session")
            let revoked = try await Admin.signOutEverywhere(container: named.container, user: named.user, configuration, logger: logger)
            print("revoked \(revoked) sessions")
            try await options.audit(
                .sessionRevokeAll, container: named.container, subject: named.user, details: [("sessions", "\(revoked)")], configuration, logger)
        }
    }
}

struct KeyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "key", abstract: "Manage server-to-server keys (P-256) that sign requests to the public database.",
        subcommands: [Create.self, Revoke.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Register a public key for a container; prints the key id for the X-Apple-CloudKit-Request-KeyID header.",
            discussion: "Make a key pair with: openssl ecparam -name prime256v1 -genkey -noout -out eckey.pem; openssl ec -in eckey.pem -pubout -out public.pem")
        @OptionGroup var options: CommonOptions
        @Argument(help: "The container identifier.")
        var container: String
        @Option(help: "The public key file (PEM, or '-' for standard input).")
        var publicKey: String
        @Option(help: "A label for the key.")
        var label: String = ""

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-key")
            let text: String
            if publicKey == "-" {
                text = String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
            } else {
                guard let data = FileManager.default.contents(atPath: publicKey) else { throw ValidationError("cannot read \(publicKey)") }
                text = String(decoding: data, as: UTF8.self)
            }
            let keyID = try await Admin.createServerKey(container: container, publicKey: text, label: label, configuration, logger: logger)
            print(keyID)
            try await options.audit(.keyCreate, container: container, subject: keyID, details: [("label", label)], configuration, logger)
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke a server-to-server key: requests signed with it fail from now on.")
        @OptionGroup var options: CommonOptions
        @Argument(help: "The key id.")
        var keyID: String

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-key")
            try await Admin.revokeServerKey(keyID, configuration, logger: logger)
            print("revoked \(keyID)")
            try await options.audit(.keyRevoke, subject: keyID, configuration, logger)
        }
    }
}

struct UserCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "user", abstract: "The user directory of the sign-in endpoint, and development tokens.",
        subcommands: [Create.self, Set.self, Password.self, Token.self, Delete.self, Deletion.self])

    /// A user's identity as options: each given part is set, an empty one cleared.
    struct Identity: ParsableArguments {
        @Option(help: "The email address other users may find the user by, when discoverable ('' clears it).")
        var email: String?
        @Option(help: "The first name (CloudKit's nameComponents.givenName; '' clears it).")
        var givenName: String?
        @Option(help: "The last name (nameComponents.familyName; '' clears it).")
        var familyName: String?
        @Option(help: "Whether users/discover and users/lookup/* find the user: true or false (create: default the container's sign-up option).")
        var discoverable: Bool?

        var change: UserIdentityChange {
            UserIdentityChange(emailAddress: email, givenName: givenName, familyName: familyName, discoverable: discoverable)
        }

        /// The parts given, by name (the audit log's details: which parts changed, never their values
        /// but discoverability).
        var changedParts: String {
            var parts = [("email", email), ("givenName", givenName), ("familyName", familyName)].compactMap { name, value in value.map { _ in name } }
            if let discoverable { parts.append("discoverable=\(discoverable)") }
            return parts.isEmpty ? "none" : parts.joined(separator: ",")
        }
    }

    /// The container, login and password source of a directory command.
    struct Login: ParsableArguments {
        @Argument(help: "The container identifier.")
        var container: String
        @Option(help: "The login (never shown to other users; the user record name is opaque).")
        var login: String
        @Option(help: "A file whose first line is the password, or '-' for standard input.")
        var passwordFile: String = "-"

        /// The first line of the password file (or of standard input).
        func password() throws -> String { try Self.readPassword(passwordFile) }

        /// The first line of `file` (or of standard input for '-').
        static func readPassword(_ file: String) throws -> String {
            let data = file == "-" ? FileHandle.standardInput.readDataToEndOfFile() : FileManager.default.contents(atPath: file)
            guard let data else { throw ValidationError("cannot read \(file)") }
            return String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).first.map(String.init) ?? ""
        }
    }

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Add a user who signs in with a login and password; prints the user record name.")
        @OptionGroup var options: CommonOptions
        @OptionGroup var user: Login
        @OptionGroup var identity: Identity

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-user")
            let userRecordName = try await Admin.createUser(
                container: user.container, login: user.login, password: try user.password(), identity: identity.change, configuration, logger: logger)
            print(userRecordName)
            try await options.audit(
                .userCreate, container: user.container, subject: user.login,
                details: [("userRecordName", userRecordName), ("identity", identity.changedParts)], configuration, logger)
        }
    }

    struct Set: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Change a user's email address, name or discoverability.")
        @OptionGroup var options: CommonOptions
        @Argument(help: "The container identifier.")
        var container: String
        @Option(help: "The user's login.")
        var login: String
        @OptionGroup var identity: Identity

        func validate() throws {
            guard !identity.change.isEmpty else { throw ValidationError("give at least one of --email, --given-name, --family-name, --discoverable") }
        }

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-user")
            try await Admin.changeUser(container: container, login: login, identity.change, configuration, logger: logger)
            print("user changed")
            try await options.audit(.userChange, container: container, subject: login, details: [("identity", identity.changedParts)], configuration, logger)
        }
    }

    struct Password: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Set a user's password; the user's web auth tokens issued before stop working.")
        @OptionGroup var options: CommonOptions
        @OptionGroup var user: Login

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-user")
            try await Admin.setPassword(container: user.container, login: user.login, password: try user.password(), configuration, logger: logger)
            print("password set")
            try await options.audit(.userPassword, container: user.container, subject: user.login, configuration, logger)
        }
    }

    struct Token: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Issue a web auth token (ckWebAuthToken) for a user record name without signing in (development and operations); prints it.")
        @OptionGroup var options: CommonOptions
        @Argument(help: "The container identifier.")
        var container: String
        @Option(help: "The user record name (default: a new '_' + random id).")
        var user: String?
        @Option(help: "Days until the token expires.")
        var days: Int = 30

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-user")
            configuration.logSecretKeySource(logger)
            let userRecordName = user ?? UserRecordName.generate()
            print(try await Admin.webAuthToken(container: container, user: userRecordName, days: days, configuration, logger: logger))
            try await options.audit(.userToken, container: container, subject: userRecordName, details: [("days", "\(days)")], configuration, logger)
        }
    }
}

struct OperatorCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "operator", abstract: "The operators who sign in to the web console (/console).", subcommands: [Create.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Add an operator who signs in to the console with a login and password.")
        @OptionGroup var options: CommonOptions
        @Argument(help: "The operator's login.")
        var login: String
        @Option(name: .customLong("container"), help: "Limit the operator to this container (repeat for several; default: every container).")
        var containers: [String] = []
        @Option(help: "A file whose first line is the password, or '-' for standard input.")
        var passwordFile: String = "-"

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-operator")
            let password = try UserCommand.Login.readPassword(passwordFile)
            try await Admin.createOperator(login: login, password: password, containers: containers.isEmpty ? nil : containers, configuration, logger: logger)
            print(containers.isEmpty ? "operator \(login) created (every container)" : "operator \(login) created (\(containers.joined(separator: ", ")))")
            try await options.audit(
                .operatorCreate, subject: login, details: [("containers", containers.isEmpty ? "every" : containers.joined(separator: ","))], configuration, logger)
        }
    }
}

struct WebhookCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "webhook", abstract: "Manage the webhooks every notification of a container is sent to.",
        subcommands: [Create.self, List.self, Delete.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Register a webhook; prints its id and its signing secret (hex), the secret only this once.")
        @OptionGroup var options: CommonOptions
        @Argument(help: "The container identifier.")
        var container: String
        @Argument(help: "The endpoint: https, or http to a loopback host with --allow-insecure-loopback.")
        var url: String
        @Flag(help: "Allow plain http to a loopback host (tests and local stacks; stratus-subscriptions needs STRATUS_WEBHOOK_ALLOW_LOOPBACK=true too).")
        var allowInsecureLoopback = false

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-webhook")
            let webhook = try await Admin.createWebhook(
                container: container, url: url, allowInsecureLoopback: allowInsecureLoopback, configuration, logger: logger)
            print("id: \(webhook.webhookID.uuidString.lowercased())")
            print("secret: \(webhook.secret.map { String(format: "%02x", $0) }.joined())")
            // The URL's host only: a path or query may carry a credential of the receiver's.
            try await options.audit(
                .webhookCreate, container: container, subject: webhook.webhookID.uuidString.lowercased(),
                details: [("host", URL(string: url)?.host ?? "")], configuration, logger)
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List webhooks (id, container, URL), of one container or of all.")
        @OptionGroup var options: CommonOptions
        @Argument(help: "The container identifier (default: every container).")
        var container: String?

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-webhook")
            for webhook in try await Admin.webhooks(container: container, configuration, logger: logger) {
                print("\(webhook.webhookID.uuidString.lowercased())\t\(webhook.container)\t\(webhook.url)")
            }
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove a webhook and its pending deliveries.")
        @OptionGroup var options: CommonOptions
        @Argument(help: "The webhook id.")
        var id: String

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-webhook")
            try await Admin.deleteWebhook(id, configuration, logger: logger)
            print("deleted \(id)")
            try await options.audit(.webhookDelete, subject: id.lowercased(), configuration, logger)
        }
    }
}

struct APNsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apns", abstract: "Manage the APNs provider key a container's pushes are sent with.", subcommands: [Set.self])

    struct Set: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Set (or replace) a container's APNs key (token-based authentication, a .p8 file).")
        @OptionGroup var options: CommonOptions
        @Argument(help: "The container identifier.")
        var container: String
        @Option(help: "The Apple Developer team id.")
        var teamID: String
        @Option(help: "The key id of the .p8 key.")
        var keyID: String
        @Option(help: "The .p8 key file (PEM).")
        var keyFile: String
        @Option(help: "The app's bundle id (apns-topic).")
        var topic: String

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-apns")
            guard let data = FileManager.default.contents(atPath: keyFile) else { throw ValidationError("cannot read \(keyFile)") }
            try await Admin.setAPNsKey(
                container: container, teamID: teamID, keyID: keyID, privateKeyPEM: String(decoding: data, as: UTF8.self), topic: topic,
                configuration, logger: logger)
            print("\(container): APNs key \(keyID) of team \(teamID) for \(topic)")
            try await options.audit(.apnsSet, container: container, subject: keyID, details: [("team", teamID), ("topic", topic)], configuration, logger)
        }
    }
}
