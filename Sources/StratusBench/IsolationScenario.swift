import Foundation

extension BenchSuite {
    /// The writers of the isolation scenario: as many as a busy API serves at once.
    static let isolationWriters = 48

    /// Single-record creates, `concurrency` clients: client i writes to `zones[i % zones.count]`,
    /// signed in with `signIns[i]` (nil: the suite's user), record names starting with `prefix`.
    func creates(
        _ client: CloudKitClient, name: String, operation: String, concurrency: Int, zones: [String], signIns: [String]? = nil, prefix: String? = nil
    ) async -> ScenarioResult {
        let prefix = prefix ?? name
        let load = await closedLoop(concurrency: concurrency, duration: Duration(seconds: settings.seconds), state: { $0 }) { clientIndex, iteration in
            // The reply read as a records answer (every byte checked, every record read), not
            // turned into Foundation values.
            let reply = try await client.postSummarised("records/modify", [
                "zoneID": ["zoneName": zones[clientIndex % zones.count]],
                "operations": [Self.create(Self.note("\(prefix)-\(clientIndex)-\(iteration)", count: iteration))],
            ], as: signIns?[clientIndex])
            guard reply.status == 200, reply.errorCode == nil else { return .failed("HTTP \(reply.status) \(reply.errorCode ?? "")") }
            return reply.records == 1 ? .done() : .failed("\(reply.records) records answered for one create")
        }
        return ScenarioResult(name: name, operation: operation, concurrency: concurrency, load: load)
    }

    /// 9. Independent writers: 48 clients creating records, all in one zone, then each in a zone of
    /// its own. Writers of different zones share no data, so across zones no request may be told
    /// to try again later (`errors` stays 0; `failures` would name TRY_AGAIN_LATER), and throughput
    /// must be at least that of one zone, where they queue.
    func isolation(_ client: CloudKitClient) async throws -> [ScenarioResult] {
        let writers = Self.isolationWriters
        let shared = zone("Shared")
        let ownZones = (0..<writers).map { zone("Own\($0)") }
        return try await oneZoneThenZones(client, names: ("isolation.onezone.c\(writers)", "isolation.zones.c\(writers)"), writers: "\(writers) writers",
                                          concurrency: writers, shared: shared, own: ownZones)
    }

    /// Creates by `concurrency` clients, all in `shared`, then each in a zone of `own`: the two
    /// results, named `names`.
    func oneZoneThenZones(
        _ client: CloudKitClient, names: (String, String), writers: String, concurrency: Int, shared: String, own: [String]
    ) async throws -> [ScenarioResult] {
        try await client.createZones([shared] + own)
        var results: [ScenarioResult] = []
        // Per client, its zone: the shared one, then a zone each.
        for (name, zones, place) in [(names.0, [shared], "one zone"), (names.1, own, "a zone each")] {
            try await settle(client)
            results.append(await creates(
                client, name: name, operation: "records/modify, one create, \(writers) in \(place)", concurrency: concurrency, zones: zones))
        }
        return results
    }

    /// 1. Single-record creates by `settings.concurrency` users, each in a zone of their own in
    /// their own private database (signed in with the API's key): nothing makes them queue.
    /// Nil without the key.
    func createInOwnZones(_ client: CloudKitClient) async throws -> ScenarioResult? {
        let writers = settings.concurrency
        let name = "create.c\(writers).zones"
        guard let signIns = target.signIn((0..<writers).map { "_writer\($0)_\(run)" }) else {
            progress("\(name): left out (no token-signing key: --secret-key-file)")
            return nil
        }
        let zone = zone("Mine")
        for signIn in signIns { try await client.createZone(zone, as: signIn) }
        try await settle(client)
        return await creates(
            client, name: name, operation: "records/modify, one create, \(writers) users each in a zone of their own", concurrency: writers,
            zones: [zone], signIns: signIns)
    }

    /// 1. Single-record creates by `settings.concurrency` clients of one user (the suite's): all in
    /// one zone, then each in a zone of its own. Zones of one user share the user's rows (its quota
    /// total, its database's change history) but no zone lock, so the second should be the faster
    /// (issue 49's goal: at least 1.5×; `ratioToOneZone` on the second).
    func createOneUser(_ client: CloudKitClient) async throws -> [ScenarioResult] {
        let writers = settings.concurrency
        var results = try await oneZoneThenZones(
            client, names: ("create.c\(writers).onezone-user", "create.c\(writers).zones-user"), writers: "\(writers) clients of one user",
            concurrency: writers, shared: zone("UserOne"), own: (0..<writers).map { zone("User\($0)") })
        if results[0].perSecond > 0 { results[1].figures["ratioToOneZone"] = results[1].perSecond / results[0].perSecond }
        return results
    }
}
