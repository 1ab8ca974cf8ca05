import Foundation
import HummingbirdWSClient
import Logging
import PostgresNIO
import StratusCore
import StratusPostgres
import Synchronization

extension BenchSuite {
    /// 9. Record saved (response received) → its notification received over the WebSocket courier.
    func notifyLag(_ client: CloudKitClient) async throws -> ScenarioResult {
        let zone = zone("Notify")
        try await client.createZone(zone)
        try await Self.subscribe(client, [[
            "subscriptionID": "bench-notify-\(run)", "subscriptionType": "query", "firesOn": ["create"],
            "zoneID": ["zoneName": zone], "query": ["recordType": "Ping"],
        ]])
        let created = try await client.postUser("tokens/create", ["apnsEnvironment": "development"])
        guard created.status == 200, let url = created.body["webSocketURL"] as? String else {
            throw BenchFailure(description: "tokens/create: HTTP \(created.status), no webSocketURL")
        }
        let arrivals = NotificationArrivals()
        let (stop, stopper) = AsyncStream<Void>.makeStream()
        let logger = logger
        let clock = ContinuousClock()
        var outcome = LoadOutcome()
        let watch = ProcessWatch.current
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                try await WebSocketClient.connect(url: url, logger: logger) { inbound, outbound, _ in
                    arrivals.connected()
                    try await withThrowingTaskGroup(of: Void.self) { socket in
                        socket.addTask {
                            for try await message in inbound.messages(maxSize: 1 << 20) {
                                guard case .text(let text) = message,
                                      let object = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? JSONObject,
                                      let name = object["recordName"] as? String else { continue }
                                arrivals.arrived(name, at: clock.now)
                            }
                        }
                        socket.addTask {
                            for await _ in stop {}
                            try await outbound.close(.normalClosure, reason: nil)
                        }
                        try await socket.next()
                        try await socket.next()
                    }
                }
            }
            defer { stopper.finish() }
            try await arrivals.waitUntilConnected(timeout: .seconds(10))
            let before = await watch?.snapshot()
            let start = clock.now
            for sample in 0..<settings.notifySamples {
                let name = "n\(sample)"
                _ = try await client.expectOK("records/modify", ["zoneID": ["zoneName": zone], "operations": [
                    Self.create(["recordName": name, "recordType": "Ping", "fields": ["sample": ["value": sample]] as JSONObject]),
                ]])
                let saved = clock.now
                // A notification that beat the save's response counts as no lag at all.
                let received = await arrivals.wait(for: name, timeout: .seconds(30))
                outcome.record(lag: received, since: saved, timeout: .seconds(30), missing: "\(name): no notification within 30 s")
                try await Task.sleep(for: .milliseconds(20))
            }
            outcome.seconds = (clock.now - start).seconds
            if let watch, let before { outcome.cpu = watch.usage(from: before, to: await watch.snapshot()) }
            stopper.finish()
            try await group.next()
        }
        return ScenarioResult(
            name: "notify.lag", operation: "records/modify acknowledged → its notification received over the WebSocket courier",
            concurrency: 1, load: outcome)
    }

    /// 10. `fanoutSubscriptions` query subscriptions over `fanoutUsers` users' private databases and
    /// five record types; then `fanoutEvents` saves in one user's zone, queued while the worker is
    /// held back (a lock on the subscriptions table, which its first statement reads), and timed
    /// from the release until its checkpoint for the zone reaches the last one.
    func notifyFanout(_ client: CloudKitClient, store: PostgresStore) async throws -> ScenarioResult {
        let zone = zone("Fanout")
        try await client.createZone(zone)
        let user = try await client.userRecordName()
        let types = ["Task", "Note", "Event", "Contact", "Photo"]
        let perUser = max(1, settings.fanoutSubscriptions / max(1, settings.fanoutUsers))
        let subscriptions = SubscriptionStore(store: store)
        let clock = ContinuousClock()
        let setupStart = clock.now
        // Each user: `perUser` subscriptions across the types, each on one category of its type.
        for index in 0..<settings.fanoutUsers {
            let subscriber = index == 0 ? user : "_fan\(index)_\(run)"
            let database = DatabaseID(container: target.container, environment: .development, scope: .private, owner: subscriber)
            var operations: [SubscriptionStore.Operation] = []
            for slot in 0..<perUser {
                let type = types[slot % types.count]
                let json = JSONValue.object([
                    "subscriptionID": .string("fan-\(slot)"), "subscriptionType": .string("query"), "zoneWide": .bool(true),
                    "firesOn": .array([.string("create"), .string("update"), .string("delete")]),
                    "query": .object(["recordType": .string(type), "filterBy": .array([.object([
                        "fieldName": .string("category"), "comparator": .string("EQUALS"), "fieldValue": .object(["value": .string("c\(slot / types.count)")]),
                    ])])]),
                ])
                operations.append(.create(try Subscription.parse(json, scope: .private, databaseOwner: subscriber)))
            }
            let results = try await subscriptions.modify(operations, in: database, subscriber: subscriber, maxPerSubscriber: 1_000, logger: logger)
            if let failure = results.lazy.compactMap({ result -> StratusError? in if case .failure(let error) = result { error } else { nil } }).first {
                throw BenchFailure(description: "saving the fanout subscriptions: \(failure)")
            }
        }
        let setupSeconds = (clock.now - setupStart).seconds
        let zoneKey = "\(target.container)/development/private/\(user)/\(zone)"
        // The zone's creation is evaluated before the worker is held back.
        try await waitForCheckpoint(store, zoneKey: zoneKey, timeout: .seconds(60))
        let events = settings.fanoutEvents
        let batch = settings.batchSize
        let watch = ProcessWatch.current
        let (applied, seconds, writeSeconds, cpu) = try await store.withConnection { [self] connection in
            try await connection.query("BEGIN", logger: logger)
            try await connection.query("LOCK TABLE subscriptions IN ACCESS EXCLUSIVE MODE", logger: logger)
            let writeStart = clock.now
            var next = 0
            while next < events {
                let end = min(next + batch, events)
                _ = try await client.expectOK("records/modify", ["zoneID": ["zoneName": zone], "atomic": true, "operations": (next..<end).map { index in
                    Self.create(["recordName": "f\(index)", "recordType": types[index % types.count], "fields": [
                        "category": ["value": "c\(index % (2 * max(1, perUser / types.count)))"], "n": ["value": index],
                    ] as JSONObject])
                }])
                next = end
            }
            let writeSeconds = (clock.now - writeStart).seconds
            // Every event published (so the whole backlog waits in the broker), then the release.
            let target = try await Self.lastSequence(connection, zoneKey: zoneKey, logger: logger)
            let before = try await Self.checkpoint(connection, zoneKey: zoneKey, logger: logger)
            try await waitForPublished(connection, zoneKey: zoneKey)
            let cpuBefore = await watch?.snapshot()
            try await connection.query("COMMIT", logger: logger)
            let released = clock.now
            let done = try await waitForCheckpoint(store, zoneKey: zoneKey, timeout: .seconds(120))
            var cpu: [ProcessCPU]?
            if let watch, let cpuBefore { cpu = watch.usage(from: cpuBefore, to: await watch.snapshot()) }
            return (target - before, done - released, writeSeconds, cpu)
        }
        let notified = try await store.withConnection { [logger, target] connection in
            try await Self.scalar(connection.query("""
                SELECT count(*) FROM notifications n JOIN events e ON e.id = n.event_id
                WHERE n.container = \(target.container) AND n.subscriber = \(user) AND e.zone_key = \(zoneKey)
                """, logger: logger))
        }
        var outcome = LoadOutcome()
        outcome.operations = 1
        outcome.seconds = seconds.seconds
        outcome.latencies.record(seconds)
        outcome.cpu = cpu
        return ScenarioResult(
            name: "notify.fanout", operation: "\(events) saves evaluated against \(perUser * settings.fanoutUsers) query subscriptions (\(settings.fanoutUsers) users)",
            concurrency: 1, load: outcome, figures: [
                "events": Double(applied), "eventsPerSecond": seconds > .zero ? Double(applied) / seconds.seconds : 0,
                "subscriptions": Double(perUser * settings.fanoutUsers), "notifications": Double(notified),
                "setupSeconds": setupSeconds, "writeSeconds": writeSeconds,
            ])
    }

    static func subscribe(_ client: CloudKitClient, _ subscriptions: [JSONObject]) async throws {
        let reply = try await client.post("subscriptions/modify", ["operations": subscriptions.map { ["operationType": "create", "subscription": $0] }])
        let items = reply.body["subscriptions"] as? [JSONObject] ?? []
        guard reply.status == 200, items.count == subscriptions.count, items.allSatisfy({ $0["serverErrorCode"] == nil }) else {
            throw BenchFailure(description: "subscriptions/modify: HTTP \(reply.status) \(reply.body)")
        }
    }

    /// The first column of the first row, as a count or sequence (0 when there is none).
    static func scalar(_ rows: PostgresRowSequence) async throws -> Int64 {
        for try await value in rows.decode(Int64.self) { return value }
        return 0
    }

    static func checkpoint(_ connection: PostgresConnection, zoneKey: String, worker: String = "stratus-subscriptions", logger: Logger) async throws -> Int64 {
        try await Self.scalar(connection.query("""
            SELECT last_sequence FROM worker_checkpoints WHERE worker = \(worker) AND zone_key = \(zoneKey)
            """, logger: logger))
    }

    static func lastSequence(_ connection: PostgresConnection, zoneKey: String, logger: Logger) async throws -> Int64 {
        try await Self.scalar(connection.query("""
            SELECT coalesce(max(zone_sequence), 0) FROM events WHERE zone_key = \(zoneKey)
            """, logger: logger))
    }

    /// Waits until a worker's (stratus-subscriptions' unless told) checkpoint for the zone reaches the zone's last event; returns when it did.
    @discardableResult
    func waitForCheckpoint(
        _ store: PostgresStore, zoneKey: String, worker: String = "stratus-subscriptions", timeout: Duration
    ) async throws -> ContinuousClock.Instant {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        let logger = logger
        while clock.now < deadline {
            let caughtUp = try await store.withConnection { connection in
                try await Self.checkpoint(connection, zoneKey: zoneKey, worker: worker, logger: logger) >= Self.lastSequence(connection, zoneKey: zoneKey, logger: logger)
            }
            if caughtUp { return clock.now }
            try await Task.sleep(for: .milliseconds(2))
        }
        throw BenchFailure(description: "\(worker) did not reach the end of \(zoneKey) within \(timeout)")
    }

    func waitForPublished(_ connection: PostgresConnection, zoneKey: String) async throws {
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            let waiting = try await Self.scalar(connection.query("""
                SELECT count(*) FROM unpublished_events u JOIN events e ON e.id = u.id WHERE e.zone_key = \(zoneKey)
                """, logger: logger))
            if waiting == 0 { return }
            try await Task.sleep(for: .milliseconds(5))
        }
        throw BenchFailure(description: "the relay did not publish \(zoneKey)'s events within 60 s")
    }
}

/// When each notification arrived on the WebSocket, by record name; the measuring loop waits on it.
final class NotificationArrivals: Sendable {
    private struct State {
        var connected = false
        var arrived: [String: ContinuousClock.Instant] = [:]
    }
    private let state = Mutex(State())

    func connected() { state.withLock { $0.connected = true } }

    func arrived(_ name: String, at instant: ContinuousClock.Instant) {
        state.withLock { $0.arrived[name] = $0.arrived[name] ?? instant }
    }

    /// Polls (1 ms) until connected; the socket's handler runs in its own task.
    func waitUntilConnected(timeout: Duration) async throws {
        let deadline = ContinuousClock.now + timeout
        while !state.withLock({ $0.connected }) {
            guard ContinuousClock.now < deadline else { throw BenchFailure(description: "the WebSocket courier did not connect") }
            try await Task.sleep(for: .milliseconds(1))
        }
    }

    /// When `name`'s notification arrived, waiting up to `timeout`; nil if it did not.
    func wait(for name: String, timeout: Duration) async -> ContinuousClock.Instant? {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let instant = state.withLock({ $0.arrived[name] }) { return instant }
            try? await Task.sleep(for: .microseconds(200))
        }
        return nil
    }
}
