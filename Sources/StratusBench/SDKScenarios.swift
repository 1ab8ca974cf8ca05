import Foundation
import StratusKit
import Synchronization

extension BenchSuite {
    /// 14–15. StratusKit's sync engine against the stack, as a user of its own (so the engine's
    /// database holds only what these scenarios write): `sdk.initial-sync.N`, the engine's full
    /// fetch of an N-record zone into a delegate that keeps nothing, beside `sync.N` (records/changes
    /// alone, measured here on the same zone unless the `changes` group measured it); and
    /// `sdk.propagation`, a save on one device until another device's delegate is handed it, pushed
    /// over the courier. Left out without the token-signing key (the user signs in with it).
    func sdk(measured: [ScenarioResult]) async throws -> [ScenarioResult] {
        guard let token = target.signIn(["_sdk_\(run)"])?.first, let url = URL(string: target.apiURL) else {
            progress("sdk: left out (no token-signing key: --secret-key-file)")
            return []
        }
        var userTarget = target
        userTarget.webAuthToken = token
        let client = CloudKitClient(target: userTarget, connections: 4)
        let container = StratusContainer(serverURL: url, identifier: target.container, authentication: .apiToken(target.apiToken, webAuthToken: token))
        do {
            var results: [ScenarioResult] = []
            let zone = try await loadSyncZone(client)
            let want = settings.syncRecords
            let baseline: ScenarioResult
            if let known = measured.first(where: { $0.name == "sync.\(want)" }) {
                baseline = known
            } else {
                baseline = await fullSync(client, zone: zone)
                results.append(baseline)
            }
            results.append(await initialSync(container, records: want, baseline: baseline))
            results.append(try await propagation(client, container))
            try await client.shutdown()
            return results
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    /// `sdk.initial-sync.N`: a new engine (no state) fetches the user's database, pages of 200
    /// as `sync.N`; `ratioToSync` is its changes a second over `sync.N`'s.
    func initialSync(_ container: StratusContainer, records want: Int, baseline: ScenarioResult) async -> ScenarioResult {
        let load = await closedLoop(concurrency: 1, duration: Duration(seconds: settings.seconds), state: { $0 }) { _, _ in
            let delegate = FetchCounter()
            var configuration = StratusSyncEngine.Configuration(database: container.privateCloudDatabase, stateSerialization: nil, delegate: delegate)
            configuration.courier = .none
            configuration.resultsLimit = 200
            try await StratusSyncEngine(configuration).fetchChanges()
            let fetched = delegate.count
            return fetched == want ? .done() : .failed("the engine fetched \(fetched) of \(want) records")
        }
        let rate = load.seconds > 0 ? Double((load.operations - load.errors) * want) / load.seconds : 0
        let baselineRate = baseline.figures["changesPerSecond"] ?? 0
        let ratio = baselineRate > 0 ? rate / baselineRate : 0
        progress(String(format: "sdk.initial-sync.%d: %.0f changes/s, %@ %.0f changes/s, ratio %.2f", want, rate, baseline.name, baselineRate, ratio))
        return ScenarioResult(
            name: "sdk.initial-sync.\(want)",
            operation: "StratusSyncEngine.fetchChanges() with no state into a delegate that keeps nothing: the database's changes, then the zone's in pages of 200",
            concurrency: 1, load: load, figures: ["changesPerSecond": rate, "pageSize": 200, "ratioToSync": ratio])
    }

    /// `sdk.propagation`: two engines of the user run (each its own state and courier); device A's
    /// app adds a save, and the latency lasts until device B's delegate is handed the record — A's
    /// debounced send, the pipeline to the notification, B's courier, B's fetch. `notifySamples`
    /// saves, one at a time.
    func propagation(_ client: CloudKitClient, _ container: StratusContainer) async throws -> ScenarioResult {
        let zoneID = ZoneID(zoneName: zone("Propagation"))
        try await client.createZone(zoneID.zoneName)
        let sender = RecordsToSend()
        let receiver = FetchCounter()
        let engines = try [sender as any StratusSyncEngineDelegate, receiver].map { delegate in
            var configuration = StratusSyncEngine.Configuration(database: container.privateCloudDatabase, stateSerialization: nil, delegate: delegate)
            // The long poll's wait bounds how long a cancelled engine takes to end.
            configuration.longPollTimeout = 10
            return try StratusSyncEngine(configuration)
        }
        let (a, b) = (engines[0], engines[1])
        let clock = ContinuousClock()
        var outcome = LoadOutcome()
        let watch = ProcessWatch.current
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await a.run() }
            group.addTask { await b.run() }
            defer { group.cancelAll() }
            /// Saves `name` on A; when B was handed it, or nil after `timeout`.
            func send(_ name: String, timeout: Duration) async -> ContinuousClock.Instant? {
                let id = RecordID(recordName: name, zoneID: zoneID)
                sender.put(Record(recordType: "Ping", recordID: id, fields: ["name": .string(name)]))
                a.state.add(pendingRecordZoneChanges: [.saveRecord(id)])
                return await receiver.arrivals.wait(for: name, timeout: timeout)
            }
            // Warm-up: until a save reaches B (both couriers are listening by then).
            var warm = false
            for attempt in 0..<10 where !warm { warm = await send("warm\(attempt)", timeout: .seconds(10)) != nil }
            guard warm else { throw BenchFailure(description: "sdk.propagation: no save reached the other device within 100 s") }
            let before = await watch?.snapshot()
            let start = clock.now
            for sample in 0..<settings.notifySamples {
                let name = "p\(sample)"
                let added = clock.now
                let handed = await send(name, timeout: .seconds(30))
                outcome.record(lag: handed, since: added, timeout: .seconds(30), missing: "\(name): not handed to the other device within 30 s")
                try await Task.sleep(for: .milliseconds(20))
            }
            outcome.seconds = (clock.now - start).seconds
            if let watch, let before { outcome.cpu = watch.usage(from: before, to: await watch.snapshot()) }
        }
        return ScenarioResult(
            name: "sdk.propagation",
            operation: "a save added on device A's engine (debounced 50 ms) until device B's delegate is handed it: A's send, the pipeline, B's courier, B's fetch",
            concurrency: 1, load: outcome)
    }
}

/// A delegate that keeps nothing: counts the records it is handed and notes when each arrived.
final class FetchCounter: StratusSyncEngineDelegate {
    private let fetched = Mutex(0)
    let arrivals = NotificationArrivals()

    var count: Int { fetched.withLock { $0 } }

    func handleEvent(_ event: StratusSyncEngine.Event, syncEngine: StratusSyncEngine) async {
        guard case .fetchedRecordZoneChanges(let modifications, _) = event else { return }
        fetched.withLock { $0 += modifications.count }
        let now = ContinuousClock.now
        for record in modifications { arrivals.arrived(record.recordID.recordName, at: now) }
    }

    func nextRecordZoneChangeBatch(_ context: StratusSyncEngine.SendChangesContext, syncEngine: StratusSyncEngine) async -> StratusSyncEngine.RecordZoneChangeBatch? {
        nil
    }
}

/// A sending device's local records: the engine asks for them when it sends.
final class RecordsToSend: StratusSyncEngineDelegate {
    private let records = Mutex<[RecordID: Record]>([:])

    func put(_ record: Record) { records.withLock { $0[record.recordID] = record } }

    func handleEvent(_ event: StratusSyncEngine.Event, syncEngine: StratusSyncEngine) async {}

    func nextRecordZoneChangeBatch(_ context: StratusSyncEngine.SendChangesContext, syncEngine: StratusSyncEngine) async -> StratusSyncEngine.RecordZoneChangeBatch? {
        let known = records.withLock { $0 }
        return await .init(pendingChanges: context.pendingChanges) { known[$0] }
    }
}
