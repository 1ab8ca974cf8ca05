import Foundation

/// What deleting a user may touch, and in which order: the rules of a deletion job
/// (docs/operations.md, "Deleting a user"), decided here and carried out by the store step by step.
/// Every step is idempotent, so a job stopped at any point is finished by running it again from the
/// step it had reached.
public enum UserDeletion {
    /// A step of the job, in the order they run.
    public enum Step: String, Sendable, Hashable, CaseIterable {
        /// The user can no longer act: their credential epoch moves (every web auth token ends),
        /// their sessions, linked identities, device and courier tokens go.
        case signOut = "sign-out"
        /// Their custom zones in every environment's private database, one at a time through the
        /// write path (each leaves a `zone.deleted` event, which every worker applies).
        case zones
        /// The records of their private databases' default zones, deleted through the write path.
        case defaultZones = "default-zones"
        /// The records they created in the public database: deleted through the write path, or
        /// handed to the container's heir (`publicRecordsFate`).
        case publicRecords = "public-records"
        /// The shares of others they take part in: they leave each (the owner's share saved with
        /// them removed, so the fan-out follows), then their participant rows go.
        case participations
        /// Their subscriptions and the notification log kept for them.
        case subscriptions
        /// Their assets: the bytes in the blob store, then the rows.
        case assets
        /// The event log: their records' data is taken out of the events that carried it.
        case events
        /// What is left of them: the directory row, role memberships, storage totals, deleted
        /// zone rows and tombstones, the query index's rows of their zones.
        case directory
        /// Finished.
        case done

        /// The step after this one (`done` stays).
        public var next: Step {
            let all = Step.allCases
            let index = all.firstIndex(of: self)!
            return index + 1 < all.count ? all[index + 1] : .done
        }
    }

    /// The request id every event the job appends carries: the events step finds the job's own
    /// deletions by it, whatever process ran them.
    public static func requestID(container: String, user: String) -> String { "user-deletion/\(container)/\(user)" }

    /// The event type a redacted event takes: no worker applies it, and its payload is empty.
    public static let redactedType: EventType = "event.redacted"

    /// How many records one write-path batch deletes.
    public static let batch = 200

    /// Checks a user record name an operator or the user's own request names: 1 to 255
    /// characters, starting with `_`, without `/` (which zone keys use as their separator) or
    /// control characters.
    public static func validate(userRecordName name: String) throws(StratusError) -> String {
        guard !name.isEmpty, name.utf8.count <= 255, name.hasPrefix("_"), name != DatabaseID.publicOwner,
              !name.contains("/"), !name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
        else {
            throw StratusError(.badRequest, "'\(ClientText.excerpt(name))' is not a user record name")
        }
        return name
    }

    /// Whether a zone is the user's: their private database's, in any environment of the container.
    /// Nothing in the public database, nor any other user's zone (a zone shared with them stays
    /// its owner's), is.
    public static func owns(_ zoneKey: ZoneKey, container: String, user: String) -> Bool {
        let parts = zoneKey.rawValue.split(separator: "/", maxSplits: 4, omittingEmptySubsequences: false)
        guard parts.count == 5 else { return false }
        return parts[0] == container && parts[2] == Substring(DatabaseScope.private.rawValue) && parts[3] == Substring(user)
    }

    /// The custom zones the zones step deletes, in the order it deletes them (environment, then
    /// name), so that a job taken up again meets them in the same order: the user's private
    /// zones but the default zone, whose records the default-zones step deletes.
    public static func zonesToDelete(_ zones: [(database: DatabaseID, zoneName: String)], user: String) -> [(database: DatabaseID, zoneName: String)] {
        zones.filter { $0.database.scope == .private && $0.database.owner == user && $0.zoneName != ZoneID.defaultZoneName }
            .sorted { ($0.database.environment.rawValue, $0.zoneName) < ($1.database.environment.rawValue, $1.zoneName) }
    }

    /// What the public-records step does with the records the user created in the public database.
    public enum PublicRecordsFate: Sendable, Hashable {
        /// Deleted through the write path, as the rest of the user's data.
        case delete
        /// Handed to the container's heir: the records, their index rows and their events name the
        /// heir wherever they named the user as a record's creator or last modifier or as the cause
        /// of an event; their contents (the app's data) stay as they are.
        case handOver(to: String)
    }

    /// Decides the fate of the user's public records: handed over when the container names an heir
    /// (`stratus container set --public-records-heir`) who is another user, still in the container's
    /// directory and not being deleted themselves (`heirAvailable`); deleted otherwise.
    public static func publicRecordsFate(heir: String?, heirAvailable: Bool, user: String) -> PublicRecordsFate {
        guard let heir, heir != user, heirAvailable else { return .delete }
        return .handOver(to: heir)
    }

    /// Where an event's payload names a user as a record's creator or last modifier: the record a
    /// save carries, and the last image a deletion carries. A hand-over renames the user there (and
    /// in the event's causation).
    public static let stampPaths: [[String]] = [
        ["record", "created", "userRecordName"], ["record", "modified", "userRecordName"],
        ["last", "created", "userRecordName"], ["last", "modified", "userRecordName"],
    ]

    /// Where a record's stored image (the query index's rows) names its creator and last modifier.
    public static let recordStampPaths: [[String]] = [["created", "userRecordName"], ["modified", "userRecordName"]]

    /// Checks the heir an operator names for a container's public records: a user record name, or
    /// `none` (nil: the records are deleted with their creator).
    public static func validate(heir text: String) throws(StratusError) -> String? {
        text == "none" ? nil : try validate(userRecordName: text)
    }

    /// What happens to an event of the log in the events step.
    public enum Redaction: Sendable, Hashable {
        /// Kept as it is: it carries none of the user's data.
        case keep
        /// Its type becomes `redactedType` and its payload empty: a saved record's data.
        case redact
        /// Kept, its record image (`last`) taken out: a deletion every worker still applies.
        case dropImage
    }

    /// Decides an event's fate: `ownZone` whether it is of one of the user's zones, `deletedByJob`
    /// whether its record (in any zone) is one the job deleted.
    public static func redaction(type: EventType, ownZone: Bool, deletedByJob: Bool) -> Redaction {
        guard ownZone || deletedByJob else { return .keep }
        switch type {
        case RecordSaved.eventType: return .redact
        case RecordDeleted.eventType: return .dropImage
        default: return .keep
        }
    }

    /// How far a job is, as the job's row says.
    public struct Progress: Sendable, Hashable {
        public var step: Step
        public var zonesDeleted: Int
        public var recordsDeleted: Int64
        public var sharesLeft: Int
        public var assetsDeleted: Int
        public var eventsRedacted: Int64
        /// Public records handed to the container's heir.
        public var recordsHandedOver: Int64
        public var finished: Bool { step == .done }

        public init(
            step: Step, zonesDeleted: Int = 0, recordsDeleted: Int64 = 0, sharesLeft: Int = 0, assetsDeleted: Int = 0, eventsRedacted: Int64 = 0,
            recordsHandedOver: Int64 = 0
        ) {
            self.step = step
            self.zonesDeleted = zonesDeleted
            self.recordsDeleted = recordsDeleted
            self.sharesLeft = sharesLeft
            self.assetsDeleted = assetsDeleted
            self.eventsRedacted = eventsRedacted
            self.recordsHandedOver = recordsHandedOver
        }

        /// One line for the CLI.
        public var line: String {
            "\(step.rawValue): \(zonesDeleted) zones, \(recordsDeleted) records, \(sharesLeft) shares left, \(assetsDeleted) assets, \(eventsRedacted) events redacted, \(recordsHandedOver) public records handed over"
        }
    }

    /// The default of how recent a user's sign-in must be for them to delete their own account
    /// (`STRATUS_ACCOUNT_DELETION_SIGNIN_SECONDS`), and the bounds of the setting.
    public static let defaultRecentSignIn: Int64 = 600
    public static let recentSignInRange: ClosedRange<Int64> = 60...86_400

    /// Whether a user may delete their own account with a web auth token of this session: it must
    /// belong to a session (`sessionCreatedAt`, seconds since 1970; nil for a token of no session)
    /// that began at most `window` seconds before `now`. The refusal says to sign in again.
    public static func checkRecentSignIn(sessionCreatedAt: Int64?, now: Int64, window: Int64) throws(StratusError) {
        guard let sessionCreatedAt else {
            throw StratusError(.authenticationFailed, "Deleting the account needs a web auth token from a sign-in; sign in again")
        }
        guard now - sessionCreatedAt <= window, sessionCreatedAt <= now + 60 else {
            throw StratusError(.authenticationFailed, "Deleting the account needs a sign-in of the last \(window) seconds; sign in again")
        }
    }

    /// Whether the job stops (a test-only setting: `pauseAfterZones`) once `zonesDeleted` zones
    /// are deleted, so that a test can kill the process at a point it reaches every time.
    public static func pauses(zonesDeleted: Int, pauseAfterZones: Int?) -> Bool {
        guard let pauseAfterZones, pauseAfterZones >= 0 else { return false }
        return zonesDeleted == pauseAfterZones
    }
}
