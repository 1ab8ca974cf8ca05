/// Which administrative actions leave which audit entries: every subcommand of the admin CLI and
/// every console form that posts, each either audited (the actions it may append, one per call) or
/// named as changing nothing. `AuditCoverageTests` holds the CLI's subcommands and the console's
/// routes to these lists, so a new command or form cannot be added without saying what it audits.
public enum AuditCatalog {
    /// What a command or form leaves in the audit log.
    public enum Coverage: Sendable, Equatable {
        /// One entry of one of these actions per successful call.
        case audited([AuditAction])
        /// No entry: it reads, or runs a process, and changes nothing (the reason says which).
        case changesNothing(String)

        public var actions: [AuditAction] {
            if case .audited(let actions) = self { return actions }
            return []
        }
    }

    /// The admin CLI's subcommands (as typed after `stratus`, words separated by one space).
    public static let cliCommands: [String: Coverage] = [
        "migrate": .audited([.databaseMigrate]),
        "relay": .changesNothing("runs the relay, which publishes what the log holds, until stopped"),
        "republish": .audited([.eventsRepublish]),
        "events prune": .audited([.eventsPrune]),
        "replay": .audited([.workerReplay]),
        "reindex": .audited([.indexReindex]),
        "container create": .audited([.containerCreate]),
        "container set": .audited([.containerSettings]),
        "container list": .changesNothing("lists containers and what each holds"),
        "container show": .changesNothing("shows a container's usage and limits"),
        "container suspend": .audited([.containerSuspend]),
        "container resume": .audited([.containerResume]),
        "container delete": .audited([.containerDelete]),
        "container deletion": .changesNothing("shows how far a container's deletion is"),
        "container auth add": .audited([.issuerTrust]),
        "container auth list": .changesNothing("lists the issuers a container trusts"),
        "container auth remove": .audited([.issuerDistrust]),
        "container invite": .audited([.signUpInvite, .signUpUninvite]),
        "container invitations": .changesNothing("lists the addresses a container invited to sign up"),
        "key create": .audited([.keyCreate]),
        "key revoke": .audited([.keyRevoke]),
        "user create": .audited([.userCreate]),
        "user set": .audited([.userChange]),
        "user password": .audited([.userPassword]),
        "user token": .audited([.userToken]),
        "user delete": .audited([.userDelete]),
        "user deletion": .changesNothing("shows how far a user's deletion is"),
        "webhook create": .audited([.webhookCreate]),
        "webhook list": .changesNothing("lists webhooks"),
        "webhook delete": .audited([.webhookDelete]),
        "apns set": .audited([.apnsSet]),
        "schema export": .changesNothing("prints a schema"),
        "schema import": .audited([.schemaImport]),
        "schema deploy": .audited([.schemaDeploy]),
        "schema reset": .audited([.schemaReset]),
        "schema build-indexes": .audited([.schemaBuildIndexes]),
        "schema assign-role": .audited([.roleAssign, .roleRemove]),
        "operator create": .audited([.operatorCreate]),
        "session list": .changesNothing("lists a user's sessions"),
        "session revoke": .audited([.sessionRevoke]),
        "session revoke-all": .audited([.sessionRevokeAll]),
        "audit list": .changesNothing("reads the audit log"),
        "audit verify": .changesNothing("reads the audit log"),
        "export": .audited([.archiveExport]),
        "import": .audited([.archiveImport]),
    ]

    /// The console's POST routes. A GET changes nothing; a form that only checks (the first post
    /// of a schema deploy or reset) appends nothing.
    public static let consolePosts: [String: Coverage] = [
        "/console/signin": .audited([.consoleSignIn]),
        "/console/signout": .audited([.consoleSignOut]),
        "/console/zones": .audited([.zoneCreate]),
        "/console/record/save": .audited([.recordSave]),
        "/console/record/delete": .audited([.recordDelete]),
        "/console/operations/dead-letters/retry": .audited([.deadLetterRetry]),
        "/console/operations/dead-letters/discard": .audited([.deadLetterDiscard]),
        "/console/operations/runs": .audited([.indexReindex, .workerReplay]),
        "/console/access/tokens/create": .audited([.tokenCreate]),
        "/console/access/tokens/revoke": .audited([.tokenRevoke]),
        "/console/access/keys/create": .audited([.keyCreate]),
        "/console/access/keys/revoke": .audited([.keyRevoke]),
        "/console/access/users/create": .audited([.userCreate]),
        "/console/access/users/delete": .audited([.userDelete]),
        "/console/access/sign-up": .audited([.containerSettings]),
        "/console/access/invitations/create": .audited([.signUpInvite]),
        "/console/access/invitations/remove": .audited([.signUpUninvite]),
        "/console/access/issuers/add": .audited([.issuerTrust]),
        "/console/access/issuers/remove": .audited([.issuerDistrust]),
        "/console/access/sessions/revoke": .audited([.sessionRevoke]),
        "/console/access/sessions/revoke-all": .audited([.sessionRevokeAll]),
        "/console/schema/deploy": .audited([.schemaDeploy]),
        "/console/schema/reset": .audited([.schemaReset]),
        "/console/schema/roles": .audited([.roleAssign, .roleRemove]),
        "/console/tenancy/suspend": .audited([.containerSuspend]),
        "/console/tenancy/resume": .audited([.containerResume]),
        "/console/tenancy/delete": .audited([.containerDelete]),
        "/console/tenancy/limits": .audited([.containerSettings]),
        "/console/tenancy/origins": .audited([.containerSettings]),
    ]
}
