/// Checks the text a client sends before it can reach SQL or the event log.
///
/// PostgreSQL's `text` and `jsonb` cannot hold U+0000: a NUL that got through would surface as a
/// database error (a 500, or an event no worker can apply) instead of the client's BAD_REQUEST.
/// Every string a client sends passes here, and the error names the place it was sent.
public enum ClientText {
    /// Refuses a NUL in `text`; `place` names where the client sent it (e.g. `Field 'title'`).
    public static func check(_ text: String, _ place: @autoclosure () -> String) throws(StratusError) {
        if text.utf8.contains(0) { throw nul(place()) }
    }

    /// Refuses a NUL in any string or member name of a JSON value.
    public static func check(_ json: JSONValue, _ place: @autoclosure () -> String) throws(StratusError) {
        switch json {
        case .string(let text):
            try check(text, place())
        case .array(let elements):
            for element in elements { try check(element, place()) }
        case .object(let members):
            for (name, value) in members {
                try check(name, place())
                try check(value, place())
            }
        case .null, .bool, .int, .double:
            break
        }
    }

    /// Checks a list of names such as `desiredKeys`: at most `limit` entries, none with a NUL.
    public static func check(names: [String]?, _ place: String, limit: Int) throws(StratusError) {
        guard let names else { return }
        guard names.count <= limit else {
            throw StratusError(.limitExceeded, "\(place) has \(names.count) entries; at most \(limit) are allowed")
        }
        for (index, name) in names.enumerated() { try check(name, "\(place)[\(index)]") }
    }

    /// Client text as an error's reason quotes it: at most its first 255 characters, so a reason
    /// never repeats whatever length a client sent.
    public static func excerpt(_ text: some StringProtocol) -> Substring {
        Substring(text.prefix(255))
    }

    private static func nul(_ place: String) -> StratusError {
        StratusError(.badRequest, "\(place) must not contain the NUL character (U+0000)")
    }
}
