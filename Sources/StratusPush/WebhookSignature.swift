import Crypto
import Foundation

/// The `X-Stratus-Signature` scheme: `v1=` and the lower-case hex HMAC-SHA256 of
/// `"<timestamp>.<body>"` under the webhook's secret. Receivers verify with `verify`.
public enum WebhookSignature {
    /// The scheme's version prefix.
    public static let version = "v1"

    /// The header value for `body` sent at `timestamp` (unix seconds).
    public static func sign(body: Data, timestamp: Int64, secret: Data) -> String {
        let code = HMAC<SHA256>.authenticationCode(for: message(body: body, timestamp: timestamp), using: SymmetricKey(data: secret))
        return "\(version)=" + Hex.encode(code)
    }

    /// Whether `signature` (a header value, possibly several comma-separated `v1=` entries, as
    /// during a secret's rotation) signs `body` at `timestamp` with `secret`, and the timestamp is
    /// within `tolerance` of `now` either way. The comparison takes the same time wherever the
    /// codes differ.
    public static func verify(
        body: Data, timestamp: Int64, secret: Data, signature: String,
        tolerance: Duration = .seconds(300), now: Date = Date()
    ) -> Bool {
        let age = abs(now.timeIntervalSince1970 - Double(timestamp))
        guard age <= tolerance / .seconds(1) else { return false }
        let key = SymmetricKey(data: secret)
        let signed = message(body: body, timestamp: timestamp)
        var matched = false
        for entry in signature.split(separator: ",") {
            let parts = entry.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1)
            guard parts.count == 2, parts[0] == version, let code = Hex.decode(parts[1]), code.count == SHA256.byteCount else { continue }
            // Every entry is checked, so the time taken does not tell which one matched.
            if HMAC<SHA256>.isValidAuthenticationCode(code, authenticating: signed, using: key) { matched = true }
        }
        return matched
    }

    /// The signed bytes: the timestamp's decimal digits, a dot, then the body unchanged.
    static func message(body: Data, timestamp: Int64) -> Data {
        var message = Data("\(timestamp).".utf8)
        message.append(body)
        return message
    }
}

/// Lower-case hexadecimal text for bytes and back.
enum Hex {
    private static let digits = Array("0123456789abcdef".utf8)

    static func encode<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        var text = [UInt8]()
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    static func decode<Text: StringProtocol>(_ text: Text) -> [UInt8]? {
        let utf8 = Array(text.utf8)
        guard utf8.count.isMultiple(of: 2) else { return nil }
        var bytes = [UInt8]()
        bytes.reserveCapacity(utf8.count / 2)
        var index = 0
        while index < utf8.count {
            guard let high = value(utf8[index]), let low = value(utf8[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return bytes
    }

    static func isHex(_ text: String) -> Bool { text.utf8.allSatisfy { value($0) != nil } }

    private static func value(_ character: UInt8) -> UInt8? {
        switch character {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): character - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): character - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): character - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
