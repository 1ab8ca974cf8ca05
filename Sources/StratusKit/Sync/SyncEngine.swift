import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Keeps a device's copy of a private or shared database in sync, shaped like CloudKit's
/// CKSyncEngine: the app adds the changes it makes to `state` and hands the records when the
/// engine asks; the engine sends them in batches within the server's limits, fetches what other
/// devices changed when the server pushes a notification (over the courier, for one database
/// subscription the engine manages), and tells the app everything through its delegate's events.
///
/// `run()` schedules the engine for as long as the task that calls it runs (the app runs it in a
/// task of its own and cancels that task to stop); `fetchChanges()` and `sendChanges()` do one
/// round now, with or without `run()`.
public actor StratusSyncEngine {
    /// How the engine hears that something changed on the server.
    public enum CourierMode: Sendable, Hashable {
        /// The WebSocket courier, or the long-poll courier where the platform's URLSession speaks no
        /// WebSocket (the long poll is pushed too: the server answers it as a notification is logged).
        /// The engine tries the WebSocket first on every platform; FoundationNetworking on Linux
        /// speaks it only over a libcurl built with WebSocket support, and refuses it at once otherwise.
        case automatic
        case webSocket
        case longPoll
        /// None: the app calls `fetchChanges()` itself.
        case none
    }

    public struct Configuration: Sendable {
        public var database: StratusDatabase
        /// The serialization the app persisted last; nil at the first launch.
        public var stateSerialization: State.Serialization?
        public var delegate: any StratusSyncEngineDelegate
        public var courier: CourierMode = .automatic
        /// How long `run()` waits after a change is added before it sends, so that changes made
        /// together go in one batch.
        public var sendDebounce: Duration = .milliseconds(50)
        /// How `run()` backs off after a round failed (no network, `TRY_AGAIN_LATER`): never gives
        /// up, waits at least the server's `retryAfter`, with jitter.
        public var backoff = RetryPolicy(maxAttempts: .max, baseDelay: 0.5, maxDelay: 60, jitter: 0.5)
        /// The most operations and bytes of one request.
        public var limits = BatchLimits()
        /// How a save treats the server's version: by default the whole record, if the server's is
        /// the one the record's change tag names (else `CONFLICT` with the server's record).
        public var savePolicy: SavePolicy = .replaceIfServerRecordUnchanged
        /// Records of one page of a zone's changes (the server caps it).
        public var resultsLimit: Int? = nil
        /// Seconds a long poll waits for a notification before it asks again.
        public var longPollTimeout = 30

        public init(database: StratusDatabase, stateSerialization: State.Serialization?, delegate: any StratusSyncEngineDelegate) {
            self.database = database
            self.stateSerialization = stateSerialization
            self.delegate = delegate
        }
    }

    public nonisolated let state: State
    public nonisolated let database: StratusDatabase
    let configuration: Configuration
    private var accountChecked = false
    private var signedOut = false
    private var busy = false
    private var waiters: [CheckedContinuation<Void, Never>] = []
    private var needFetch = false
    private var needSend = false
    /// Whether the WebSocket courier is left out for this engine: URLSession refused it as a URL it
    /// does not support (FoundationNetworking over a libcurl without WebSocket).
    private(set) var webSocketUnavailable = false
    /// Which courier brought the last notification (for tests and diagnostics).
    private(set) var lastCourier: CourierMode?
    private let wake: AsyncStream<Void>.Continuation
    private let wakes: AsyncStream<Void>

    /// The id of the database subscription the engine keeps for its courier.
    public nonisolated var subscriptionID: String { "stratuskit.\(database.scope.rawValue)" }

    public init(_ configuration: Configuration) throws {
        guard configuration.database.scope != .public else {
            throw StratusKitError.invalidArgument("the sync engine syncs a private or shared database; the public database has no change history")
        }
        self.configuration = configuration
        let snapshot = configuration.stateSerialization?.snapshot ?? SyncSnapshot()
        // The engine's writes name its device (the state's), unless the app named one.
        let container = configuration.database.container
        self.database = container.deviceID == nil ? container.with(deviceID: snapshot.deviceID).database(configuration.database.scope) : configuration.database
        self.state = State(snapshot)
        (wakes, wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    // MARK: Scheduling

    /// Syncs until the calling task is cancelled or the user signs out: fetches at once and
    /// whenever the courier brings a notification, sends whenever changes are pending (debounced),
    /// and after a failed round backs off (jittered, at least the server's `retryAfter`) and tries again.
    public func run() async {
        needFetch = true
        needSend = true
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.workLoop() }
            group.addTask { await self.watchState() }
            if configuration.courier != .none { group.addTask { await self.courierLoop() } }
            // The work loop ends on cancellation or sign-out; the others follow it.
            await group.next()
            group.cancelAll()
        }
    }

    private func schedule(fetch: Bool = false, send: Bool = false) {
        if fetch { needFetch = true }
        if send { needSend = true }
        wake.yield()
    }

    /// Changes the app adds: a state update (so they are persisted) and a send.
    private func watchState() async {
        for await _ in state.changes {
            await saveState()
            schedule(send: true)
        }
    }

    /// Hands the delegate a `.stateUpdate` now if the app added or removed changes since the last
    /// one. `run()` does this by itself as changes are added, and every fetch and send does it
    /// first; an app that neither runs the engine nor syncs at once calls it after adding changes,
    /// so they survive the process.
    public func saveState() async {
        guard state.takeUnsaved() else { return }
        await emit(.stateUpdate(state.serialization))
    }

    private func workLoop() async {
        var failures = 0
        var iterator = wakes.makeAsyncIterator()
        while !Task.isCancelled, !signedOut {
            if !needFetch, !needSend {
                guard await iterator.next() != nil else { return }
                continue
            }
            if !needFetch {
                do { try await Task.sleep(for: configuration.sendDebounce) } catch { return }
            }
            let fetch = needFetch, send = needSend
            needFetch = false
            needSend = false
            do {
                if fetch { try await fetchChanges() }
                if send || state.hasPendingUntrackedChanges { try await sendChanges() }
                failures = 0
            } catch {
                if Task.isCancelled || signedOut { return }
                failures += 1
                if fetch { needFetch = true }
                needSend = true
                let retryAfter = (error as? StratusKitError)?.retryAfter
                let seconds = configuration.backoff.delay(afterAttempt: failures, retryAfter: retryAfter, random: Double.random(in: 0..<1))
                do { try await Task.sleep(for: .milliseconds(Int64(seconds * 1000))) } catch { return }
            }
        }
    }

    // MARK: Courier

    private func courierLoop() async {
        var failures = 0
        while !Task.isCancelled, !signedOut {
            do {
                let token = try await courierToken()
                try await listen(token)
                failures = 0
            } catch {
                if Task.isCancelled { return }
                failures += 1
                let retryAfter = (error as? StratusKitError)?.retryAfter
                let seconds = configuration.backoff.delay(afterAttempt: failures, retryAfter: retryAfter, random: Double.random(in: 0..<1))
                do { try await Task.sleep(for: .milliseconds(Int64(seconds * 1000))) } catch { return }
            }
        }
    }

    /// This device's courier token, and the database subscription that fills it (made once).
    private func courierToken() async throws -> StratusDatabase.CourierToken {
        if !state.read(\.subscriptionSaved) {
            var subscription = Subscription(subscriptionID: subscriptionID, kind: .database)
            subscription.notificationInfo = ["shouldSendContentAvailable": true]
            let results = try await database.modifySubscriptions(saving: [subscription])
            if case .failure(let error)? = results.first { throw error }
            state.write { $0.subscriptionSaved = true }
            await emit(.stateUpdate(state.serialization))
        }
        if let token = state.read(\.courier) { return token }
        let token = try await database.createCourierToken()
        state.write { $0.courier = token }
        await emit(.stateUpdate(state.serialization))
        return token
    }

    /// Listens on the courier until the connection ends; each notification schedules a fetch.
    /// `automatic` tries the WebSocket; when it fails before its first message, this round takes
    /// the long poll, and every later one too when URLSession refused the WebSocket's URL as unsupported.
    private func listen(_ token: StratusDatabase.CourierToken) async throws {
        let mode = configuration.courier
        if mode == .webSocket || (mode == .automatic && !webSocketUnavailable), let text = token.webSocketURL, let url = URL(string: text) {
            let task = database.container.transport.session.webSocketTask(with: url)
            var received = false
            do {
                try await withTaskCancellationHandler {
                    task.resume()
                    while true {
                        _ = try await task.receive()
                        received = true
                        lastCourier = .webSocket
                        schedule(fetch: true)
                    }
                } onCancel: {
                    task.cancel(with: .goingAway, reason: nil)
                }
            } catch {
                if Task.isCancelled { throw CancellationError() }
                guard mode == .automatic, !received else {
                    throw StratusKitError(code: .networkFailure, reason: "the courier's WebSocket ended: \(error.localizedDescription)")
                }
                if Self.refusesWebSocket(error) { webSocketUnavailable = true }
            }
        }
        // The long poll, in its list form: every notification waiting, or an empty list after the timeout.
        guard let url = URL(string: token.webcourierURL + "?format=list&timeout=\(configuration.longPollTimeout)") else {
            throw StratusKitError.invalidResponse("a courier URL that is no URL")
        }
        var request = URLRequest(url: url)
        request.timeoutInterval = TimeInterval(configuration.longPollTimeout + 30)
        let (data, response) = try await database.container.transport.data(request)
        let answer = try Transport.read(data, status: (response as? HTTPURLResponse)?.statusCode ?? 0, retryAfterHeader: nil)
        if let notifications = answer["notifications"]?.array, !notifications.isEmpty {
            lastCourier = .longPoll
            schedule(fetch: true)
        }
    }

    /// Whether URLSession refused a WebSocket as a URL it does not support: FoundationNetworking
    /// over a libcurl built without WebSocket ("WebSockets not supported by libcurl").
    static func refusesWebSocket(_ error: any Error) -> Bool {
        let error = error as NSError
        return error.domain == NSURLErrorDomain && error.code == NSURLErrorUnsupportedURL
    }

    // MARK: Rounds

    private func exclusive<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        if busy {
            await withCheckedContinuation { waiters.append($0) }
        } else {
            busy = true
        }
        defer {
            if waiters.isEmpty { busy = false } else { waiters.removeFirst().resume() }
        }
        return try await body()
    }

    private func emit(_ event: Event) async {
        await configuration.delegate.handleEvent(event, syncEngine: self)
    }

    /// Who is signed in, once per engine: the first user, another user, or none, as an account change.
    private func checkAccount() async throws {
        if signedOut { throw StratusKitError(code: .authenticationFailed, reason: "signed out") }
        guard !accountChecked else { return }
        let me: String
        do {
            me = try await database.container.publicCloudDatabase.callerIdentity().userRecordName
        } catch let error as StratusKitError where error.isAccountFailure {
            try await signOut(error)
        }
        let previous = state.read(\.userRecordName)
        if previous == nil {
            state.write { $0.userRecordName = me }
            await emit(.accountChange(.signIn(currentUser: me)))
            await emit(.stateUpdate(state.serialization))
        } else if let previous, previous != me {
            state.write { $0.reset(user: me) }
            await emit(.accountChange(.switchAccounts(previousUser: previous, currentUser: me)))
            await emit(.stateUpdate(state.serialization))
        }
        accountChecked = true
    }

    private func signOut(_ error: StratusKitError) async throws -> Never {
        if !signedOut {
            signedOut = true
            let previous = state.read(\.userRecordName)
            state.write { $0.reset(user: nil) }
            await emit(.accountChange(.signOut(previousUser: previous)))
            await emit(.stateUpdate(state.serialization))
        }
        throw error
    }

    /// Runs a call; a credential that no longer works signs out.
    private func account<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as StratusKitError where error.isAccountFailure {
            try await signOut(error)
        }
    }

    /// Fetches what changed on the server since the last fetch: the database's zones, then each
    /// changed zone's records, page by page, each page an event and a state update.
    public func fetchChanges() async throws {
        try await exclusive {
            await saveState()
            try await checkAccount()
            await emit(.willFetchChanges)
            try await fetchDatabaseChanges()
            for zone in state.read(\.zonesToRefetch) { try await fetchZone(zone) }
            await emit(.didFetchChanges)
        }
    }

    private func fetchDatabaseChanges() async throws {
        var token = state.read(\.databaseToken)
        while true {
            let page: StratusDatabase.DatabaseChanges
            do {
                page = try await account { try await database.databaseChanges(since: token) }
            } catch let error as StratusKitError where error.code == .changeTokenExpired && token != nil {
                token = nil
                continue
            }
            let changed = page.changed.map(\.zoneID).filter { $0 != .default }
            let deleted = page.deleted
            state.write { snapshot in
                for zone in deleted {
                    snapshot.zoneTokens[zone] = nil
                    snapshot.zonesToRefetch.removeAll { $0 == zone }
                    // A zone recreated here keeps its changes; otherwise they have nowhere to go.
                    let recreated = snapshot.pendingDatabaseChanges.contains { entry in
                        if case .saveZone(let saved) = entry.change { return saved.zoneID == zone }
                        return false
                    }
                    if !recreated {
                        snapshot.pendingRecordZoneChanges.removeAll { $0.change.recordID.zoneID == zone }
                    }
                }
                for zone in changed where !snapshot.zonesToRefetch.contains(zone) { snapshot.zonesToRefetch.append(zone) }
                snapshot.databaseToken = page.syncToken
            }
            if !changed.isEmpty || !deleted.isEmpty {
                await emit(.fetchedDatabaseChanges(modifications: changed, deletions: deleted.map { ZoneDeletion(zoneID: $0, reason: .deleted) }))
            }
            await emit(.stateUpdate(state.serialization))
            token = page.syncToken
            if !page.moreComing { return }
        }
    }

    /// Fetches a zone's changes page by page: each page an event and a state update. The next
    /// page is asked for as soon as a page's answer names its token, so the server prepares it
    /// while this device reads the page into records and hands them over; what a page answered
    /// (records, an expired token, a zone gone, an error) is acted on in order, as if one page were
    /// asked for after the other.
    private func fetchZone(_ zone: ZoneID) async throws {
        await emit(.willFetchRecordZoneChanges(zone))
        var token = state.read { $0.zoneTokens[zone] }
        var failure: StratusKitError?
        var answer = await changesAnswer(zone, since: token)
        while true {
            do {
                let json = try await account { try answer.get() }
                let moreComing = json["moreComing"]?.bool ?? false
                async let next = changesAnswer(zone, since: json["syncToken"]?.string, when: moreComing)
                let page = try StratusDatabase.recordZoneChanges(json, zoneID: zone, keyProvider: database.container.keyProvider)
                if !page.modified.isEmpty || !page.deleted.isEmpty {
                    await emit(.fetchedRecordZoneChanges(modifications: page.modified, deletions: page.deleted))
                }
                token = page.syncToken
                state.write { snapshot in
                    snapshot.zoneTokens[zone] = page.syncToken
                    if !page.moreComing { snapshot.zonesToRefetch.removeAll { $0 == zone } }
                }
                await emit(.stateUpdate(state.serialization))
                guard let following = await next else { break }
                answer = following
            } catch let error as StratusKitError where error.code == .changeTokenExpired && token != nil {
                token = nil
                state.write { $0.zoneTokens[zone] = nil }
                await emit(.zoneReset(zone))
                await emit(.stateUpdate(state.serialization))
                answer = await changesAnswer(zone, since: nil)
            } catch let error as StratusKitError where error.code == .zoneNotFound || (error.code == .accessDenied && database.scope == .shared) {
                // Deleted, or no longer shared with the user, since the database's changes said otherwise.
                state.write { snapshot in
                    snapshot.zoneTokens[zone] = nil
                    snapshot.zonesToRefetch.removeAll { $0 == zone }
                    snapshot.pendingRecordZoneChanges.removeAll { $0.change.recordID.zoneID == zone }
                }
                await emit(.fetchedDatabaseChanges(modifications: [], deletions: [ZoneDeletion(zoneID: zone, reason: .deleted)]))
                await emit(.stateUpdate(state.serialization))
                failure = error
                break
            } catch let error as StratusKitError {
                await emit(.didFetchRecordZoneChanges(zone, error: error))
                throw error
            }
        }
        await emit(.didFetchRecordZoneChanges(zone, error: failure))
    }

    /// One page's `records/changes` answer, or why there is none.
    private nonisolated func changesAnswer(_ zone: ZoneID, since token: String?) async -> Result<JSON, any Error> {
        do {
            return .success(try await database.recordZoneChangesAnswer(zone, since: token, resultsLimit: configuration.resultsLimit))
        } catch {
            return .failure(error)
        }
    }

    /// The next page's answer when there is one (`wanted`).
    private nonisolated func changesAnswer(_ zone: ZoneID, since token: String?, when wanted: Bool) async -> Result<JSON, any Error>? {
        wanted ? await changesAnswer(zone, since: token) : nil
    }

    /// Sends the pending changes: zones first, then records in the batches the delegate hands,
    /// each split into requests within the limits, one zone each. Throws when a request got no
    /// answer or the server asked to wait (what it did not answer stays pending).
    public func sendChanges() async throws {
        try await exclusive {
            await saveState()
            guard state.hasPendingUntrackedChanges else { return }
            try await checkAccount()
            let context = SendChangesContext(pendingChanges: state.pendingRecordZoneChanges, zoneIDs: nil)
            await emit(.willSendChanges(context))
            do {
                try await sendDatabaseChanges()
                try await sendRecordChanges()
            } catch {
                await emit(.didSendChanges(context))
                throw error
            }
            await emit(.didSendChanges(context))
        }
    }

    private func sendDatabaseChanges() async throws {
        let pending = state.read(\.pendingDatabaseChanges)
        guard !pending.isEmpty else { return }
        var retry: StratusKitError?
        for chunk in Self.zoneRequests(pending) {
            var saves: [Zone] = [], deletes: [ZoneID] = []
            for entry in chunk {
                switch entry.change {
                case .saveZone(let zone): saves.append(zone)
                case .deleteZone(let id): deletes.append(id)
                }
            }
            let results = try await account { try await database.modifyZones(saving: saves, deleting: deletes) }
            var sent = SentDatabaseChanges()
            for entry in chunk {
                let result = results[entry.change.zoneID]
                switch (entry.change, result) {
                case (.saveZone, .success(let zone?)?):
                    sent.savedZones.append(zone)
                    state.write { $0.settle(entry.change, sentAs: entry.number) }
                case (.deleteZone(let id), .success(nil)?):
                    sent.deletedZoneIDs.append(id)
                    state.write { snapshot in
                        snapshot.settle(entry.change, sentAs: entry.number)
                        snapshot.zoneTokens[id] = nil
                        snapshot.zonesToRefetch.removeAll { $0 == id }
                    }
                case (.deleteZone(let id), .failure(let error)?) where error.code == .zoneNotFound:
                    sent.deletedZoneIDs.append(id)
                    state.write { $0.settle(entry.change, sentAs: entry.number) }
                case (_, .failure(let error)?) where error.isRetryable || error.code == .atomicError:
                    if error.isRetryable { retry = error }
                case (.saveZone(let zone), .failure(let error)?):
                    sent.failedZoneSaves.append((zone, error))
                    state.write { $0.settle(entry.change, sentAs: entry.number) }
                case (.deleteZone(let id), .failure(let error)?):
                    sent.failedZoneDeletes[id] = error
                    state.write { $0.settle(entry.change, sentAs: entry.number) }
                default:
                    retry = StratusKitError.invalidResponse("zones/modify did not answer \(entry.change.zoneID)")
                }
            }
            await emit(.sentDatabaseChanges(sent))
            await emit(.stateUpdate(state.serialization))
        }
        if let retry { throw retry }
    }

    /// Pending zone changes in requests of at most 200, each naming a zone once (a zone deleted
    /// and made again takes two), in order.
    static func zoneRequests(_ pending: [SyncSnapshot.Numbered<PendingDatabaseChange>]) -> [[SyncSnapshot.Numbered<PendingDatabaseChange>]] {
        var requests: [[SyncSnapshot.Numbered<PendingDatabaseChange>]] = []
        var current: [SyncSnapshot.Numbered<PendingDatabaseChange>] = []
        var named = Set<ZoneID>()
        for entry in pending {
            if current.count == StratusDatabase.maxOperationsPerRequest || named.contains(entry.change.zoneID) {
                requests.append(current)
                current = []
                named = []
            }
            current.append(entry)
            named.insert(entry.change.zoneID)
        }
        if !current.isEmpty { requests.append(current) }
        return requests
    }

    private func sendRecordChanges() async throws {
        var attempted = Set<PendingRecordZoneChange>()
        while true {
            let pending = state.read(\.pendingRecordZoneChanges).filter { !attempted.contains($0.change) }
            guard !pending.isEmpty else { return }
            let context = SendChangesContext(pendingChanges: pending.map(\.change), zoneIDs: nil)
            guard let batch = await configuration.delegate.nextRecordZoneChangeBatch(context, syncEngine: self) else { return }
            let numbers = Dictionary(pending.map { ($0.change, $0.number) }, uniquingKeysWith: { first, _ in first })
            let missing = batch.missingRecords.map(PendingRecordZoneChange.saveRecord)
            let offered = batch.recordsToSave.map { PendingRecordZoneChange.saveRecord($0.recordID) } + batch.recordIDsToDelete.map(PendingRecordZoneChange.deleteRecord)
            let fresh = (offered + missing).filter { numbers[$0] != nil && !attempted.contains($0) }
            // A batch with nothing pending that was not tried yet this round ends the round.
            guard !fresh.isEmpty else { return }
            attempted.formUnion(offered + missing)
            if !missing.isEmpty { state.write { snapshot in for change in missing { snapshot.settle(change, sentAs: numbers[change] ?? 0) } } }
            let requests = BatchPlanner.requests(saves: batch.recordsToSave, deletes: batch.recordIDsToDelete, limits: configuration.limits)
            var retry: StratusKitError?
            for request in requests {
                var sent = SentRecordZoneChanges()
                let results: [StratusDatabase.RecordResult]
                do {
                    results = try await account {
                        try await database.modifyRecords(saving: request.saves, deleting: request.deletes, zoneID: request.zoneID,
                                                         savePolicy: configuration.savePolicy, atomic: batch.atomicByZone)
                    }
                } catch let error as StratusKitError where !error.isRetryable && error.code != .invalidResponse {
                    // The request as a whole was refused (its zone is gone, …): each operation failed with it.
                    results = request.saves.map { .failed($0.recordID, error) } + request.deletes.map { .failed($0, error) }
                }
                let savesByID = Dictionary(request.saves.map { ($0.recordID, $0) }, uniquingKeysWith: { _, last in last })
                for result in results {
                    switch result {
                    case .saved(let record):
                        let change = PendingRecordZoneChange.saveRecord(record.recordID)
                        state.write { $0.settle(change, sentAs: numbers[change] ?? 0) }
                        sent.savedRecords.append(record)
                    case .deleted(let id):
                        let change = PendingRecordZoneChange.deleteRecord(id)
                        state.write { $0.settle(change, sentAs: numbers[change] ?? 0) }
                        sent.deletedRecordIDs.append(id)
                    case .failed(let id, var error):
                        if error.code == .atomicError { continue }
                        if error.isRetryable { retry = error; continue }
                        if let local = savesByID[id] {
                            if error.code == .exists, error.serverRecord == nil {
                                // A create of a record that exists: the app needs the server's to resolve.
                                error.serverRecord = try? await database.record(for: id)
                            }
                            let change = PendingRecordZoneChange.saveRecord(id)
                            state.write { $0.settle(change, sentAs: numbers[change] ?? 0) }
                            sent.failedRecordSaves.append((local, error))
                        } else {
                            let change = PendingRecordZoneChange.deleteRecord(id)
                            state.write { $0.settle(change, sentAs: numbers[change] ?? 0) }
                            if error.code == .notFound { sent.deletedRecordIDs.append(id) } else { sent.failedRecordDeletes[id] = error }
                        }
                    }
                }
                await emit(.sentRecordZoneChanges(sent))
                await emit(.stateUpdate(state.serialization))
                if let retry { throw retry }
            }
        }
    }
}
