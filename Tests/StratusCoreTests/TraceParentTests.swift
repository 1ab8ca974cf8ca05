import Foundation
@testable import StratusCore
import XCTest

/// The trace context an event carries (`Causation.traceParent`): kept through every encoding the
/// pipeline uses (the event log's causation column, the relay's message, the workers' two readers),
/// absent from an untraced event's bytes, and dropped when malformed.
final class TraceParentTests: XCTestCase {
    static let traced = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    func envelope(_ causation: Causation) -> EventEnvelope {
        let database = DatabaseID(container: "iCloud.a", environment: .development, scope: .private, owner: "_u")
        return EventEnvelope(id: 9, zoneKey: ZoneKey(database: database, zoneName: "A"), zoneSequence: 2, type: .zoneCreated,
                             schemaVersion: 1, payload: Data(#"{"x":1}"#.utf8), causation: causation, createdAt: 3)
    }

    func testTheTraceParentRoundTripsThroughTheEventEncodings() throws {
        let causation = Causation(requestID: "r", userRecordName: "_u", deviceID: "d", traceParent: Self.traced)
        XCTAssertEqual(causation.traceParent, Self.traced)
        // The causation column (Codable), as the event log writes and reads it.
        let column = EventCoding.encode(causation)
        XCTAssertTrue(String(decoding: column, as: UTF8.self).contains(#""traceParent":"\#(Self.traced)""#))
        XCTAssertEqual(try EventCoding.decoder.decode(Causation.self, from: column), causation)
        // The relay's message, read by the workers' fast reader and by the whole-message decoder.
        let envelope = envelope(causation)
        let message = [UInt8](EventCoding.encodeEnvelope(envelope))
        XCTAssertEqual(try EventCoding.decodeEnvelope(message), envelope)
        XCTAssertEqual(try EventCoding.decodeEnvelope(message).causation.traceParent, Self.traced)
        var whole = try EventCoding.decoder.decode(EventEnvelope.self, from: Data(message))
        whole.payload = envelope.payload
        XCTAssertEqual(whole, envelope)
        XCTAssertEqual(try EventCoding.decoder.decode(EventEnvelope.self, from: EventCoding.encode(envelope)).causation.traceParent, Self.traced)
    }

    func testAnUntracedEventCarriesNoTraceKey() throws {
        let envelope = envelope(Causation(requestID: "r"))
        let message = EventCoding.encodeEnvelope(envelope)
        XCTAssertFalse(String(decoding: message, as: UTF8.self).contains("traceParent"))
        XCTAssertFalse(String(decoding: EventCoding.encode(envelope.causation), as: UTF8.self).contains("traceParent"))
        XCTAssertNil(try EventCoding.decodeEnvelope([UInt8](message)).causation.traceParent)
    }

    func testAMalformedTraceParentIsDroppedNeverAnError() throws {
        let bad = [
            "", "00", String(repeating: "a", count: 55), "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            String(repeating: "0", count: 100_000),
        ]
        for value in bad {
            XCTAssertNil(TraceParent.validated(value), value)
            XCTAssertNil(Causation(requestID: "r", traceParent: value).traceParent, value)
            let column = #"{"requestID":"r","traceParent":"\#(value)"}"#
            XCTAssertNil(try EventCoding.decoder.decode(Causation.self, from: Data(column.utf8)).traceParent, value)
            let message = #"{"causation":{"requestID":"r","traceParent":"\#(value)"},"createdAt":3,"format":2,"id":9,"payload":{},"schemaVersion":1,"type":"zone.created","zoneKey":{"rawValue":"k"}}"#
            XCTAssertNil(try EventCoding.decodeEnvelope(Array(message.utf8)).causation.traceParent, value)
        }
        // Of another type: ignored, the event still reads.
        let numeric = #"{"causation":{"requestID":"r","traceParent":5},"createdAt":3,"format":2,"id":9,"payload":{},"schemaVersion":1,"type":"zone.created","zoneKey":{"rawValue":"k"}}"#
        XCTAssertEqual(try EventCoding.decodeEnvelope(Array(numeric.utf8)).causation, Causation(requestID: "r"))
        XCTAssertEqual(TraceParent.traceID(of: Self.traced), "4bf92f3577b34da6a3ce929d0e0e4736")
    }

    func testTheWritePathCountsTheTraceContextAnEventCarries() throws {
        let database = DatabaseID(container: "iCloud.a", environment: .development, scope: .private, owner: "_u")
        let payload = ZoneCreated(database: database, zoneID: ZoneID(zoneName: "A", ownerRecordName: "_u"), incarnation: UUID())
        let untraced = NewEvent(zoneKey: ZoneKey(database: database, zoneName: "A"), zoneSequence: 1, payload: payload, causation: Causation(requestID: "r"))
        var traced = untraced
        traced.causation.traceParent = Self.traced
        XCTAssertGreaterThanOrEqual(EventCoding.envelopeSize(of: traced) - EventCoding.envelopeSize(of: untraced), #","traceParent":""#.utf8.count + TraceParent.length,
                                    "what the trace context adds is counted")
        let message = EventCoding.encodeEnvelope(EventEnvelope(
            id: Int64.max, zoneKey: traced.zoneKey, zoneSequence: 1, type: traced.type, schemaVersion: traced.schemaVersion,
            payload: traced.payload, causation: traced.causation, createdAt: Int64.max))
        XCTAssertGreaterThanOrEqual(EventCoding.envelopeSize(of: traced), message.count, "the traced message is within what was counted")
    }
}
