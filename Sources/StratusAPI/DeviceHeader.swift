import Hummingbird
import StratusCore

/// The device a write comes from (a Stratus extension): a client that names itself in
/// `X-Stratus-Device-ID` has its writes stamped with it — the records' `created`/`modified`
/// `deviceID` and the events' causation — so a device can tell its own changes from others'. A
/// write without the header is stamped `_stratus`, as before.
enum DeviceHeader {
    static let name = "X-Stratus-Device-ID"
    /// The longest device id taken.
    static let maxLength = 64

    /// The request's device id; `BAD_REQUEST` for one that is empty, too long, or not letters,
    /// digits, `-`, `_` and `.`.
    static func deviceID(_ request: Request) throws(StratusError) -> String? {
        guard let value = request.headers[.init(name)!] else { return nil }
        return try parse(value)
    }

    static func parse(_ value: String) throws(StratusError) -> String {
        let allowed = value.utf8.allSatisfy { byte in
            (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || byte == 0x2D || byte == 0x5F || byte == 0x2E
        }
        guard !value.isEmpty, value.utf8.count <= maxLength, allowed else {
            throw StratusError(.badRequest, "X-Stratus-Device-ID must be 1 to \(maxLength) letters, digits, '-', '_' or '.'; got '\(ClientText.excerpt(value))'")
        }
        return value
    }
}
