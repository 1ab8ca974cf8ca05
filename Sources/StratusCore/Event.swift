import Foundation

/// The kind of an event in the event log, e.g. `zone.created`. Open for extension.
public struct EventType: Sendable, Hashable, Codable, CustomStringConvertible, ExpressibleByStringLiteral {
    /// The wire name.
    public var rawValue: String
    /// Creates an event type.
    public init(_ rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { rawValue = value }
    public init(from decoder: any Decoder) throws { rawValue = try decoder.singleValueContainer().decode(String.self) }
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
    public var description: String { rawValue }

    /// A custom zone was created (or re-created with a new incarnation).
    public static let zoneCreated: EventType = "zone.created"
    /// A live custom zone's settings changed (its default time to live).
    public static let zoneUpdated: EventType = "zone.updated"
    /// A custom zone was deleted with everything in it.
    public static let zoneDeleted: EventType = "zone.deleted"
}

/// Who and what caused an event: carried from the request into every event it appends.
public struct Causation: Sendable, Hashable, Codable {
    /// The request id the API assigned (also in its logs and response headers).
    public var requestID: String
    /// The acting user's record name, if any.
    public var userRecordName: String?
    /// The device id the client sent, if any.
    public var deviceID: String?
    /// The trace the event continues, as a W3C `traceparent` (`TraceParent`): set when the event is
    /// appended under a traced request or apply, so the relay's and the workers' spans join its trace.
    /// Only a well-formed value is kept.
    public var traceParent: String? {
        get { _traceParent }
        set { _traceParent = newValue.flatMap(TraceParent.validated) }
    }
    private var _traceParent: String?

    /// Creates a causation.
    public init(requestID: String, userRecordName: String? = nil, deviceID: String? = nil, traceParent: String? = nil) {
        self.requestID = requestID
        self.userRecordName = userRecordName
        self.deviceID = deviceID
        self.traceParent = traceParent
    }

    enum CodingKeys: String, CodingKey {
        case requestID, userRecordName, deviceID, traceParent
    }

    /// Reads a causation; a `traceParent` that is not well formed is dropped, never trusted.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            requestID: try container.decode(String.self, forKey: .requestID),
            userRecordName: try container.decodeIfPresent(String.self, forKey: .userRecordName),
            deviceID: try container.decodeIfPresent(String.self, forKey: .deviceID),
            traceParent: try? container.decodeIfPresent(String.self, forKey: .traceParent))
    }

    /// Writes the members that are set (no `traceParent` key for an untraced event).
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(requestID, forKey: .requestID)
        try container.encodeIfPresent(userRecordName, forKey: .userRecordName)
        try container.encodeIfPresent(deviceID, forKey: .deviceID)
        try container.encodeIfPresent(traceParent, forKey: .traceParent)
    }
}

/// An event about to be appended: everything but what the event log assigns (id, time).
public struct NewEvent: Sendable, Hashable {
    /// The zone the event belongs to; also its Kafka key.
    public var zoneKey: ZoneKey
    /// The zone's change counter value this event was written at; nil for default zones.
    public var zoneSequence: Int64?
    /// What happened.
    public var type: EventType
    /// The payload's schema version, so old events stay readable when payloads evolve.
    public var schemaVersion: Int
    /// The payload as JSON.
    public var payload: Data
    /// Who caused it.
    public var causation: Causation

    /// Creates an event from a typed payload.
    public init<Payload: EventPayload>(zoneKey: ZoneKey, zoneSequence: Int64?, payload: Payload, causation: Causation) {
        self.init(zoneKey: zoneKey, zoneSequence: zoneSequence, type: Payload.eventType, schemaVersion: Payload.schemaVersion,
                  payload: EventCoding.encode(payload), causation: causation)
    }

    /// Creates an event from a payload already encoded.
    init(zoneKey: ZoneKey, zoneSequence: Int64?, type: EventType, schemaVersion: Int, payload: Data, causation: Causation) {
        self.zoneKey = zoneKey
        self.zoneSequence = zoneSequence
        self.type = type
        self.schemaVersion = schemaVersion
        self.payload = payload
        self.causation = causation
    }
}

/// An immutable event as stored in the event log and published to Kafka.
public struct EventEnvelope: Sendable, Hashable, Codable {
    /// The global, monotonically assigned id (not commit-ordered across zones).
    public var id: Int64
    /// The zone the event belongs to.
    public var zoneKey: ZoneKey
    /// The zone's change counter value, for custom zones: consecutive per zone key.
    public var zoneSequence: Int64?
    /// What happened.
    public var type: EventType
    /// The payload's schema version.
    public var schemaVersion: Int
    /// The payload as JSON.
    public var payload: Data
    /// Who caused it.
    public var causation: Causation
    /// When the event was appended, in milliseconds since 1970.
    public var createdAt: Int64

    /// Creates an envelope.
    public init(id: Int64, zoneKey: ZoneKey, zoneSequence: Int64?, type: EventType, schemaVersion: Int, payload: Data, causation: Causation, createdAt: Int64) {
        self.id = id
        self.zoneKey = zoneKey
        self.zoneSequence = zoneSequence
        self.type = type
        self.schemaVersion = schemaVersion
        self.payload = payload
        self.causation = causation
        self.createdAt = createdAt
    }

    enum CodingKeys: String, CodingKey {
        case format, id, zoneKey, zoneSequence, type, schemaVersion, payload, causation, createdAt
    }

    /// Reads both envelope formats: the current one, whose payload is a JSON object, and the first,
    /// whose payload was the base64 text of the JSON bytes (a topic written by an older relay still replays).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(Int64.self, forKey: .id)
        zoneKey = try container.decode(ZoneKey.self, forKey: .zoneKey)
        zoneSequence = try container.decodeIfPresent(Int64.self, forKey: .zoneSequence)
        type = try container.decode(EventType.self, forKey: .type)
        schemaVersion = try container.decode(Int.self, forKey: .schemaVersion)
        causation = try container.decode(Causation.self, forKey: .causation)
        createdAt = try container.decode(Int64.self, forKey: .createdAt)
        switch try container.decode(JSONValue.self, forKey: .payload) {
        case .string(let base64):
            guard let data = Data(base64Encoded: base64) else {
                throw DecodingError.dataCorruptedError(forKey: .payload, in: container, debugDescription: "payload is neither JSON nor base64")
            }
            payload = data
        case let object:
            payload = EventCoding.encode(object)
        }
    }

    /// Writes the current format: the payload as JSON inside the envelope.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(EventCoding.envelopeFormat, forKey: .format)
        try container.encode(id, forKey: .id)
        try container.encode(zoneKey, forKey: .zoneKey)
        try container.encodeIfPresent(zoneSequence, forKey: .zoneSequence)
        try container.encode(type, forKey: .type)
        try container.encode(schemaVersion, forKey: .schemaVersion)
        try container.encode(causation, forKey: .causation)
        try container.encode(createdAt, forKey: .createdAt)
        let object = (try? JSONDecoder().decode(JSONValue.self, from: payload)) ?? .object([:])
        try container.encode(object, forKey: .payload)
    }

    /// Decodes the payload as the given type; fails if the event is of another type.
    public func decode<Payload: EventPayload>(_: Payload.Type) throws -> Payload {
        guard type == Payload.eventType else {
            throw EventDecodingError(reason: "event \(id) is \(type), not \(Payload.eventType)")
        }
        do {
            return try EventCoding.decoder.decode(Payload.self, from: payload)
        } catch {
            // A payload that does not decode never will: a poison event, not a passing failure.
            throw EventDecodingError(reason: "event \(id) (\(type)) has a payload that does not decode: \(error)")
        }
    }
}

/// A typed event payload.
public protocol EventPayload: Codable, Sendable, Hashable {
    /// The event type this payload belongs to.
    static var eventType: EventType { get }
    /// The current schema version of this payload.
    static var schemaVersion: Int { get }
}

/// An event that cannot be read: a poison event for a worker.
public struct EventDecodingError: Error, Sendable, CustomStringConvertible {
    /// What is wrong.
    public var reason: String
    /// Creates the error.
    public init(reason: String) { self.reason = reason }
    public var description: String { reason }
}

/// The JSON coding of events: one place, so the API, the relay and the workers agree byte for byte.
public enum EventCoding {
    /// The encoder for payloads and envelopes (sorted keys for stable output).
    public static var encoder: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return encoder
    }

    /// The decoder for payloads and envelopes.
    public static var decoder: JSONDecoder { JSONDecoder() }

    /// The envelope format the relay writes (`format` in every message): 2 carries the payload as
    /// JSON; messages without `format` are the first format, with a base64 payload.
    public static let envelopeFormat = 2

    /// An envelope as the relay publishes it: the members `encode(envelope)` writes, in its order,
    /// written directly (the relay publishes every event), with the payload (already JSON, e.g. as
    /// PostgreSQL returned it) spliced in rather than parsed and encoded again.
    public static func encodeEnvelope(_ envelope: EventEnvelope) -> Data {
        var causation: [String: JSONValue] = ["requestID": .string(envelope.causation.requestID)]
        if let user = envelope.causation.userRecordName { causation["userRecordName"] = .string(user) }
        if let device = envelope.causation.deviceID { causation["deviceID"] = .string(device) }
        if let trace = envelope.causation.traceParent { causation["traceParent"] = .string(trace) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(envelope.payload.count + 256)
        bytes += #"{"causation":"#.utf8
        JSONValue.object(causation).write(into: &bytes)
        bytes += #","createdAt":\#(envelope.createdAt),"format":\#(envelopeFormat),"id":\#(envelope.id),"payload":"#.utf8
        bytes += envelope.payload
        bytes += #","schemaVersion":\#(envelope.schemaVersion),"type":"#.utf8
        JSONValue.string(envelope.type.rawValue).write(into: &bytes)
        bytes += #","zoneKey":{"rawValue":"#.utf8
        JSONValue.string(envelope.zoneKey.rawValue).write(into: &bytes)
        bytes += "}".utf8
        if let sequence = envelope.zoneSequence { bytes += #","zoneSequence":\#(sequence)"#.utf8 }
        bytes += "}".utf8
        return Data(bytes)
    }

    /// Reads a message as the relay writes it (`encodeEnvelope`): the payload's bytes are cut out as
    /// they are (decoding the payload into a tree and encoding it again cost a worker a fifth of its
    /// time), and the small rest is read by `JSONParser`. Messages of the first format (a base64
    /// payload) and anything unusual are decoded whole through `Codable`.
    public static func decodeEnvelope(_ bytes: [UInt8]) throws -> EventEnvelope {
        guard let payload = JSONScan.member("payload", in: bytes), bytes[payload.lowerBound] == UInt8(ascii: "{") else {
            return try decoder.decode(EventEnvelope.self, from: Data(bytes))
        }
        var header = Array(bytes[..<payload.lowerBound])
        header += "{}".utf8
        header += bytes[payload.upperBound...]
        if let json = try? JSONParser.parse(header), case .object(let members) = json,
           var envelope = EventEnvelope(header: members) {
            envelope.payload = Data(bytes[payload])
            return envelope
        }
        var envelope = try decoder.decode(EventEnvelope.self, from: Data(header))
        envelope.payload = Data(bytes[payload])
        return envelope
    }

    /// The size of the message an event becomes once the event log has given it an id and a time
    /// (both counted at their widest), with its key (the zone key): what the write path checks
    /// against the broker's message limit. The relay's own writer (`encodeEnvelope`) counts it, with
    /// the payload left out and added by its length (every save's event is counted, and encoding its
    /// envelope through `Codable` cost the API a tenth of its CPU in a batch of saves).
    public static func envelopeSize(of event: NewEvent) -> Int {
        let envelope = EventEnvelope(
            id: Int64.max, zoneKey: event.zoneKey, zoneSequence: event.zoneSequence, type: event.type,
            schemaVersion: event.schemaVersion, payload: Data(), causation: event.causation, createdAt: Int64.max)
        return encodeEnvelope(envelope).count + event.payload.count + event.zoneKey.rawValue.utf8.count
    }

    /// Encodes a value that cannot fail to encode (plain Codable structs). What the store writes on
    /// every save (fields, saves, deletes: `EncoderFormWritable`) is written directly, in the same bytes.
    public static func encode<T: Encodable>(_ value: T) -> Data {
        if let direct = value as? any EncoderFormWritable {
            var bytes: [UInt8] = []
            bytes.reserveCapacity(512)
            if direct.writeEncoderForm(into: &bytes) { return Data(bytes) }
        }
        // Event payloads are plain structs of strings and numbers; encoding them cannot fail.
        return (try? encoder.encode(value)) ?? Data("{}".utf8)
    }
}

extension EventEnvelope {
    /// An envelope's members but its payload (empty), as `Codable` reads them; nil when one is
    /// missing or of another type.
    init?(header members: [String: JSONValue]) {
        let int = JSONValue.integer(of:), string = JSONValue.text(of:), optionalString = JSONValue.optionalString
        guard let sequence = JSONValue.optionalInt(members["zoneSequence"]), let id = int(members["id"]),
              case .object(let key)? = members["zoneKey"], let zoneKey = string(key["rawValue"]),
              let type = string(members["type"]), let version = int(members["schemaVersion"]), let schemaVersion = Int(exactly: version),
              let createdAt = int(members["createdAt"]), case .object(let cause)? = members["causation"],
              let requestID = string(cause["requestID"]), let user = optionalString(cause["userRecordName"]),
              let device = optionalString(cause["deviceID"])
        else { return nil }
        // A trace context of another type is ignored like a malformed one: it only joins a trace.
        let trace = optionalString(cause["traceParent"]) ?? nil
        self.init(
            id: id, zoneKey: ZoneKey(rawValue: zoneKey), zoneSequence: sequence, type: EventType(type), schemaVersion: schemaVersion,
            payload: Data(), causation: Causation(requestID: requestID, userRecordName: user, deviceID: device, traceParent: trace),
            createdAt: createdAt)
    }

    /// Whether the payload's bytes contain `text` anywhere (a key, a type name, or by chance a value).
    /// A projection uses it to pass over an event it has no use for without decoding it: absent bytes
    /// prove absence, while present ones prove nothing, so the projection then decodes as usual.
    public func payloadMentions(_ bytes: Data) -> Bool {
        payload.range(of: bytes) != nil
    }
}

extension RecordSaved {
    /// Whether an event of this type may be one whose record was saved again (it names the previous
    /// change tag) or carries an expiration: false proves a created record without one (the payload's
    /// keys are written only when set), which the expiry index and the asset counts leave alone.
    public static func mayConcernExpiry(_ event: EventEnvelope) -> Bool {
        event.payloadMentions(Marker.previousChangeTag) || event.payloadMentions(Marker.expirationDate)
    }

    /// Whether an event of this type may be one whose record was saved again or holds an asset: false
    /// proves a created record without assets.
    public static func mayConcernAssets(_ event: EventEnvelope) -> Bool {
        event.payloadMentions(Marker.previousChangeTag) || event.payloadMentions(Marker.asset)
    }

    /// The bytes those checks look for, made once (they run for every saved record).
    private enum Marker {
        static let previousChangeTag = Data(#""previousChangeTag""#.utf8)
        static let expirationDate = Data(#""expirationDate""#.utf8)
        static let asset = Data(#""ASSETID"#.utf8)
    }
}
