import Foundation

/// Which webhook endpoints Stratus will call: https with a host, no credentials in the URL, at
/// most 2,048 characters; plain http only to a loopback host and only where allowed (tests and
/// local stacks).
public enum WebhookURLPolicy {
    /// The longest URL accepted, in UTF-8 bytes.
    public static let maximumLength = 2048

    /// The parsed URL when `text` is acceptable, else an error that says why.
    public static func check(_ text: String, allowInsecureLoopback: Bool) throws(WebhookURLError) -> URL {
        guard text.utf8.count <= maximumLength else {
            throw WebhookURLError(code: .tooLong, message: "the URL is \(text.utf8.count) bytes long; at most \(maximumLength) are allowed")
        }
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased(), let url = components.url else {
            throw WebhookURLError(code: .malformed, message: "the text is not an absolute URL")
        }
        guard components.user == nil, components.password == nil else {
            throw WebhookURLError(code: .userInfo, message: "the URL carries a user name or password; put credentials in the signing secret instead")
        }
        guard let host = components.host, !host.isEmpty else {
            throw WebhookURLError(code: .missingHost, message: "the URL has no host")
        }
        switch scheme {
        case "https":
            return url
        case "http" where allowInsecureLoopback && isLoopback(host):
            return url
        case "http":
            throw WebhookURLError(
                code: .insecureScheme,
                message: allowInsecureLoopback ? "http is allowed only to a loopback host; use https" : "the URL must use https")
        default:
            throw WebhookURLError(code: .insecureScheme, message: "the scheme \(scheme) is not allowed; use https")
        }
    }

    /// Whether `host` names this machine: `localhost`, 127.0.0.0/8 or ::1.
    static func isLoopback(_ host: String) -> Bool {
        let host = host.lowercased().trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        if host == "localhost" || host.hasSuffix(".localhost") || host == "::1" || host == "0:0:0:0:0:0:0:1" { return true }
        let octets = host.split(separator: ".", omittingEmptySubsequences: false)
        guard octets.count == 4, octets[0] == "127" else { return false }
        return octets.allSatisfy { octet in octet.count <= 3 && UInt8(octet) != nil }
    }
}

/// Why `WebhookURLPolicy` refused a URL.
public struct WebhookURLError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The kind of refusal; a struct, so new kinds never break a caller's `switch`.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        /// The code's name.
        public let name: String
        /// Longer than `WebhookURLPolicy.maximumLength`.
        public static let tooLong = Code(name: "tooLong")
        /// Not an absolute URL.
        public static let malformed = Code(name: "malformed")
        /// Carries a user name or password.
        public static let userInfo = Code(name: "userInfo")
        /// Has no host.
        public static let missingHost = Code(name: "missingHost")
        /// Not https (or http to loopback where allowed).
        public static let insecureScheme = Code(name: "insecureScheme")
        /// The code's name.
        public var description: String { name }
    }

    /// The kind of refusal.
    public var code: Code
    /// What is wrong, for the person who registered the webhook.
    public var message: String

    /// The code and message.
    public var description: String { "WebhookURLError(\(code)): \(message)" }
}
