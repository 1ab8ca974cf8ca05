/// Records that expire (a Stratus extension, the TTL CloudKit gives ephemeral records): what a
/// client may send on save, and how it is checked. A save sends at most one of `expirationDate`
/// (milliseconds since 1970) and `timeToLive` (seconds from now); null in either clears it.
public enum RecordExpiration {
    /// The longest a record may be given to live: ten years, in seconds.
    public static let maxTimeToLive: Int64 = 10 * 365 * 86_400
    /// How far in the past an `expirationDate` may lie, in milliseconds: the clock skew between a
    /// client and the server. Such a record is saved already expired; anything older is a mistake.
    public static let pastTolerance: Int64 = 60_000

    /// The expiration a save asks for: nil when it sends neither key (the record keeps its own, or a
    /// new record gets its zone's default), .some(nil) to clear it, else the date in milliseconds.
    /// `expirationDate` and `timeToLive` are each JSON as sent (a key sent as null is `.some(.null)`).
    public static func resolve(expirationDate: JSONValue?, timeToLive: JSONValue?, now: Int64) throws(StratusError) -> Int64?? {
        switch (expirationDate, timeToLive) {
        case (nil, nil):
            return nil
        case (.some, .some):
            throw StratusError(.badRequest, "Send either record.expirationDate or record.timeToLive, not both")
        case (.some(let date), nil):
            if date == .null { return .some(nil) }
            guard let milliseconds = wholeNumber(date) else {
                throw StratusError(.badRequest, "record.expirationDate must be a whole number of milliseconds since 1970, or null")
            }
            guard milliseconds >= now - pastTolerance else {
                throw StratusError(.badRequest, "record.expirationDate \(milliseconds) is in the past (the server's time is \(now) ms)")
            }
            guard milliseconds <= now + maxTimeToLive * 1000 else {
                throw StratusError(.badRequest, "record.expirationDate \(milliseconds) is more than \(maxTimeToLive) seconds (ten years) away")
            }
            return .some(milliseconds)
        case (nil, .some(let seconds)):
            if seconds == .null { return .some(nil) }
            let ttl = try Self.timeToLive(seconds, "record.timeToLive")
            return .some(now + ttl * 1000)
        }
    }

    /// Checks a time to live in seconds (a record's, or a zone's default): a whole number from 1 to
    /// `maxTimeToLive`.
    public static func timeToLive(_ value: JSONValue, _ place: String) throws(StratusError) -> Int64 {
        guard let seconds = wholeNumber(value), (1...maxTimeToLive).contains(seconds) else {
            throw StratusError(.badRequest, "\(place) must be a whole number of seconds from 1 to \(maxTimeToLive) (ten years), or null")
        }
        return seconds
    }

    /// A JSON number that is a whole number within 64 bits (checked before it is converted).
    private static func wholeNumber(_ value: JSONValue) -> Int64? {
        switch value {
        case .int(let number): number
        case .double(let number) where number.rounded() == number: Int64(exactly: number)
        default: nil
        }
    }
}
