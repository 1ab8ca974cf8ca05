import Foundation

extension BenchSuite {
    /// The writers of the isolation scenario: as many as a busy API serves at once.
    static let isolationWriters = 48

    /// 9. Independent writers: 48 clients creating records, all in one zone, then each in a zone of
    /// its own. Writers of different zones share no data, so across zones no request may be told
    /// to try again later (`errors` stays 0; `failures` would name TRY_AGAIN_LATER), and throughput
    /// must be at least that of one zone, where they queue.
    func isolation(_ client: CloudKitClient) async throws -> [ScenarioResult] {
        let writers = Self.isolationWriters
        let shared = zone("Shared")
        try await client.createZone(shared)
        for index in 0..<writers { try await client.createZone(zone("Own\(index)")) }
        var results: [ScenarioResult] = []
        let ownZones = (0..<writers).map { zone("Own\($0)") }
        // Per client, its zone: the shared one, then a zone each.
        for (name, zones) in [("isolation.onezone.c\(writers)", Array(repeating: shared, count: writers)), ("isolation.zones.c\(writers)", ownZones)] {
            try await settle(client)
            let load = await closedLoop(concurrency: writers, duration: Duration(seconds: settings.seconds), state: { $0 }) { clientIndex, iteration in
                let reply = try await client.post("records/modify", [
                    "zoneID": ["zoneName": zones[clientIndex]],
                    "operations": [Self.create(Self.note("\(name)-\(clientIndex)-\(iteration)", count: iteration))],
                ])
                return reply.status == 200 && reply.errorCode == nil ? .done() : .failed("HTTP \(reply.status) \(reply.errorCode ?? "")")
            }
            results.append(ScenarioResult(
                name: name, operation: "records/modify, one create, \(writers) writers in \(name.contains("onezone") ? "one zone" : "a zone each")",
                concurrency: writers, load: load))
        }
        return results
    }
}
