import Crypto
import Foundation

/// AWS Signature Version 4 for S3 requests: the canonical request, the string to sign and the
/// signing key, as AWS documents them. Pure: the caller supplies the date.
public struct S3Signer: Sendable {
    let accessKeyID: String
    let secretAccessKey: String
    let region: String
    let service = "s3"

    /// Creates a signer for one region's credentials.
    public init(accessKeyID: String, secretAccessKey: String, region: String) {
        self.accessKeyID = accessKeyID
        self.secretAccessKey = secretAccessKey
        self.region = region
    }

    /// The headers to add to a request: `x-amz-date`, `x-amz-content-sha256` and `Authorization`.
    /// `host` is the Host header's value (with the port when it is not the scheme's default),
    /// `path` the request path as sent (already percent-encoded), `query` its items unencoded,
    /// `headers` any further headers to sign (lower-case names).
    public func sign(
        method: String, host: String, path: String, query: [(String, String)], headers: [String: String] = [:], payloadHash: String, date: Date
    ) -> [(String, String)] {
        let (amzDate, day) = Self.timestamps(date)
        var signed = headers.reduce(into: [String: String]()) { $0[$1.key.lowercased()] = $1.value.trimmingCharacters(in: .whitespaces) }
        signed["host"] = host
        signed["x-amz-date"] = amzDate
        signed["x-amz-content-sha256"] = payloadHash
        let names = signed.keys.sorted()
        let encoded: [(String, String)] = query.map { (Self.encode($0.0), Self.encode($0.1)) }
        let sorted = encoded.sorted { (a: (String, String), b: (String, String)) -> Bool in a.0 == b.0 ? a.1 < b.1 : a.0 < b.0 }
        let canonicalQuery: String = sorted.map { "\($0.0)=\($0.1)" }.joined(separator: "&")
        var canonicalHeaders = ""
        for name in names { canonicalHeaders += "\(name):\(signed[name]!)\n" }
        let canonicalPath: String = path.isEmpty ? "/" : path
        let lines: [String] = [method, canonicalPath, canonicalQuery, canonicalHeaders, names.joined(separator: ";"), payloadHash]
        let canonicalRequest = lines.joined(separator: "\n")
        let scope = "\(day)/\(region)/\(service)/aws4_request"
        let stringToSign = ["AWS4-HMAC-SHA256", amzDate, scope, Self.hex(SHA256.hash(data: Data(canonicalRequest.utf8)))].joined(separator: "\n")
        var key = SymmetricKey(data: Data("AWS4\(secretAccessKey)".utf8))
        for part in [day, region, service, "aws4_request"] {
            key = SymmetricKey(data: Data(HMAC<SHA256>.authenticationCode(for: Data(part.utf8), using: key)))
        }
        let signature = Self.hex(HMAC<SHA256>.authenticationCode(for: Data(stringToSign.utf8), using: key))
        let authorization = "AWS4-HMAC-SHA256 Credential=\(accessKeyID)/\(scope), SignedHeaders=\(names.joined(separator: ";")), Signature=\(signature)"
        return [("x-amz-date", amzDate), ("x-amz-content-sha256", payloadHash), ("Authorization", authorization)]
    }

    /// The hex SHA-256 of a payload, as `x-amz-content-sha256` carries it.
    public static func payloadHash(_ bytes: some DataProtocol) -> String {
        hex(SHA256.hash(data: bytes))
    }

    /// The hash of an empty payload.
    public static let emptyPayloadHash = payloadHash(Data())

    /// Percent-encodes everything but the unreserved characters (`A-Z a-z 0-9 - _ . ~`), as SigV4 wants;
    /// `/` too unless `keepSlash`.
    public static func encode(_ text: String, keepSlash: Bool = false) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            case UInt8(ascii: "/") where keepSlash:
                out.append("/")
            default:
                out += String(format: "%%%02X", byte)
            }
        }
        return out
    }

    static func timestamps(_ date: Date) -> (amzDate: String, day: String) {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let c = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
        let day = String(format: "%04d%02d%02d", c.year!, c.month!, c.day!)
        return (day + String(format: "T%02d%02d%02dZ", c.hour!, c.minute!, c.second!), day)
    }

    static func hex<D: Sequence>(_ digest: D) -> String where D.Element == UInt8 {
        digest.map { String(format: "%02x", $0) }.joined()
    }
}

extension S3Signer: CustomStringConvertible {
    /// Names the key id and region, never the secret.
    public var description: String { "S3Signer(accessKeyID: \(accessKeyID), region: \(region), secret: redacted)" }
}
