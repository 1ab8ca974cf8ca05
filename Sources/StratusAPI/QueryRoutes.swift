import Crypto
import Foundation
import Hummingbird
import Logging
import StratusCore
import StratusPostgres

/// `records/query`, served from the asynchronously maintained query index.
struct QueryRoutes<Context: StratusRequestContext>: Sendable {
    let queries: QueryStore
    let schemas: SchemaStore
    let authenticator: Authenticator
    let limits: APILimits
    let secretKey: SecretKey
    let assetSettings: AssetSettings
    /// The share URL template (`APIConfiguration.shareURL`): a share in a page carries its URL.
    let shareURL: String?

    func register(on router: Router<Context>) {
        router.post("/database/1/:container/:environment/:database/records/query") { request, context in try await query(request, context) }
    }

    struct QueryRequest: Decodable {
        var query: JSONValue
        var zoneID: WireZoneID?
        var zoneWide: Bool?
        var resultsLimit: Int?
        var continuationMarker: String?
        var desiredKeys: [String]?
        var numbersAsStrings: Bool?
    }

    /// What a continuation marker carries: which query it continues, and after which row.
    struct Marker: Codable {
        var query: String
        var after: [JSONValue]

        enum CodingKeys: String, CodingKey { case query = "q", after = "a" }
    }

    func query(_ request: Request, _ context: Context) async throws -> Response {
        let opened = try await DatabaseCall.open(request, context: context, authenticator: authenticator, limits: limits, access: .read)
        let parsed = try RequestBody.decode(QueryRequest.self, from: opened.body)
        // The shared database queries the owner's zone for the participant, whose access the
        // query's snapshot checks.
        let target = try opened.target.zone(named: parsed.zoneID?.zoneName, owner: parsed.zoneID?.ownerRecordName, rules: .reads)
        let database = target.database
        let query = try RecordQuery.parse(parsed.query, limits: limits.query)
        try ClientText.check(names: parsed.desiredKeys, "desiredKeys", limit: limits.maxNames)
        // Development serves every field; a deployed production only what its schema flags.
        let policy = database.environment == .production
            ? try await schemas.queryPolicy(container: database.container, environment: database.environment, recordType: query.recordType, logger: context.logger)
            : nil
        try (policy ?? .development).check(query)
        if let resultsLimit = parsed.resultsLimit, resultsLimit < 1 { throw StratusError(.badRequest, "resultsLimit must be at least 1") }
        let limit = min(parsed.resultsLimit ?? limits.maxResults, limits.maxResults)
        let scope: QueryStore.Scope = parsed.zoneWide == true ? .allZones : .zone(target.zone.zoneName)
        // The marker is bound to the query and the database it was issued for.
        // (The query in `JSONEncoder`'s form, written directly: encoding it through `Codable` was a
        // tenth of a query's CPU in the API.)
        var fingerprinted: [UInt8] = []
        parsed.query.writeEncoderForm(into: &fingerprinted)
        fingerprinted += "\(ZoneKey(database: database, zoneName: ""))|\(scope)".utf8
        let fingerprint = Base64URL.encode(Data(SHA256.hash(data: fingerprinted)))
        var after: [JSONValue]?
        if let text = parsed.continuationMarker, !text.isEmpty {
            guard let marker = SignedToken.open(text, as: Marker.self, kind: .continuationMarker, key: secretKey) else {
                throw StratusError(.badRequest, "continuationMarker is not valid: it was altered or not issued by this server")
            }
            guard marker.query == fingerprint else { throw StratusError(.badRequest, "continuationMarker belongs to another query") }
            after = marker.after
        }
        let page = try await queries.run(
            query, in: database, scope: scope, limit: limit, after: after, reader: opened.caller.userRecordName, sharedWith: target.participant, logger: context.logger)
        let numbersAsStrings = parsed.numbersAsStrings ?? false
        let links = AssetLinks(request: request, key: secretKey, settings: assetSettings)
        let shareLinks = ShareLinks(request: request, template: shareURL, container: database.container)
        // The page is written as bytes: each record copied from its stored text where it can be
        // (`RecordWire.write(stored:…)`), with the members in the order `JSONValue` writes them.
        var body: [UInt8] = []
        body.reserveCapacity(256 + page.rows.reduce(0) { $0 + $1.text.utf8.count + 160 })
        body.append(UInt8(ascii: "{"))
        if let continuation = page.continuation {
            body.append(contentsOf: #""continuationMarker":"#.utf8)
            JSONValue.string(SignedToken.sign(Marker(query: fingerprint, after: continuation), kind: .continuationMarker, key: secretKey)).write(into: &body)
            body.append(UInt8(ascii: ","))
        }
        body.append(contentsOf: #""records":["#.utf8)
        let desiredKeys = parsed.desiredKeys.map(Set.init)
        var zoneIDs: [String: (zone: ZoneID, json: [UInt8])] = [:]
        for (index, row) in page.rows.enumerated() {
            if index > 0 { body.append(UInt8(ascii: ",")) }
            let zone: (zone: ZoneID, json: [UInt8])
            if let known = zoneIDs[row.zoneName] {
                zone = known
            } else {
                let id = ZoneID(zoneName: row.zoneName, ownerRecordName: database.owner)
                zone = (id, id.json.serialized())
                zoneIDs[row.zoneName] = zone
            }
            try RecordWire.write(
                stored: row.text, zone: zone.zone, zoneID: zone.json, desiredKeys: desiredKeys, numbersAsStrings: numbersAsStrings, links: links,
                shareURL: shareLinks.url, into: &body)
        }
        body.append(contentsOf: "]}".utf8)
        var response = json(bytes: body)
        // The index is eventually consistent: say how far behind it is for the zones this query read
        // (a documented extension header).
        var behind = page.behind
        if behind == nil { behind = try? await queries.behind(in: database, scope: scope, logger: context.logger) }
        if let behind {
            response.headers[.init("X-Stratus-Index-Behind-Events")!] = String(behind)
        }
        return response
    }
}

extension QueryRoutes.Marker: EncoderFormWritable {
    /// The marker in `JSONEncoder`'s bytes (`{"a":[…],"q":"…"}`, keys sorted), written directly:
    /// every page that continues signs one. A key holding a number JSON cannot carry is left to the
    /// coder, as it always was.
    func writeEncoderForm(into bytes: inout [UInt8]) -> Bool {
        func finite(_ value: JSONValue) -> Bool {
            switch value {
            case .double(let number): number.isFinite
            case .array(let values): values.allSatisfy(finite)
            case .object(let members): members.values.allSatisfy(finite)
            default: true
            }
        }
        guard after.allSatisfy(finite) else { return false }
        bytes += #"{"a":"#.utf8
        JSONValue.array(after).writeEncoderForm(into: &bytes)
        bytes += #","q":"#.utf8
        JSONValue.string(query).writeEncoderForm(into: &bytes)
        bytes.append(UInt8(ascii: "}"))
        return true
    }
}
