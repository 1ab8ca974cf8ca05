import Crypto
import Foundation

/// An administrative action as the audit log names it: what an operator did through the admin CLI
/// or the console. The raw value is what the log stores and what `stratus audit --action` and the
/// console page filter by.
public enum AuditAction: String, Sendable, CaseIterable, Codable {
    case databaseMigrate = "database.migrate"
    case eventsRepublish = "events.republish"
    case eventsPrune = "events.prune"
    case workerReplay = "worker.replay"
    case indexReindex = "index.reindex"
    case containerCreate = "container.create"
    case containerSettings = "container.settings"
    case containerSuspend = "container.suspend"
    case containerResume = "container.resume"
    case containerDelete = "container.delete"
    case tokenCreate = "token.create"
    case tokenRevoke = "token.revoke"
    case keyCreate = "key.create"
    case keyRevoke = "key.revoke"
    case userCreate = "user.create"
    case userChange = "user.change"
    case userPassword = "user.password"
    case userToken = "user.token"
    case operatorCreate = "operator.create"
    case webhookCreate = "webhook.create"
    case webhookDelete = "webhook.delete"
    case apnsSet = "apns.set"
    case schemaImport = "schema.import"
    case schemaDeploy = "schema.deploy"
    case schemaReset = "schema.reset"
    case schemaBuildIndexes = "schema.build-indexes"
    case roleAssign = "role.assign"
    case roleRemove = "role.remove"
    case zoneCreate = "zone.create"
    case recordSave = "record.save"
    case recordDelete = "record.delete"
    case deadLetterRetry = "dead-letter.retry"
    case deadLetterDiscard = "dead-letter.discard"
    case consoleSignIn = "console.signin"
    case consoleSignOut = "console.signout"
    case issuerTrust = "issuer.trust"
    case issuerDistrust = "issuer.distrust"
    case sessionRevoke = "session.revoke"
    case sessionRevokeAll = "session.revoke-all"
    case userDelete = "user.delete"
    case signUpInvite = "sign-up.invite"
    case signUpUninvite = "sign-up.uninvite"
    case archiveExport = "archive.export"
    case archiveImport = "archive.import"
}

/// Where an administrative action came from: the admin CLI or the web console.
public enum AuditChannel: String, Sendable, CaseIterable {
    case cli
    case console
}

/// Who did an action, and from where: for the CLI the operator (the OS user, or `--actor`) and the
/// host it ran on; for the console the signed-in operator and the client's address.
public struct AuditActor: Sendable, Equatable {
    public var channel: AuditChannel
    /// The operator's name.
    public var name: String
    /// The host (CLI) or client address (console) the action came from.
    public var origin: String
    /// The request id: the console request's `X-Request-ID`, or one per CLI invocation.
    public var requestID: String

    public init(channel: AuditChannel, name: String, origin: String, requestID: String) {
        self.channel = channel
        self.name = name
        self.origin = origin
        self.requestID = requestID
    }
}

/// One action to append, before the log gives it its place in the chain. Never a secret: an API
/// token or key is named by its digest or id, never its value.
public struct AuditDraft: Sendable, Equatable {
    public var actor: AuditActor
    public var action: AuditAction
    /// The container acted on; "" for a deployment-wide action (migrate, reindex, an operator).
    public var container: String
    /// What was acted on: a key id, a login, a zone, a run id, … ("" when the action and container say it all).
    public var subject: String
    /// The rest of what was done, as `name=value` pairs (`AuditEntry.details(_:)`).
    public var details: String

    /// A draft whose texts are bounded (`AuditEntry.limits`) and hold no NUL, which PostgreSQL's text cannot.
    public init(actor: AuditActor, action: AuditAction, container: String = "", subject: String = "", details: [(String, String)] = []) {
        var actor = actor
        actor.name = AuditEntry.bounded(actor.name, AuditEntry.maxNameLength)
        actor.origin = AuditEntry.bounded(actor.origin, AuditEntry.maxNameLength)
        actor.requestID = AuditEntry.bounded(actor.requestID, AuditEntry.maxNameLength)
        self.actor = actor
        self.action = action
        self.container = AuditEntry.bounded(container, AuditEntry.maxNameLength)
        self.subject = AuditEntry.bounded(subject, AuditEntry.maxSubjectLength)
        self.details = AuditEntry.bounded(AuditEntry.details(details), AuditEntry.maxDetailsLength)
    }
}

/// An entry of the audit log: a draft given its sequence number, its time and the hash of the
/// entry before it. Its own hash covers every field (`canonical`), so changing, removing or
/// reordering a past entry breaks the chain from there on (`AuditChain`).
public struct AuditEntry: Sendable, Equatable {
    /// 1 for the first entry, then one more for each.
    public var sequence: Int64
    /// When it was appended, in whole microseconds since 1970-01-01 UTC.
    public var recordedAtMicroseconds: Int64
    public var channel: String
    public var actor: String
    public var origin: String
    public var requestID: String
    public var action: String
    public var container: String
    public var subject: String
    public var details: String
    /// The hash of the entry before (32 zero bytes before the first).
    public var previousHash: [UInt8]
    /// SHA-256 of `canonical`.
    public var hash: [UInt8]

    public init(
        sequence: Int64, recordedAtMicroseconds: Int64, channel: String, actor: String, origin: String, requestID: String, action: String,
        container: String, subject: String, details: String, previousHash: [UInt8], hash: [UInt8]
    ) {
        self.sequence = sequence
        self.recordedAtMicroseconds = recordedAtMicroseconds
        self.channel = channel
        self.actor = actor
        self.origin = origin
        self.requestID = requestID
        self.action = action
        self.container = container
        self.subject = subject
        self.details = details
        self.previousHash = previousHash
        self.hash = hash
    }

    /// The entry a draft becomes after the entry whose hash is `previousHash`, hash computed.
    public init(_ draft: AuditDraft, sequence: Int64, recordedAtMicroseconds: Int64, previousHash: [UInt8]) {
        self.init(
            sequence: sequence, recordedAtMicroseconds: recordedAtMicroseconds,
            channel: draft.actor.channel.rawValue, actor: draft.actor.name, origin: draft.actor.origin, requestID: draft.actor.requestID,
            action: draft.action.rawValue, container: draft.container, subject: draft.subject, details: draft.details,
            previousHash: previousHash, hash: [])
        hash = computedHash
    }

    /// The hash before the first entry.
    public static let genesisHash = [UInt8](repeating: 0, count: 32)

    /// The most characters of a name, origin, request id or container an entry keeps.
    public static let maxNameLength = 255
    /// The most characters of a subject.
    public static let maxSubjectLength = 1024
    /// The most characters of the details.
    public static let maxDetailsLength = 4096

    /// The version tag the canonical encoding starts with.
    public static let canonicalVersion = "stratus-audit-v1"

    /// What the hash covers: the netstrings (`<length in bytes, decimal>:<UTF-8 bytes>,`) of, in
    /// order, the version tag `stratus-audit-v1`, the sequence (decimal), the time (microseconds
    /// since 1970, decimal), the channel, the actor, the origin, the request id, the action, the
    /// container, the subject, the details, and the previous entry's hash (64 lowercase hex digits).
    public var canonical: [UInt8] {
        var bytes: [UInt8] = []
        for field in [
            Self.canonicalVersion, String(sequence), String(recordedAtMicroseconds), channel, actor, origin, requestID, action, container, subject,
            details, Self.hex(previousHash),
        ] {
            let utf8 = Array(field.utf8)
            bytes += Array("\(utf8.count):".utf8)
            bytes += utf8
            bytes.append(UInt8(ascii: ","))
        }
        return bytes
    }

    /// SHA-256 of `canonical`.
    public var computedHash: [UInt8] { Array(SHA256.hash(data: canonical)) }

    /// The time as a date.
    public var recordedAt: Date { Date(timeIntervalSince1970: Double(recordedAtMicroseconds) / 1_000_000) }

    /// Lowercase hex of bytes.
    public static func hex(_ bytes: [UInt8]) -> String {
        bytes.map { String(format: "%02x", $0) }.joined()
    }

    /// `name=value` pairs joined by `; `, in the order given.
    public static func details(_ pairs: [(String, String)]) -> String {
        pairs.map { "\($0.0)=\($0.1)" }.joined(separator: "; ")
    }

    /// `text` without NUL (PostgreSQL's text cannot hold one: replaced by U+FFFD) and at most `limit` characters.
    public static func bounded(_ text: String, _ limit: Int) -> String {
        let clean = text.utf8.contains(0) ? text.replacingOccurrences(of: "\u{0}", with: "\u{FFFD}") : text
        return clean.count <= limit ? clean : String(clean.prefix(limit))
    }
}
