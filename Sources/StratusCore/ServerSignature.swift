import Crypto
import Foundation

/// A server-to-server request signature (CloudKit's `SignatureV1`).
///
/// The client signs `date:base64(sha256(body)):subpath` with its P-256 private key (ECDSA over
/// SHA-256) and sends the key id, the date and the base64 DER signature in three headers. The
/// server finds the registered public key by id and checks the signature and the date's freshness.
/// The subpath is the URL's path, or the path with its query string exactly as sent (a JavaScript
/// client signs `…/users/caller?ckjsVersion=…`): both forms verify (`subpaths`).
public enum ServerSignature {
    /// The header naming the registered key.
    public static let keyIDHeader = "X-Apple-CloudKit-Request-KeyID"
    /// The header carrying the signing time, ISO 8601 in UTC (`2026-11-22T10:00:00Z`).
    public static let dateHeader = "X-Apple-CloudKit-Request-ISO8601Date"
    /// The header carrying the base64 signature.
    public static let signatureHeader = "X-Apple-CloudKit-Request-SignatureV1"
    /// How far (seconds) the signing time may be from the server's clock, either way.
    public static let maxClockSkew: Int64 = 600

    /// The longest query string (bytes, as received) a signed request may carry.
    public static let maxQueryBytes = 4096

    /// The subpaths a request's signature may have been made over: its path alone, and, when the
    /// request has a query string, the path, `?` and the query byte for byte as received (never
    /// decoded or re-encoded). A query longer than `maxQueryBytes` is refused.
    public static func subpaths(path: String, query: String?) throws(StratusError) -> [String] {
        guard let query else { return [path] }
        guard query.utf8.count <= maxQueryBytes else {
            throw StratusError(.authenticationFailed, "A signed request's query string may hold at most \(maxQueryBytes) bytes")
        }
        return [path, "\(path)?\(query)"]
    }

    /// The bytes that are signed.
    public static func message(date: String, body: some DataProtocol, subpath: String) -> Data {
        let bodyHash = Data(SHA256.hash(data: Data(body))).base64EncodedString()
        return Data("\(date):\(bodyHash):\(subpath)".utf8)
    }

    /// Signs a request: the base64 DER signature for the `SignatureV1` header.
    public static func sign(date: String, body: some DataProtocol, subpath: String, privateKey: P256.Signing.PrivateKey) throws -> String {
        try privateKey.signature(for: message(date: date, body: body, subpath: subpath)).derRepresentation.base64EncodedString()
    }

    /// Checks the signing time alone: well formed and within the allowed skew of `now`. It needs no
    /// body, so a stale request is refused before its body is read.
    public static func checkDate(_ date: String, now: Int64) throws(StratusError) {
        guard let signedAt = ISO8601Time.seconds(date) else {
            throw StratusError(.authenticationFailed, "\(dateHeader) must be an ISO 8601 UTC time such as 2026-01-31T12:00:00Z")
        }
        guard abs(now - signedAt) <= maxClockSkew else {
            throw StratusError(.authenticationFailed, "\(dateHeader) is more than \(maxClockSkew / 60) minutes from the server's time")
        }
    }

    /// Checks a signed request: the date is well formed and fresh, and the signature verifies.
    public static func verify(
        signature: String, date: String, body: some DataProtocol, subpath: String, publicKey: ServerPublicKey, now: Int64
    ) throws(StratusError) {
        try verify(signature: signature, date: date, body: body, subpaths: [subpath], publicKey: publicKey, now: now)
    }

    /// Checks a signed request whose signature may cover any of `subpaths` (see `subpaths(path:query:)`):
    /// the date is well formed and fresh, and the signature verifies over one of them.
    public static func verify(
        signature: String, date: String, body: some DataProtocol, subpaths: [String], publicKey: ServerPublicKey, now: Int64
    ) throws(StratusError) {
        try checkDate(date, now: now)
        guard let bytes = Data(base64Encoded: signature.trimmingCharacters(in: .whitespaces)) else {
            throw StratusError(.authenticationFailed, "\(signatureHeader) is not base64")
        }
        // DER is what clients send; the raw 64-byte form is accepted too.
        let parsed = (try? P256.Signing.ECDSASignature(derRepresentation: bytes)) ?? (try? P256.Signing.ECDSASignature(rawRepresentation: bytes))
        let bodyBytes = Data(body)
        guard let parsed, let key = try? P256.Signing.PublicKey(derRepresentation: publicKey.der),
              subpaths.contains(where: { key.isValidSignature(parsed, for: message(date: date, body: bodyBytes, subpath: $0)) }) else {
            throw StratusError(.authenticationFailed, "The request signature does not verify with the key \(keyIDHeader) names")
        }
    }
}

/// A registered server-to-server public key: its id is the hex SHA-256 of the key's DER form.
public struct ServerPublicKey: Sendable, Hashable {
    /// The DER (SubjectPublicKeyInfo) form, which is what is stored.
    public let der: Data

    /// Reads a PEM (`BEGIN PUBLIC KEY`) or a base64 DER public key.
    public init(text: String) throws(StratusError) {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        if let key = try? P256.Signing.PublicKey(pemRepresentation: trimmed) {
            self.der = key.derRepresentation
        } else if let der = Data(base64Encoded: trimmed), let key = try? P256.Signing.PublicKey(derRepresentation: der) {
            self.der = key.derRepresentation
        } else {
            throw StratusError(.badRequest, "not a P-256 public key in PEM or base64 DER form (make one with an EC prime256v1 key pair)")
        }
    }

    /// Wraps a stored DER form.
    public init(der: Data) throws(StratusError) {
        guard (try? P256.Signing.PublicKey(derRepresentation: der)) != nil else {
            throw StratusError(.internalError, "a stored server-to-server key is not a P-256 key")
        }
        self.der = der
    }

    /// The key id: 64 hex digits.
    public var keyID: String { SHA256.hash(data: der).map { String(format: "%02x", $0) }.joined() }
}

/// ISO 8601 times in UTC, parsed without a formatter (no locale, no shared state).
public enum ISO8601Time {
    /// Seconds since 1970 of `YYYY-MM-DDTHH:MM:SS[.fraction]Z`; nil for anything else.
    public static func seconds(_ text: String) -> Int64? {
        let bytes = Array(text.utf8)
        guard bytes.count >= 20, bytes.last == UInt8(ascii: "Z") else { return nil }
        func isDigits(_ range: Range<Int>) -> Bool {
            bytes[range].allSatisfy { $0 >= 48 && $0 <= 57 }
        }
        // Fields of at most four digits: their value always fits.
        func number(_ range: Range<Int>) -> Int64? {
            guard range.count <= 4, isDigits(range) else { return nil }
            return bytes[range].reduce(0) { $0 * 10 + Int64($1 - 48) }
        }
        let separators: [(Int, Character)] = [(4, "-"), (7, "-"), (10, "T"), (13, ":"), (16, ":")]
        guard separators.allSatisfy({ bytes[$0.0] == UInt8(ascii: $0.1.unicodeScalars.first!) }) else { return nil }
        guard let year = number(0..<4), let month = number(5..<7), let day = number(8..<10),
              let hour = number(11..<13), let minute = number(14..<16), let second = number(17..<19)
        else { return nil }
        if bytes.count > 20 {
            // Only a fraction may sit between the seconds and the zone; its digits are checked, never
            // summed (nineteen of them would overflow).
            guard bytes[19] == UInt8(ascii: "."), bytes.count > 21, isDigits(20..<(bytes.count - 1)) else { return nil }
        }
        guard (1...12).contains(month), (1...daysIn(month: month, year: year)).contains(day),
              hour < 24, minute < 60, second < 61
        else { return nil }
        return daysFromCivil(year: year, month: month, day: day) * 86_400 + hour * 3600 + minute * 60 + second
    }

    /// The text form of a time: `YYYY-MM-DDTHH:MM:SSZ`.
    public static func text(_ seconds: Int64) -> String {
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let rest = seconds - days * 86_400
        let (year, month, day) = civil(fromDays: days)
        return String(format: "%04lld-%02lld-%02lldT%02lld:%02lld:%02lldZ", year, month, day, rest / 3600, rest % 3600 / 60, rest % 60)
    }

    static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date.
    static func daysFromCivil(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    static func civil(fromDays days: Int64) -> (Int64, Int64, Int64) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}
