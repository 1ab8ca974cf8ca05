import Foundation
import Logging
import StratusCore
import StratusPostgres
import Synchronization

extension BenchSuite {
    /// 13. One change to a zone shared with `shareParticipants` participants (hierarchy shares of
    /// at most 100 participants each, every participant accepted): from the owner's acknowledged
    /// save until each participant's database sync (`changes/database` in their shared database,
    /// from their last token) shows the zone. Each participant's delay is one latency; the
    /// participants are polled by `concurrency` clients, so a delay includes up to one polling
    /// round.
    func shareFanout(_ client: CloudKitClient, store: PostgresStore) async throws -> ScenarioResult? {
        let participants = (0..<max(1, settings.shareParticipants)).map { "_share\($0)_\(run)" }
        guard let signIns = target.signIn(participants) else {
            progress("share.fanout: left out (no token-signing key: --secret-key-file)")
            return nil
        }
        let zone = zone("Shared")
        try await client.createZone(zone)
        let owner = try await client.userRecordName()
        let count = participants.count
        let clock = ContinuousClock()
        let setupStart = clock.now
        // The shares: one root and one share per hundred participants.
        let perShare = ShareRules.maxParticipants
        var guids: [String] = []
        for (index, start) in stride(from: 0, to: count, by: perShare).enumerated() {
            let members = participants[start..<min(start + perShare, count)]
            let reply = try await client.expectOK("records/modify", ["zoneID": ["zoneName": zone], "operations": [
                Self.create(["recordName": "root\(index)", "recordType": "Trip", "share": ["recordName": "share\(index)"]] as JSONObject),
                Self.create(["recordName": "share\(index)", "recordType": ShareRecord.recordType, "participants": members.map { member in
                    ["userIdentity": ["lookupInfo": ["userRecordName": member]], "permission": "READ_ONLY"] as JSONObject
                }] as JSONObject),
            ]])
            guard let guid = reply.records.last?["shortGUID"] as? String else { throw BenchFailure(description: "share\(index): no shortGUID") }
            guids.append(guid)
        }
        // Every participant accepts (through the store, as records/accept does).
        let shares = ShareStore(store: store)
        for (index, participant) in participants.enumerated() {
            let results = try await shares.accept(
                [guids[index / perShare]], container: target.container, environment: .development, user: participant,
                requestID: "bench-accept-\(index)", logger: logger)
            if case .failure(let error)? = results.values.first { throw BenchFailure(description: "accepting share\(index / perShare): \(error)") }
        }
        let zoneKey = "\(target.container)/development/private/\(owner)/\(zone)"
        try await waitForCheckpoint(store, zoneKey: zoneKey, worker: "stratus-shares", timeout: .seconds(120))
        // Each participant's first database sync, and the token it keeps.
        let tokens = ParticipantTokens(count: count)
        let concurrency = max(1, settings.concurrency)
        let first = try await pollParticipants(client, signIns: signIns, tokens: tokens, pending: Array(0..<count), concurrency: concurrency)
        guard first.count == count else { throw BenchFailure(description: "share.fanout: \(count - first.count) participants do not see the zone") }
        let setupSeconds = (clock.now - setupStart).seconds

        var outcome = LoadOutcome()
        var fanout = Latencies()
        let watch = ProcessWatch.current
        let before = await watch?.snapshot()
        let start = clock.now
        for sample in 0..<max(1, settings.shareSamples) {
            _ = try await client.expectOK("records/modify", ["zoneID": ["zoneName": zone], "operations": [
                Self.create(["recordName": "change\(sample)", "recordType": "Day", "parent": ["recordName": "root0"]] as JSONObject),
            ]])
            let saved = clock.now
            outcome.operations += count
            // The fan-out's own part: until every participant's tracking row holds the change (one
            // statement moves them all), read from the table; no participant can see it before.
            fanout.record(try await waitForTracking(store, zoneKey: zoneKey, zone: zone, owner: owner) - saved)
            var pending = Array(0..<count)
            let deadline = saved + .seconds(30)
            while !pending.isEmpty, clock.now < deadline {
                let seen = try await pollParticipants(client, signIns: signIns, tokens: tokens, pending: pending, concurrency: concurrency)
                for (_, instant) in seen { outcome.latencies.record(instant - saved) }
                let done = Set(seen.map(\.index))
                pending.removeAll { done.contains($0) }
            }
            if !pending.isEmpty {
                outcome.errors += pending.count
                for _ in pending { outcome.latencies.record(.seconds(30)) }
                if outcome.failures.count < 5 { outcome.failures.append("change\(sample): \(pending.count) participants did not see it within 30 s") }
            }
        }
        outcome.seconds = (clock.now - start).seconds
        if let watch, let before { outcome.cpu = watch.usage(from: before, to: await watch.snapshot()) }
        return ScenarioResult(
            name: "share.fanout",
            operation: "one change to a zone shared with \(count) participants → each participant's changes/database shows it",
            concurrency: concurrency, load: outcome, figures: [
                "participants": Double(count), "shares": Double(guids.count), "samples": Double(max(1, settings.shareSamples)),
                "setupSeconds": setupSeconds, "fanoutP50Ms": fanout.milliseconds(at: 50), "fanoutMaxMs": fanout.maxMilliseconds,
            ])
    }

    /// Waits until no participant holding a share of the zone is behind the zone's last event; returns when.
    private func waitForTracking(_ store: PostgresStore, zoneKey: String, zone: String, owner: String) async throws -> ContinuousClock.Instant {
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(30)
        let (logger, container) = (logger, target.container)
        while clock.now < deadline {
            let behind = try await store.withConnection { connection in
                let last = try await Self.lastSequence(connection, zoneKey: zoneKey, logger: logger)
                return try await Self.scalar(connection.query("""
                    SELECT count(*) FROM shared_zone_tracking
                    WHERE container = \(container) AND environment = 'development' AND scope = 'private' AND owner = \(owner) AND zone_name = \(zone)
                      AND active AND change_sequence < \(last)
                    """, logger: logger))
            }
            if behind == 0 { return clock.now }
            try await Task.sleep(for: .milliseconds(2))
        }
        throw BenchFailure(description: "stratus-shares did not track \(zoneKey)'s last change within 30 s")
    }

    /// One `changes/database` of each pending participant (`concurrency` at a time) from their
    /// token; the participants whose answer held the zone, with when, their tokens moved on.
    private func pollParticipants(
        _ client: CloudKitClient, signIns: [String], tokens: ParticipantTokens, pending: [Int], concurrency: Int
    ) async throws -> [(index: Int, at: ContinuousClock.Instant)] {
        let clock = ContinuousClock()
        return try await withThrowingTaskGroup(of: [(index: Int, at: ContinuousClock.Instant)].self) { group in
            for lane in 0..<concurrency {
                group.addTask {
                    var seen: [(index: Int, at: ContinuousClock.Instant)] = []
                    for index in stride(from: lane, to: pending.count, by: concurrency) {
                        let participant = pending[index]
                        var body: [String: JSONValue] = [:]
                        if let token = tokens.state.withLock({ $0[participant] }) { body["syncToken"] = .string(token) }
                        let reply = try await client.postValue(path: "shared/changes/database", as: signIns[participant], .object(body))
                        guard reply.status == 200 else {
                            throw BenchFailure(description: "changes/database (shared): HTTP \(reply.status) \(reply.body["reason"]?.stringValue ?? "")")
                        }
                        let at = clock.now
                        if let token = reply.body["syncToken"]?.stringValue { tokens.state.withLock { $0[participant] = token } }
                        if case .array(let zones)? = reply.body["zones"], !zones.isEmpty { seen.append((participant, at)) }
                    }
                    return seen
                }
            }
            var all: [(index: Int, at: ContinuousClock.Instant)] = []
            for try await seen in group { all += seen }
            return all
        }
    }
}

/// Each share.fanout participant's last database token.
final class ParticipantTokens: Sendable {
    let state: Mutex<[String?]>

    init(count: Int) { state = Mutex([String?](repeating: nil, count: count)) }
}
