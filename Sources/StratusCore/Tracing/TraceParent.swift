/// The W3C Trace Context `traceparent` value an event carries (`Causation.traceParent`):
/// `00-<trace id: 32 hex>-<parent span id: 16 hex>-<flags: 2 hex>`. Only this form is kept: the
/// value comes back from the event log and the broker, and a malformed one must never reach a tracer.
public enum TraceParent {
    /// The length of a version-00 value.
    public static let length = 55

    /// `value` when it is a well-formed version-00 `traceparent` with a trace id and a span id that
    /// are not all zeros (the standard's invalid ids); else nil.
    public static func validated(_ value: String) -> String? {
        let bytes = Array(value.utf8)
        guard bytes.count == length, bytes[2] == UInt8(ascii: "-"), bytes[35] == UInt8(ascii: "-"), bytes[52] == UInt8(ascii: "-"),
              bytes[0] == UInt8(ascii: "0"), bytes[1] == UInt8(ascii: "0")
        else { return nil }
        let traceID = bytes[3..<35], spanID = bytes[36..<52], flags = bytes[53..<55]
        for part in [traceID, spanID, flags] where !part.allSatisfy(isLowercaseHex) { return nil }
        guard traceID.contains(where: { $0 != UInt8(ascii: "0") }), spanID.contains(where: { $0 != UInt8(ascii: "0") }) else { return nil }
        return value
    }

    /// The trace id of a well-formed value (its 32 hex digits).
    public static func traceID(of value: String) -> Substring? {
        guard validated(value) != nil else { return nil }
        return value.dropFirst(3).prefix(32)
    }

    private static func isLowercaseHex(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
    }
}
