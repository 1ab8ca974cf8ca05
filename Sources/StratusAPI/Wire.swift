import Foundation
import Hummingbird
import StratusCore

/// A zone id as clients send it: `{zoneName, ownerRecordName}` (some send `ownerName`).
struct WireZoneID: Codable, Sendable, Hashable {
    var zoneName: String
    var ownerRecordName: String?

    enum CodingKeys: String, CodingKey { case zoneName, ownerRecordName, ownerName }

    init(zoneName: String, ownerRecordName: String?) {
        self.zoneName = zoneName
        self.ownerRecordName = ownerRecordName
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
    }

    init(_ zoneID: ZoneID) {
        self.init(zoneName: zoneID.zoneName, ownerRecordName: zoneID.ownerRecordName)
    }
}

/// A zone in responses.
struct WireZone: Encodable {
    var zoneID: WireZoneID
    var atomic: Bool?
    var deleted: Bool?
}

/// Decodes a request body as JSON, turning every decoding problem into BAD_REQUEST naming the place.
enum RequestBody {
    static func decode<T: Decodable>(_ type: T.Type, from data: Data) throws(StratusError) -> T {
        guard !data.isEmpty else { throw StratusError(.badRequest, "The request body is empty; a JSON dictionary is required") }
        do {
            return try JSONDecoder().decode(T.self, from: data)
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
