import Foundation

/// A session: one sign-in of a user, which every web auth token issued by that sign-in names.
/// Signing out revokes it, and its tokens are refused from then on (`WebAuthToken.check`).
public struct Session: Sendable, Equatable {
    /// How the user signed in.
    public enum Method: String, Sendable, CaseIterable {
        /// A login and password of the container's directory.
        case password
        /// An ID token of a trusted issuer.
        case idToken = "idtoken"
    }

    /// The session id: 32 lowercase hex digits.
    public var sessionID: String
    /// The container.
    public var container: String
    /// The user.
    public var userRecordName: String
    /// How the user signed in.
    public var method: Method
    /// The issuer, for an ID-token sign-in.
    public var issuer: String?
    /// When the session began, in seconds since 1970.
    public var createdAt: Int64
    /// When its token expires, in seconds since 1970.
    public var expiresAt: Int64
    /// When it was signed out, if it was.
    public var revokedAt: Int64?

    /// Creates a session value.
    public init(
        sessionID: String, container: String, userRecordName: String, method: Method, issuer: String?, createdAt: Int64, expiresAt: Int64,
        revokedAt: Int64? = nil
    ) {
        self.sessionID = sessionID
        self.container = container
        self.userRecordName = userRecordName
        self.method = method
        self.issuer = issuer
        self.createdAt = createdAt
        self.expiresAt = expiresAt
        self.revokedAt = revokedAt
    }

    /// A new random session id.
    public static func generateID() -> String { String(APIToken.generate().prefix(32)) }

    /// A session id a client or operator sends, checked: 32 lowercase hex digits.
    public static func validateID(_ text: String, _ place: String = "sessionID") throws(StratusError) -> String {
        guard text.utf8.count == 32, text.utf8.allSatisfy({ (48...57).contains($0) || (97...102).contains($0) }) else {
            throw StratusError(.badRequest, "\(place) must be a session id: 32 lowercase hex digits")
        }
        return text
    }

    /// Whether the session's tokens are accepted at `now`.
    public func isActive(now: Int64) -> Bool { revokedAt == nil && expiresAt > now }

    /// The most sessions a user's or operator's list shows (the newest first).
    public static let listLimit = 100
}

/// Which network addresses a key set may be fetched from: public ones, or with the operator's
/// leave (`STRATUS_JWKS_ALLOW_PRIVATE_ADDRESSES`, for tests and local stacks) any.
public enum AddressPolicy {
    /// Whether an IPv4 or IPv6 address (4 or 16 bytes) is a public unicast address: not loopback,
    /// private, link-local, shared (CGNAT), multicast, reserved, unspecified, documentation, or an
    /// IPv6 form of one of these (IPv4-mapped, unique local, site-local).
    public static func isPublic(_ address: [UInt8]) -> Bool {
        switch address.count {
        case 4: return isPublicV4(address)
        case 16: return isPublicV6(address)
        default: return false
        }
    }

    static func isPublicV4(_ a: [UInt8]) -> Bool {
        switch (a[0], a[1]) {
        case (0, _), (10, _), (127, _): return false
        case (100, 64...127): return false  // shared address space
        case (169, 254): return false  // link-local
        case (172, 16...31): return false
        case (192, 168): return false
        case (192, 0) where a[2] == 0 || a[2] == 2: return false  // protocol assignments, TEST-NET-1
        case (198, 18...19): return false  // benchmarking
        case (198, 51) where a[2] == 100: return false  // TEST-NET-2
        case (203, 0) where a[2] == 113: return false  // TEST-NET-3
        case (224...255, _): return false  // multicast, reserved, broadcast
        default: return true
        }
    }

    static func isPublicV6(_ a: [UInt8]) -> Bool {
        if a[0..<10].allSatisfy({ $0 == 0 }) {
            // ::, ::1, IPv4-compatible, and IPv4-mapped (::ffff:a.b.c.d) are judged as IPv4.
            if a[10] == 0xff, a[11] == 0xff { return isPublicV4(Array(a[12..<16])) }
            return false
        }
        if a[0] == 0xff { return false }  // multicast
        if a[0] & 0xfe == 0xfc { return false }  // unique local fc00::/7
        if a[0] == 0xfe, a[1] & 0xc0 == 0x80 || a[1] & 0xc0 == 0xc0 { return false }  // link-local, site-local
        if a[0] == 0x20, a[1] == 0x01, a[2] == 0x0d, a[3] == 0xb8 { return false }  // documentation
        if a[0] == 0x00, a[1] == 0x64, a[2] == 0xff, a[3] == 0x9b { return isPublicV4(Array(a[12..<16])) }  // NAT64
        return true
    }

    /// Whether a key set URL is allowed before it is resolved: https, or plain http only where
    /// private addresses are allowed (tests and local stacks reach a loopback server).
    public static func checkScheme(_ url: URL, allowPrivate: Bool) throws(StratusError) {
        switch url.scheme?.lowercased() {
        case "https"?: return
        case "http"? where allowPrivate: return
        default: throw StratusError(.authenticationFailed, "the issuer's JWKS URL must use https")
        }
    }
}
