import Foundation
import Hummingbird
import Logging
import StratusCore
import StratusPostgres

/// `zones/modify`, `zones/list` and `zones/lookup`.
struct ZoneRoutes<Context: StratusRequestContext>: Sendable {
    let zones: ZoneStore
    let shares: ShareStore
    let authenticator: Authenticator
    let limits: APILimits
    let secretKey: SecretKey

    func register(on router: Router<Context>) {
        let base = "/database/1/:container/:environment/:database/zones"
        router.post("\(base)/modify") { request, context in try await modify(request, context) }
        router.post("\(base)/list") { request, context in try await list(request, context) }
        router.get("\(base)/list") { request, context in try await list(request, context) }
        router.post("\(base)/lookup") { request, context in try await lookup(request, context) }
    }

    struct ModifyRequest: Decodable {
        struct Operation: Decodable {
            var operationType: String
            var zone: Zone
        }
        struct Zone: Decodable {
            var zoneID: WireZoneID
            /// A Stratus extension (docs/ttl.md), as sent: absent, null or a number of seconds.
            var defaultTimeToLive: JSONValue?

            enum CodingKeys: String, CodingKey { case zoneID, defaultTimeToLive }

            init(from decoder: any Decoder) throws {
                let container = try decoder.container(keyedBy: CodingKeys.self)
                zoneID = try container.decode(WireZoneID.self, forKey: .zoneID)
                defaultTimeToLive = container.contains(.defaultTimeToLive)
                    ? try container.decode(JSONValue.self, forKey: .defaultTimeToLive) : nil
            }
        }
        var operations: [Operation]
    }

    struct LookupRequest: Decodable {
        var zones: [WireZoneID]
    }

    /// A zone result or an error dictionary, in request order.
    enum ZoneResult: Encodable {
        case zone(WireZone)
        case error(ErrorDictionary)

        func encode(to encoder: any Encoder) throws {
            switch self {
            case .zone(let zone): try zone.encode(to: encoder)
            case .error(let error): try error.encode(to: encoder)
            }
        }
    }

    struct ZonesResponse: Encodable { var zones: [ZoneResult] }

    func modify(_ request: Request, _ context: Context) async throws -> Response {
        let opened = try await DatabaseCall.open(request, context: context, authenticator: authenticator, limits: limits, access: .write)
        let (caller, database) = (opened.caller, opened.database)
        let body = try RequestBody.decode(ModifyRequest.self, from: opened.body)
        guard !body.operations.isEmpty else { throw StratusError(.badRequest, "operations must not be empty") }
        guard body.operations.count <= limits.maxOperations else {
            throw StratusError(.limitExceeded, "At most \(limits.maxOperations) operations are allowed per request, got \(body.operations.count)")
        }
        guard opened.target.belongsToUser else {
            throw StratusError(.badRequest, "Zones can be created and deleted only in the private database")
        }
        var seen = Set<ExactName>()
        var commands: [ZoneCommand] = []
        for operation in body.operations {
            let name = operation.zone.zoneID.zoneName
            if name == ZoneID.defaultZoneName {
                throw StratusError(.badRequest, "The default zone cannot be created or deleted")
            }
            try ZoneID.validate(zoneName: name)
            if let owner = operation.zone.zoneID.ownerRecordName, !opened.target.isOwner(owner) {
                throw StratusError(.accessDenied, "Zones can be modified only in the caller's own private database")
            }
            guard seen.insert(ExactName(name)).inserted else {
                throw StratusError(.badRequest, "Zone '\(name)' appears in more than one operation")
            }
            let zoneID = ZoneID(zoneName: name, ownerRecordName: database.owner)
            switch operation.operationType {
            case "create":
                var defaultTimeToLive: Int64?? = nil
                if let sent = operation.zone.defaultTimeToLive {
                    defaultTimeToLive = sent == .null ? .some(nil) : .some(try RecordExpiration.timeToLive(sent, "zone.defaultTimeToLive"))
                }
                commands.append(.create(zoneID, defaultTimeToLive: defaultTimeToLive))
            case "delete":
                if operation.zone.defaultTimeToLive != nil {
                    throw StratusError(.badRequest, "zone.defaultTimeToLive is for create operations only")
                }
                commands.append(.delete(zoneID))
            default:
                throw StratusError(.badRequest, "Unknown operationType '\(operation.operationType.prefix(64))': use create or delete")
            }
        }
        // The device a zone change comes from, as for records: its own couriers are not pushed it.
        let causation = Causation(requestID: context.requestID, userRecordName: caller.userRecordName, deviceID: try DeviceHeader.deviceID(request))
        let outcomes = try await zones.modify(commands, in: database, causation: causation, quota: caller.limits.quota, logger: context.logger)
        let results: [ZoneResult] = zip(commands, outcomes).map { command, outcome in
            switch outcome {
            case .success(.saved(let zone)): .zone(.custom(zone, key: secretKey))
            case .success(.deleted(let zoneID)): .zone(.deleted(zoneID))
            case .failure(let error):
                .error(ErrorDictionary(error, uuid: context.requestID, zoneID: WireZoneID(command.zoneID)))
            }
        }
        return try json(ZonesResponse(zones: results))
    }

    func list(_ request: Request, _ context: Context) async throws -> Response {
        let target = try await DatabaseCall.open(request, context: context, authenticator: authenticator, limits: limits, access: .read).target
        let zones = try await allZones(in: target, logger: context.logger)
        return try json(ZonesResponse(zones: zones.map { .zone($0) }))
    }

    func lookup(_ request: Request, _ context: Context) async throws -> Response {
        let opened = try await DatabaseCall.open(request, context: context, authenticator: authenticator, limits: limits, access: .read)
        let (target, database) = (opened.target, opened.database)
        let body = try RequestBody.decode(LookupRequest.self, from: opened.body)
        guard body.zones.count <= limits.maxOperations else {
            throw StratusError(.limitExceeded, "At most \(limits.maxOperations) zones may be looked up per request, got \(body.zones.count)")
        }
        // Names are checked before any reaches SQL, and each zone is answered once.
        var seen = Set<ExactName>()
        for (index, wire) in body.zones.enumerated() {
            if wire.zoneName != ZoneID.defaultZoneName {
                do { try ZoneID.validate(zoneName: wire.zoneName) } catch { throw StratusError(.badRequest, "zones[\(index)]: \(error.reason)") }
            }
            guard seen.insert(ExactName(wire.zoneName)).inserted else {
                throw StratusError(.badRequest, "Zone '\(wire.zoneName)' appears more than once in zones; ask for each zone once")
            }
        }
        var results: [ZoneResult] = []
        // The shared database: the owners' zones shared with the caller, read once for the request.
        let shared = if let participant = target.participant {
            try await sharedZones(of: participant, in: database, logger: context.logger)
        } else {
            [SharedZone]()
        }
        for wire in body.zones {
            if wire.zoneName == ZoneID.defaultZoneName, target.hasDefaultZone {
                results.append(.zone(.defaultZone(in: database)))
            } else if target.participant != nil, let zone = shared.first(where: { candidate in
                candidate.zone.zoneID.zoneName == wire.zoneName && (wire.ownerRecordName ?? candidate.zone.zoneID.ownerRecordName) == candidate.zone.zoneID.ownerRecordName
            }) {
                results.append(.zone(.custom(zone.zone, key: secretKey)))
            } else if target.belongsToUser, let zone = try await zones.lookup(wire.zoneName, in: database, logger: context.logger) {
                results.append(.zone(.custom(zone, key: secretKey)))
            } else {
                let error = StratusError(.zoneNotFound, "Zone '\(ClientText.excerpt(wire.zoneName))' does not exist")
                results.append(.error(ErrorDictionary(error, uuid: context.requestID, zoneID: wire)))
            }
        }
        return try json(ZonesResponse(zones: results))
    }

    /// The shared database holds the zones shared with its participant; every other database has
    /// its default zone, and a private database adds its user's custom zones.
    private func allZones(in target: CallTarget, logger: Logger) async throws -> [WireZone] {
        let database = target.addressed
        if let participant = target.participant {
            return try await sharedZones(of: participant, in: database, logger: logger).map { .custom($0.zone, key: secretKey) }
        }
        let custom = target.belongsToUser ? try await zones.list(in: database, logger: logger) : []
        return [.defaultZone(in: database)] + custom.map { .custom($0, key: secretKey) }
    }

    /// The zones other users shared with the participant and the participant accepted.
    private func sharedZones(of participant: String, in database: DatabaseID, logger: Logger) async throws -> [SharedZone] {
        try await shares.sharedZones(user: participant, container: database.container, environment: database.environment, logger: logger)
    }
}

/// Encodes a response body as JSON.
func json(_ value: some Encodable) throws -> Response {
    jsonResponse(ByteBuffer(data: EventCoding.encode(value)))
}

/// A response body that is a JSON value: serialized directly (`JSONValue.serialized()`), several
/// times faster than through `JSONEncoder` — the path of every page of records.
func json(_ value: JSONValue) -> Response {
    jsonResponse(ByteBuffer(bytes: value.serialized()))
}

/// A response body already written as JSON text.
func json(bytes: [UInt8]) -> Response {
    jsonResponse(ByteBuffer(bytes: bytes))
}

private func jsonResponse(_ body: ByteBuffer) -> Response {
    var headers = HTTPFields()
    headers[.contentType] = "application/json; charset=utf-8"
    return Response(status: .ok, headers: headers, body: .init(byteBuffer: body))
}
