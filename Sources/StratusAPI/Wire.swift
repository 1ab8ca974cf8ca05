import Foundation
import Hummingbird
import StratusCore

/// A zone id as clients send it: `{zoneName, ownerRecordName}` (some send `ownerName`).
///
/// In responses it also carries `zoneType`, as Apple's service does inside every zone id.
struct WireZoneID: Codable, Sendable, Hashable {
    var zoneName: String
    var ownerRecordName: String?
    var zoneType: String?

    enum CodingKeys: String, CodingKey { case zoneName, ownerRecordName, ownerName, zoneType }

    init(zoneName: String, ownerRecordName: String?, zoneType: String? = nil) {
        self.zoneName = zoneName
        self.ownerRecordName = ownerRecordName
        self.zoneType = zoneType
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        zoneName = try container.decode(String.self, forKey: .zoneName)
        ownerRecordName = try container.decodeIfPresent(String.self, forKey: .ownerRecordName)
            ?? container.decodeIfPresent(String.self, forKey: .ownerName)
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(zoneName, forKey: .zoneName)
        try container.encodeIfPresent(ownerRecordName, forKey: .ownerRecordName)
        try container.encodeIfPresent(zoneType, forKey: .zoneType)
    }

    init(_ zoneID: ZoneID) {
        self.init(zoneName: zoneID.zoneName, ownerRecordName: zoneID.ownerRecordName, zoneType: zoneID.zoneType)
    }
}

extension ZoneID {
    /// The zone's `zoneType`: `DEFAULT_ZONE` for a database's default zone, `REGULAR_CUSTOM_ZONE`
    /// for every zone a client creates.
    var zoneType: String { isDefaultZone ? "DEFAULT_ZONE" : "REGULAR_CUSTOM_ZONE" }

    /// The zone id dictionary of responses: `zoneName`, `ownerRecordName`, `zoneType`.
    var json: JSONValue {
        .object(["zoneName": .string(zoneName), "ownerRecordName": .string(ownerRecordName), "zoneType": .string(zoneType)])
    }
}

/// A zone in responses: CloudKit's zone dictionary. A live custom zone carries its current
/// `syncToken` (a client may start `records/changes` from it). `zoneType` appears inside `zoneID`,
/// where Apple's service sends it, and beside it, where Apple's zone descriptions list it.
struct WireZone: Encodable {
    var zoneID: WireZoneID
    var atomic: Bool?
    var deleted: Bool?
    var syncToken: String?
    var zoneType: String?
    /// The zone's default time to live in seconds (a Stratus extension, docs/ttl.md), when it has one.
    var defaultTimeToLive: Int64?

    /// A database's default zone. It has no change history (`records/changes` serves custom zones
    /// only, as Apple's does), so its dictionary carries no `syncToken`: a client takes a token as
    /// the sign that a zone's changes can be fetched.
    static func defaultZone(in database: DatabaseID) -> WireZone {
        let zoneID = ZoneID(zoneName: ZoneID.defaultZoneName, ownerRecordName: database.owner)
        return WireZone(zoneID: WireZoneID(zoneID), atomic: false, zoneType: zoneID.zoneType)
    }

    /// A live custom zone with the sync token of its current state.
    static func custom(_ zone: Zone, key: SecretKey) -> WireZone {
        WireZone(
            zoneID: WireZoneID(zone.zoneID), atomic: true,
            syncToken: ZoneSyncToken.signed(zoneKey: zone.key.rawValue, incarnation: zone.incarnation, version: zone.changeCounter, key: key),
            zoneType: zone.zoneID.zoneType, defaultTimeToLive: zone.defaultTimeToLive)
    }

    /// A deleted zone.
    static func deleted(_ zoneID: ZoneID) -> WireZone {
        WireZone(zoneID: WireZoneID(zoneID), deleted: true)
    }
}

extension ZoneSyncToken {
    /// The signed text of a zone sync token.
    static func signed(
        zoneKey: String, incarnation: UUID, version: Int64, reverseUpTo: Int64? = nil, reverseBelow: Int64? = nil, horizon: Int64? = nil, key: SecretKey
    ) -> String {
        SignedToken.sign(
            ZoneSyncToken(zoneKey: zoneKey, incarnation: incarnation, version: version, reverseUpTo: reverseUpTo, reverseBelow: reverseBelow, horizon: horizon),
            kind: .zoneSync, key: key)
    }
}

/// Decodes a request body as JSON, turning every decoding problem into BAD_REQUEST naming the place.
enum RequestBody {
    /// Read by `JSONValueDecoder`, which answers as `JSONDecoder` would at a cost of about one
    /// pass over the text: a record's fields or a query's values are not decoded element by element.
    static func decode<T: Decodable>(_ type: T.Type, from data: Data) throws(StratusError) -> T {
        guard !data.isEmpty else { throw StratusError(.badRequest, "The request body is empty; a JSON dictionary is required") }
        do {
            return try JSONValueDecoder.decode(T.self, from: data)
        } catch let error as DecodingError {
            throw StratusError(.badRequest, describe(error))
        } catch {
            throw StratusError(.badRequest, "The request body is not valid JSON")
        }
    }

    /// Reads the whole body, refusing (before processing anything) one over the limit.
    static func read(_ request: Request, limit: Int) async throws -> Data {
        do {
            return Data(buffer: try await request.body.collect(upTo: limit))
        } catch {
            throw StratusError(.limitExceeded, "The request body exceeds \(limit) bytes")
        }
    }

    static func describe(_ error: DecodingError) -> String {
        func path(_ codingPath: [any CodingKey]) -> String {
            let text = codingPath.map { $0.intValue.map { "[\($0)]" } ?? ".\($0.stringValue)" }.joined()
            return text.isEmpty ? "the body" : String(text.drop(while: { $0 == "." }))
        }
        switch error {
        case .keyNotFound(let key, let context):
            return "Missing required key '\(key.stringValue)' in \(path(context.codingPath))"
        case .typeMismatch(let type, let context):
            return "Wrong type at \(path(context.codingPath)): expected \(type)"
        case .valueNotFound(let type, let context):
            return "Missing value at \(path(context.codingPath)): expected \(type)"
        case .dataCorrupted(let context):
            return context.codingPath.isEmpty ? "The request body is not valid JSON" : "Invalid value at \(path(context.codingPath))"
        @unknown default:
            return "The request body could not be read"
        }
    }
}
