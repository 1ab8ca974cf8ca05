import Foundation

/// The app's side of the engine: it hears every event (and persists the state each
/// `.stateUpdate` hands it), and hands the records to send.
public protocol StratusSyncEngineDelegate: Sendable {
    func handleEvent(_ event: StratusSyncEngine.Event, syncEngine: StratusSyncEngine) async
    /// The next records to send of `context.pendingChanges`; nil or an empty batch: nothing now.
    func nextRecordZoneChangeBatch(_ context: StratusSyncEngine.SendChangesContext, syncEngine: StratusSyncEngine) async -> StratusSyncEngine.RecordZoneChangeBatch?
}

extension StratusSyncEngine {
    /// What happened, in the order it happened.
    public enum Event: Sendable {
        /// The state changed: persist it; hand it back at the next launch.
        case stateUpdate(State.Serialization)
        case accountChange(AccountChange)
        case fetchedDatabaseChanges(modifications: [ZoneID], deletions: [ZoneDeletion])
        /// A page of a zone's changes: apply it.
        case fetchedRecordZoneChanges(modifications: [Record], deletions: [RecordID])
        /// The server can no longer answer the zone's changes since the engine's token
        /// (`CHANGE_TOKEN_EXPIRED`): drop the local copy of the zone's records that have no
        /// pending change; the engine fetches the whole zone next, as modifications.
        case zoneReset(ZoneID)
        case sentDatabaseChanges(SentDatabaseChanges)
        case sentRecordZoneChanges(SentRecordZoneChanges)
        case willFetchChanges
        case willFetchRecordZoneChanges(ZoneID)
        case didFetchRecordZoneChanges(ZoneID, error: StratusKitError?)
        case didFetchChanges
        case willSendChanges(SendChangesContext)
        case didSendChanges(SendChangesContext)
    }

    public enum AccountChange: Sendable, Hashable {
        /// A user signed in where none had synced.
        case signIn(currentUser: String)
        /// The user's credential no longer works (signed out, session revoked, password changed,
        /// user deleted): the engine has forgotten its tokens and pending changes and stops; the
        /// app deletes the local data and starts an engine with the next user's credential.
        case signOut(previousUser: String?)
        /// Another user than the one the state synced for: the engine has forgotten its tokens and
        /// pending changes; the app deletes the previous user's local data.
        case switchAccounts(previousUser: String, currentUser: String)
    }

    public struct ZoneDeletion: Sendable, Hashable {
        public enum Reason: Sendable, Hashable {
            /// Deleted (in the shared database: deleted, or shared with the user no more).
            case deleted
        }
        public var zoneID: ZoneID
        public var reason: Reason
    }

    public struct SentDatabaseChanges: Sendable {
        public var savedZones: [Zone] = []
        public var failedZoneSaves: [(zone: Zone, error: StratusKitError)] = []
        public var deletedZoneIDs: [ZoneID] = []
        public var failedZoneDeletes: [ZoneID: StratusKitError] = [:]
    }

    /// What a send answered. A failed save or delete is no longer pending (the app re-adds it once
    /// it has resolved it: a `CONFLICT` carries the server's record); changes that failed only
    /// because another of their atomic batch did (`ATOMIC_ERROR`), or that the server asked to be
    /// sent later, stay pending and are not listed.
    public struct SentRecordZoneChanges: Sendable {
        public var savedRecords: [Record] = []
        public var failedRecordSaves: [(record: Record, error: StratusKitError)] = []
        public var deletedRecordIDs: [RecordID] = []
        public var failedRecordDeletes: [RecordID: StratusKitError] = [:]
    }
}
