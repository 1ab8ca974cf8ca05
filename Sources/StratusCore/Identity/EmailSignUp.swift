import Crypto
import Foundation

/// Who may sign up by email in a container: anyone (`open`), only addresses the operator invited
/// (`invite-only`), or nobody (`off`, the default: the operator adds users).
public enum SignUpMode: String, Sendable, CaseIterable, Codable {
    case open
    case inviteOnly = "invite-only"
    case off

    /// Reads a mode's name as the CLI, the console and the database spell it.
    public static func parse(_ text: String) throws(StratusError) -> SignUpMode {
        guard let mode = SignUpMode(rawValue: text) else {
            throw StratusError(.badRequest, "sign-up is one of open, invite-only, off (not '\(ClientText.excerpt(text))')")
        }
        return mode
    }
}

/// An email address as sign-up, verification and password reset take it: trimmed, at most 254
/// bytes, one `@` between a local part of at most 64 bytes and a domain with a dot, no spaces or
/// control characters. Compared without regard to capitals (the directory's index folds them).
public enum EmailAddress {
    /// The longest address (RFC 5321's path limit less its brackets).
    public static let maxBytes = 254

    /// The address, trimmed, or BAD_REQUEST saying what is wrong with it.
    public static func validate(_ text: String) throws(StratusError) -> String {
        let address = text.trimmingCharacters(in: .whitespacesAndNewlines)
        let parts = address.split(separator: "@", omittingEmptySubsequences: false)
        guard address.utf8.count <= maxBytes, parts.count == 2, !parts[0].isEmpty, parts[0].utf8.count <= 64,
            parts[1].contains("."), !parts[1].hasPrefix("."), !parts[1].hasSuffix("."),
            !address.unicodeScalars.contains(where: { $0.properties.isWhitespace || $0.properties.generalCategory == .control || $0 == "<" || $0 == ">" })
        else {
            throw StratusError(.badRequest, "email is not an email address (at most \(maxBytes) bytes, name@domain): '\(ClientText.excerpt(address))'")
        }
        return address
    }
}

/// What one email token is for: confirming a sign-up's address, or resetting a password.
public enum EmailTokenPurpose: String, Sendable, CaseIterable, Codable {
    case verify
    case reset
}

/// How long email tokens last, per purpose.
public struct EmailTokenLifetimes: Sendable, Equatable {
    /// `STRATUS_EMAIL_VERIFY_TTL_SECONDS`: a sign-up's verification (a day).
    public var verify: Int64 = 24 * 3600
    /// `STRATUS_EMAIL_RESET_TTL_SECONDS`: a password reset (an hour).
    public var reset: Int64 = 3600
    /// The longest a lifetime may be set to: a week.
    public static let maximum: Int64 = 7 * 24 * 3600

    /// The defaults.
    public init() {}

    /// Lifetimes in seconds, each 1 to `maximum`.
    public init(verify: Int64, reset: Int64) throws(StratusError) {
        for value in [verify, reset] where !(1...Self.maximum).contains(value) {
            throw StratusError(.badRequest, "an email token's lifetime is 1 to \(Self.maximum) seconds, not \(value)")
        }
        self.verify = verify
        self.reset = reset
    }

    /// The lifetime of a token for `purpose`.
    public func seconds(_ purpose: EmailTokenPurpose) -> Int64 {
        switch purpose {
        case .verify: verify
        case .reset: reset
        }
    }
}

/// Email tokens: random, sent once, stored only as their SHA-256 digest, used at most once, and
/// good until they expire.
public enum EmailToken {
    /// A token's text: 64 lower-case hex digits.
    public static let textLength = 64

    /// A new random token.
    public static func generate() -> String { APIToken.generate() }

    /// The digest a token is stored and found by.
    public static func digest(_ token: String) -> [UInt8] { APIToken.digest(token) }

    /// The token a request sent, checked for shape before it is looked up.
    public static func validate(_ text: String) throws(StratusError) -> String {
        let token = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard token.utf8.count == textLength, token.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }) else {
            throw StratusError(.badRequest, "token is the \(textLength) hexadecimal digits of the message sent")
        }
        return token
    }

    /// A stored token as its redemption reads it.
    public struct Stored: Sendable, Equatable {
        public var purpose: EmailTokenPurpose
        /// Seconds since 1970.
        public var expiresAt: Int64
        /// When it was used; nil while it is not.
        public var usedAt: Int64?

        public init(purpose: EmailTokenPurpose, expiresAt: Int64, usedAt: Int64?) {
            self.purpose = purpose
            self.expiresAt = expiresAt
            self.usedAt = usedAt
        }
    }

    /// Whether a token found by its digest (nil: none) may be redeemed for `purpose` at `now`.
    /// Every refusal is AUTHENTICATION_FAILED; a token of another purpose is answered as an unknown one.
    public static func redeem(_ stored: Stored?, for purpose: EmailTokenPurpose, now: Int64) throws(StratusError) {
        guard let stored, stored.purpose == purpose else {
            throw StratusError(.authenticationFailed, "this token is not valid; ask for a new message")
        }
        guard stored.usedAt == nil else {
            throw StratusError(.authenticationFailed, "this token was used already; ask for a new message")
        }
        guard stored.expiresAt > now else {
            throw StratusError(.authenticationFailed, "this token has expired; ask for a new message")
        }
    }
}

/// Who may sign up, and when a message goes out. The answer to the client is the same whatever is
/// decided here (except that sign-up is off), so it never tells whether an address is known.
public enum SignUpRules {
    public enum Decision: Sendable, Equatable {
        /// Send a verification message: the address may become a user.
        case send
        /// Answer as if a message went out, and send none (why, for the log only).
        case skip(String)
    }

    /// What a sign-up request for an address does, from the container's mode, whether the operator
    /// invited the address, and whether a user of the container has it already. Sign-up that is
    /// off is refused (ACCESS_DENIED), which tells nothing of any address.
    public static func decide(mode: SignUpMode, invited: Bool, addressTaken: Bool) throws(StratusError) -> Decision {
        switch mode {
        case .off:
            throw StratusError(.accessDenied, "this container does not let users sign up; ask its operator for an account")
        case .inviteOnly where !invited:
            return .skip("the address was not invited")
        case .open, .inviteOnly:
            return addressTaken ? .skip("the address belongs to a user already") : .send
        }
    }

    /// What a password reset request does: a message only to an address of a user.
    public static func decideReset(userFound: Bool) -> Decision {
        userFound ? .send : .skip("no user has the address")
    }
}

/// A hosted sign-in page's request, which `redirectURL` carries instead of the API token: the
/// container, the web origin of the app that was told to sign in (the only window the page hands
/// the web auth token to), and an expiry. Signed as `TokenKind.signInRequest`.
public struct SignInPageRequest: Sendable, Hashable, Codable {
    public var container: String
    /// `scheme://host[:port]` of the app's page; nil when the call that needed a user came from no
    /// browser page (then the page hands the token only to a window of its own origin).
    public var origin: String?
    /// Seconds since 1970.
    public var expiresAt: Int64

    /// How long a sign-in page's request lasts: an hour.
    public static let lifetime: Int64 = 3600

    enum CodingKeys: String, CodingKey {
        case container = "c"
        case origin = "o"
        case expiresAt = "e"
    }

    public init(container: String, origin: String?, expiresAt: Int64) {
        self.container = container
        self.origin = origin
        self.expiresAt = expiresAt
    }

    /// The origin of a request's `Origin` header when it is one a page may be posted to
    /// (`http` or `https`, a host, an optional port, nothing else, at most 255 bytes); nil otherwise.
    public static func origin(_ header: String?) -> String? {
        guard let header, header.utf8.count <= 255, let url = URL(string: header), let scheme = url.scheme?.lowercased(),
            scheme == "http" || scheme == "https", let host = url.host, !host.isEmpty,
            url.path.isEmpty || url.path == "/", url.query == nil, url.fragment == nil, url.user == nil
        else { return nil }
        return "\(scheme)://\(host.lowercased())" + (url.port.map { ":\($0)" } ?? "")
    }

    public func signed(with key: SecretKey) -> String {
        SignedToken.sign(self, kind: .signInRequest, key: key)
    }

    /// The request a page was opened with, once its signature, container and expiry hold;
    /// AUTHENTICATION_FAILED otherwise.
    public static func verify(_ text: String, key: SecretKey, container: String, now: Int64) throws(StratusError) -> SignInPageRequest {
        guard text.utf8.count <= 2048, let request = SignedToken.open(text, as: SignInPageRequest.self, kind: .signInRequest, key: key) else {
            throw StratusError(.authenticationFailed, "this sign-in page's request is not valid; start again from the app")
        }
        guard request.container == container else {
            throw StratusError(.authenticationFailed, "this sign-in page's request belongs to another container")
        }
        guard request.expiresAt > now else {
            throw StratusError(.authenticationFailed, "this sign-in page's request has expired; start again from the app")
        }
        return request
    }
}
