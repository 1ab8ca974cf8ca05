import Foundation

extension BenchSuite {
    /// Where the scale run puts its records: record g (`item-g`) of `records` goes to zone 0, the
    /// probe zone, until that holds its share (`perZone`), then round robin over the other zones.
    /// The probe zone is full from the first step on, so its sync and queries read the same
    /// records at every step while the tables around them grow.
    struct ScaleLayout: Sendable {
        let records: Int
        let zones: Int

        var perZone: Int { max(1, records / zones) }

        func zone(of record: Int) -> Int { record < perZone || zones == 1 ? 0 : 1 + (record - perZone) % (zones - 1) }

        /// Records loaded when each step is measured: a hundredth, a tenth and all of them (at
        /// least the probe zone's share).
        var steps: [Int] { Set([records / 100, records / 10, records].map { max($0, min(perZone, records)) }).sorted() }
    }

    /// The scale run (`--scale`, group `scale`, not in the default suite): `scaleRecords` records
    /// over `scaleZones` zones, loaded in steps; after each step (and the indexer's catch-up) a
    /// full sync and the first 1000 changes of the probe zone, single lookups of records of every
    /// loaded zone (1 and `concurrency` clients), and the three queries on the probe zone and
    /// zone-wide. Names start with `scale.<records loaded>.`.
    func scale(_ client: CloudKitClient, record: (ScenarioResult) -> Void) async throws {
        let layout = ScaleLayout(records: settings.scaleRecords, zones: settings.scaleZones)
        let zones = (0..<layout.zones).map { zone("Scale\($0)") }
        try await client.createZones(zones)
        var loaded = 0
        for step in layout.steps {
            let prefix = "scale.\(step)."
            var load = await scaleLoad(client, layout: layout, zones: zones, records: loaded..<step, name: prefix + "load")
            guard load.figures["records"] == Double(step - loaded) else {
                record(load)
                progress("scale: loading stopped (a batch failed, or \(settings.scaleLoadSeconds) s passed); the larger steps are left out")
                return
            }
            loaded = step
            load.figures["indexCatchUpSeconds"] = try await settle(client, timeout: settings.scaleIndexTimeout)
            record(load)
            record(await fullSync(client, zone: zones[0], records: layout.perZone, prefix: prefix))
            record(await changes(client, zone: zones[0], records: layout.perZone, prefix: prefix))
            for concurrency in [1, settings.concurrency] {
                record(await lookups(client, name: "\(prefix)lookup.c\(concurrency)", concurrency: concurrency) { clientIndex, iteration in
                    var generator = SplitMix(seed: UInt64(clientIndex) << 32 | UInt64(iteration))
                    let index = Int(generator.next() % UInt64(step))
                    return (zones[layout.zone(of: index)], "item-\(index)")
                })
            }
            for result in await queries(client, zone: zones[0], prefix: prefix) { record(result) }
            for result in await queries(client, zoneWide: true, prefix: prefix + "zonewide.") { record(result) }
        }
    }

    /// Loads `records` of the layout: atomic batches of `batchSize` creates, each in one zone,
    /// `concurrency` clients, the batches ordered so that consecutive ones are of different zones.
    func scaleLoad(_ client: CloudKitClient, layout: ScaleLayout, zones: [String], records: Range<Int>, name: String) async -> ScenarioResult {
        var byZone: [Int: [Int]] = [:]
        for index in records { byZone[layout.zone(of: index), default: []].append(index) }
        let size = settings.batchSize
        let batches: [(zone: Int, round: Int, records: [Int])] = byZone.flatMap { zone, indices in
            stride(from: 0, to: indices.count, by: size).map { (zone, $0, Array(indices[$0..<min($0 + size, indices.count)])) }
        }.sorted { ($0.round, $0.zone) < ($1.round, $1.zone) }
        let next = IssuedCounter(limit: nil)
        let (run, fields) = (run, settings.itemFields)
        let load = await closedLoop(
            concurrency: settings.concurrency, duration: Duration(seconds: settings.scaleLoadSeconds), limit: batches.count, state: { $0 }
        ) { _, _ in
            let batch = batches[next.next()]
            let body: JSONObject = [
                "zoneID": ["zoneName": zones[batch.zone]], "operations": batch.records.map { Self.create(Self.item($0, run: run, fields: fields)) },
                "atomic": true,
            ]
            // A busy server answers TRY_AGAIN_LATER (HTTP 503) and stores nothing of an atomic
            // batch: the loader sends it again, as a client would, a few times at most.
            var reply = try await client.post("records/modify", body)
            for attempt in 1...5 where reply.status == 503 {
                try await Task.sleep(for: .milliseconds(100 * attempt))
                reply = try await client.post("records/modify", body)
            }
            return reply.status == 200 && reply.errorCode == nil ? .done(counter: "records:\(batch.records.count)") : .failed("HTTP \(reply.status) \(reply.errorCode ?? "")")
        }
        let loaded = load.counters.reduce(0) { $0 + (Int($1.key.dropFirst("records:".count)) ?? 0) * $1.value }
        return ScenarioResult(
            name: name, operation: "records/modify, \(size) creates, atomic, \(settings.concurrency) clients over \(byZone.count) zones",
            concurrency: settings.concurrency, load: load, figures: [
                "records": Double(loaded), "recordsPerSecond": load.seconds > 0 ? Double(loaded) / load.seconds : 0, "recordsLoaded": Double(records.upperBound),
            ])
    }
}
