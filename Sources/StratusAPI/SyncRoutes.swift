import Foundation
import Hummingbird
import Logging
import StratusCore
import StratusPostgres

/// Change tracking: `records/changes`, `changes/zone`, `zones/changes` and `changes/database`.
struct SyncRoutes<Context: StratusRequestContext>: Sendable {
    let sync: SyncStore
    let shares: ShareStore
    let authenticator: Authenticator
    let limits: APILimits
    let secretKey: SecretKey
    let assetSettings: AssetSettings
    /// The share URL template (`APIConfiguration.shareURL`): a share in a page carries its URL.
    let shareURL: String?

    func register(on router: Router<Context>) {
        let base = "/database/1/:container/:environment/:database"
        router.post("\(base)/records/changes") { request, context in try await recordChanges(request, context) }
        router.post("\(base)/changes/zone") { request, context in try await zoneChanges(request, context) }
        router.post("\(base)/zones/changes") { request, context in try await databaseChanges(request, context) }
        router.post("\(base)/changes/database") { request, context in try await databaseChanges(request, context) }
    }

    struct ZoneRequest: Decodable {
        var zoneID: WireZoneID
        var syncToken: String?
        var resultsLimit: Int?
        var desiredKeys: [String]?
        var desiredRecordTypes: [String]?
        var numbersAsStrings: Bool?
        /// Stratus extension: newest changes first.
        var reverse: Bool?
        /// Stratus extension: every change in order, so each pulled prefix is a state that existed.
        var snapshot: Bool?
    }

    struct ZonesRequest: Decodable {
        var zones: [ZoneRequest]
    }

    struct DatabaseRequest: Decodable {
        var syncToken: String?
        var metaSyncToken: String?
        var resultsLimit: Int?
    }

    func recordChanges(_ request: Request, _ context: Context) async throws -> Response {
        let (target, body) = try await open(request, context)
        let parsed = try RequestBody.decode(ZoneRequest.self, from: body)
        let links = AssetLinks(request: request, key: secretKey, settings: assetSettings)
        let shareLinks = ShareLinks(request: request, template: shareURL, container: target.addressed.container)
        var answer: [UInt8] = []
        _ = try await changes(parsed, target: target, budget: limits.maxResponseBytes, links: links, shareLinks: shareLinks, context: context, into: &answer)
        return json(bytes: answer)
    }

    func zoneChanges(_ request: Request, _ context: Context) async throws -> Response {
        let (target, body) = try await open(request, context)
        let parsed = try RequestBody.decode(ZonesRequest.self, from: body)
        guard !parsed.zones.isEmpty else { throw StratusError(.badRequest, "zones must name at least one zone") }
        guard parsed.zones.count <= limits.maxOperations else {
            throw StratusError(.limitExceeded, "zones names \(parsed.zones.count) zones; at most \(limits.maxOperations) are allowed per request")
        }
        // Each zone once: a repeated zone would multiply the response, not the answer.
        var seen = Set<ExactName>()
        for zone in parsed.zones where !seen.insert(ExactName(zone.zoneID.zoneName)).inserted {
            throw StratusError(.badRequest, "Zone '\(ClientText.excerpt(zone.zoneID.zoneName))' appears more than once in zones; ask for each zone once")
        }
        var answer = Array(#"{"zones":["#.utf8)
        // One response budget for all the zones: a zone asked after it is spent answers no change
        // (its token as it was) and moreComing.
        var budget = limits.maxResponseBytes
        let links = AssetLinks(request: request, key: secretKey, settings: assetSettings)
        let shareLinks = ShareLinks(request: request, template: shareURL, container: target.addressed.container)
        for (index, zone) in parsed.zones.enumerated() {
            if index > 0 { answer.append(UInt8(ascii: ",")) }
            do {
                var result: [UInt8] = []
                budget -= try await changes(zone, target: target, budget: budget, links: links, shareLinks: shareLinks, context: context, into: &result)
                answer.append(contentsOf: result)
            } catch let error as StratusError where error.code != .tryAgainLater {
                var entry = RecordWire.error(error, recordName: "", uuid: context.requestID)
                if case .object(var members) = entry {
                    members["recordName"] = nil
                    members["zoneID"] = ZoneID(zoneName: zone.zoneID.zoneName, ownerRecordName: target.reportedOwner(named: zone.zoneID.ownerRecordName)).json
                    entry = .object(members)
                }
                entry.write(into: &answer)
            }
        }
        answer.append(contentsOf: "]}".utf8)
        return json(bytes: answer)
    }

    /// Appends one zone's page of changes as CloudKit's dictionary to `out`: at most `budget` bytes
    /// of record fields (but one record however large when the response holds nothing yet).
    /// Returns the bytes of fields it holds.
    private func changes(
        _ zoneRequest: ZoneRequest, target: CallTarget, budget: Int, links: AssetLinks, shareLinks: ShareLinks, context: Context,
        into out: inout [UInt8]
    ) async throws -> Int {
        let name = zoneRequest.zoneID.zoneName
        if name != ZoneID.defaultZoneName { try ZoneID.validate(zoneName: name) }
        try ClientText.check(names: zoneRequest.desiredKeys, "desiredKeys", limit: limits.maxNames)
        try ClientText.check(names: zoneRequest.desiredRecordTypes, "desiredRecordTypes", limit: limits.maxNames)
        for (index, type) in (zoneRequest.desiredRecordTypes ?? []).enumerated() {
            do { try Record.validate(recordType: type) } catch { throw StratusError(.badRequest, "desiredRecordTypes[\(index)]: \(error.reason)") }
        }
        // The shared database reads the owner's zone for the participant (the reader).
        let resolved = try target.zone(named: name, owner: zoneRequest.zoneID.ownerRecordName, rules: .reads)
        let (zone, database, reader) = (resolved.zone, resolved.database, resolved.participant)
        let zoneKey = ZoneKey(database: database, zoneName: name).rawValue
        var incarnation: UUID?
        var version: Int64 = 0
        var reverseBounds: (upTo: Int64?, below: Int64?) = (nil, nil)
        var horizon: Int64 = 0
        if let text = zoneRequest.syncToken, !text.isEmpty {
            guard let token = SignedToken.open(text, as: ZoneSyncToken.self, kind: .zoneSync, key: secretKey) else {
                throw StratusError(.badRequest, "syncToken is not valid: it was altered or not issued by this server")
            }
            guard token.zoneKey == zoneKey else {
                throw StratusError(.changeTokenExpired, "This sync token belongs to another zone or database; discard the local copy and sync from the start")
            }
            incarnation = token.incarnation
            version = token.version
            reverseBounds = (token.reverseUpTo, token.reverseBelow)
            horizon = token.horizon ?? 0
        }
        if zoneRequest.reverse == true, zoneRequest.snapshot == true {
            throw StratusError(.badRequest, "reverse and snapshot cannot be combined")
        }
        if reverseBounds.upTo != nil, zoneRequest.reverse != true {
            throw StratusError(.badRequest, "This sync token continues a reverse sync; send reverse: true until moreComing is false")
        }
        let mode: SyncStore.Mode = zoneRequest.reverse == true ? .reverse(upTo: reverseBounds.upTo, below: reverseBounds.below)
            : zoneRequest.snapshot == true ? .snapshot : .forward
        let limit = min(max(zoneRequest.resultsLimit ?? limits.maxResults, 1), limits.maxResults)
        if let resultsLimit = zoneRequest.resultsLimit, resultsLimit < 1 {
            throw StratusError(.badRequest, "resultsLimit must be at least 1")
        }
        let numbersAsStrings = zoneRequest.numbersAsStrings ?? false
        let zoneID = zone.json.serialized()
        let page: SyncStore.ZoneChanges
        do {
            // Every field with numbers as numbers: PostgreSQL writes each record as the answer's
            // dictionary (`SyncStore.ZoneChanges.wire`), and the page is copied into the answer.
            page = try await sync.changes(
                zone: zone, in: database, incarnation: incarnation, since: version, horizon: horizon, limit: limit,
                recordTypes: zoneRequest.desiredRecordTypes.map(Set.init), mode: mode, maxBytes: budget,
                firstAlwaysFits: budget == limits.maxResponseBytes, sharedWith: reader,
                wire: zoneRequest.desiredKeys == nil && !numbersAsStrings ? String(decoding: zoneID, as: UTF8.self) : nil, logger: context.logger)
        } catch let error as StratusError where error.code == .zoneNotFound && incarnation != nil {
            // A participant who lost the zone (the share fan-out recorded that they held it) syncs
            // from the start with their old token: the reset CloudKit gives, not a missing zone. A
            // stranger still finds no zone.
            guard let reader, try await shares.lostAccess(
                user: reader, owner: database.owner, zoneName: name, container: database.container, environment: database.environment, logger: context.logger)
            else { throw error }
            throw StratusError(.changeTokenExpired, "The zone is no longer shared with the caller; discard the local copy of it and sync the database again")
        }
        let token = ZoneSyncToken.signed(
            zoneKey: zoneKey, incarnation: page.incarnation, version: page.version, reverseUpTo: page.reverse?.upTo, reverseBelow: page.reverse?.below,
            horizon: page.horizon, key: secretKey)
        // Written as bytes, members in the order `JSONValue` writes them: the page PostgreSQL wrote
        // (`page.wire`) as it is, or the general page's records through `RecordWire.dictionary`.
        out.reserveCapacity(out.count + 256 + (page.wire?.readableBytes ?? page.bytes + page.changes.count * 200))
        out.append(contentsOf: #"{"moreComing":"#.utf8)
        out.append(contentsOf: (page.moreComing ? "true" : "false").utf8)
        out.append(contentsOf: #","records":["#.utf8)
        if let wire = page.wire { out.append(contentsOf: wire.readableBytesView) }
        for (index, change) in page.changes.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            switch change {
            case .saved(let record):
                RecordWire.dictionary(record, zone: zone, desiredKeys: zoneRequest.desiredKeys, numbersAsStrings: numbersAsStrings, links: links, shareURL: shareLinks.url)
                    .write(into: &out)
            case .deleted(let recordName, _):
                JSONValue.object(["recordName": .string(recordName), "deleted": .bool(true)]).write(into: &out)
            }
        }
        out.append(contentsOf: #"],"syncToken":"#.utf8)
        JSONValue.string(token).write(into: &out)
        out.append(contentsOf: #","zoneID":"#.utf8)
        out.append(contentsOf: zoneID)
        out.append(UInt8(ascii: "}"))
        return page.bytes
    }

    /// `zones/changes` and `changes/database`. The token is the snapshot the last answer was read
    /// in (`DatabaseChangeToken`): the zones changed after it are read by their rows' `changed_xid`,
    /// whatever the number of zones. A token of the earlier form (every zone the client has seen)
    /// is still compared zone by zone, and the page that ends it hands out the new form.
    func databaseChanges(_ request: Request, _ context: Context) async throws -> Response {
        let (target, body) = try await open(request, context)
        let database = target.addressed
        let parsed = body.isEmpty ? DatabaseRequest() : try RequestBody.decode(DatabaseRequest.self, from: body)
        if let resultsLimit = parsed.resultsLimit, resultsLimit < 1 { throw StratusError(.badRequest, "resultsLimit must be at least 1") }
        let limit = min(parsed.resultsLimit ?? limits.maxResults, limits.maxResults)
        var token: DatabaseChangeToken?
        if let text = parsed.syncToken ?? parsed.metaSyncToken, !text.isEmpty {
            if let opened = SignedToken.open(text, as: DatabaseChangeToken.self, kind: .databaseSync, key: secretKey) {
                token = opened
            } else if let earlier = SignedToken.open(text, as: DatabaseSyncToken.self, kind: .databaseSync, key: secretKey) {
                guard earlier.database == database.key else {
                    throw StratusError(.changeTokenExpired, "This sync token belongs to another database; discard the local copy and sync from the start")
                }
                return try await earlierTokenChanges(target: target, known: earlier.zones, limit: limit, logger: context.logger)
            } else {
                throw StratusError(.badRequest, "syncToken is not valid: it was altered or not issued by this server")
            }
        }
        if let participant = target.participant {
            let page = try await shares.sharedZoneChanges(user: participant, in: database, since: token, limit: limit, logger: context.logger)
            let zones: [WireZone] = page.zones.map { change in change.zone.map { .custom($0, key: secretKey) } ?? .deleted(change.zoneID) }
            return try answer(zones, page.token, moreComing: page.moreComing)
        }
        let page = try await sync.zoneChanges(in: database, since: token, limit: target.belongsToUser ? limit : 0, logger: context.logger)
        return try answer(page.zones.map { wire($0, in: database) }, page.token, moreComing: page.moreComing)
    }

    /// A zone of the caller's own database as a database sync answers it.
    private func wire(_ state: SyncStore.ZoneState, in database: DatabaseID) -> WireZone {
        let zoneID = ZoneID(zoneName: state.zoneName, ownerRecordName: database.owner)
        return state.deleted ? .deleted(zoneID)
            : .custom(Zone(database: database, zoneID: zoneID, incarnation: state.incarnation, changeCounter: state.changeCounter), key: secretKey)
    }

    /// Apple's reference names the token `syncToken` for changes/database and `metaSyncToken` for
    /// zones/changes, and clients read either: both keys carry it.
    private func answer(_ zones: [WireZone], _ token: DatabaseChangeToken, moreComing: Bool) throws -> Response {
        let text = SignedToken.sign(token, kind: .databaseSync, key: secretKey)
        return try json(DatabaseChangesResponse(zones: zones, syncToken: text, metaSyncToken: text, moreComing: moreComing))
    }

    /// A sync from a token of the earlier form: the zones compared with those it knew, as before.
    /// While more is coming the token stays of that form; the page that ends the comparison hands
    /// out the snapshot its zones were read in.
    private func earlierTokenChanges(target: CallTarget, known: [String: String], limit: Int, logger: Logger) async throws -> Response {
        let database = target.addressed
        if let participant = target.participant {
            return try await earlierSharedDatabaseChanges(of: participant, in: database, known: known, limit: limit, logger: logger)
        }
        var known = known
        // Custom zones are the user's own (the public database has only its default zone).
        let (states, reading) = try await sync.zoneStates(in: database, logger: logger)
        // New zones, and known zones whose incarnation or counter moved; a deleted zone the client never knew is no news.
        let changed = target.belongsToUser ? states.filter { state in
            known[state.zoneName] != state.fingerprint && !(state.deleted && known[state.zoneName] == nil)
        } : []
        let page = changed.prefix(limit)
        for state in page { known[state.zoneName] = state.fingerprint }
        return try earlierAnswer(
            page.map { wire($0, in: database) }, known: known, reading: reading, database: database, moreComing: changed.count > page.count)
    }

    /// The shared database's changes from a token of the earlier form: the zones shared with the
    /// caller now, compared with those the token knew (keyed `zoneName/owner`, a zone name holding
    /// no '/'): a new zone, or one whose incarnation or position in the caller's tracking moved, is
    /// answered; a zone no longer shared with the caller is answered deleted.
    private func earlierSharedDatabaseChanges(
        of participant: String, in database: DatabaseID, known: [String: String], limit: Int, logger: Logger
    ) async throws -> Response {
        var known = known
        let (shared, reading) = try await shares.trackedZones(user: participant, container: database.container, environment: database.environment, logger: logger)
        var current: [String: ShareStore.TrackedZone] = [:]
        for entry in shared { current["\(entry.zone.zoneID.zoneName)/\(entry.zone.zoneID.ownerRecordName)"] = entry }
        // The zone's incarnation and the participant's position in the fan-out's tracking (not the
        // owner's zone counter, which moves with changes the participant is not told of).
        func fingerprint(_ tracked: ShareStore.TrackedZone) -> String { "\(tracked.zone.incarnation.uuidString.prefix(8)):s\(tracked.changeSequence)" }
        var changed: [(key: String, zone: WireZone)] = []
        for (key, tracked) in current.sorted(by: { $0.key < $1.key }) where known[key] != fingerprint(tracked) {
            changed.append((key, .custom(tracked.zone, key: secretKey)))
        }
        for key in known.keys.sorted() where current[key] == nil {
            let parts = key.split(separator: "/", maxSplits: 1).map(String.init)
            guard parts.count == 2 else { continue }
            changed.append((key, .deleted(ZoneID(zoneName: parts[0], ownerRecordName: parts[1]))))
        }
        let page = changed.prefix(limit)
        for entry in page { known[entry.key] = current[entry.key].map(fingerprint) }
        return try earlierAnswer(page.map(\.zone), known: known, reading: reading, database: database, moreComing: changed.count > page.count)
    }

    /// The answer to a sync from a token of the earlier form: that form while more is coming, else
    /// the snapshot the zones were read in.
    private func earlierAnswer(_ zones: [WireZone], known: [String: String], reading: ChangeReading, database: DatabaseID, moreComing: Bool) throws -> Response {
        guard moreComing else { return try answer(zones, reading.token(for: database), moreComing: false) }
        let text = SignedToken.sign(DatabaseSyncToken(database: database.key, zones: known), kind: .databaseSync, key: secretKey)
        return try json(DatabaseChangesResponse(zones: zones, syncToken: text, metaSyncToken: text, moreComing: true))
    }

    struct DatabaseChangesResponse: Encodable {
        var zones: [WireZone]
        var syncToken: String
        var metaSyncToken: String
        var moreComing: Bool
    }

    private func open(_ request: Request, _ context: Context) async throws -> (CallTarget, Data) {
        let opened = try await DatabaseCall.open(request, context: context, authenticator: authenticator, limits: limits, access: .read)
        return (opened.target, opened.body)
    }
}
