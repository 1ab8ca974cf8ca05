import Foundation
import Hummingbird
import StratusCore

/// A rendered console page: HTML with headers that keep it out of frames and caches and let it load
/// nothing from elsewhere.
enum ConsolePage {
    /// Renders `template` with `values` (plus the frame's title, operator and CSRF token) as a response.
    static func render(
        _ template: String, title: String, session: ConsoleSession? = nil, crumbs: [(label: String, href: String)] = [],
        status: HTTPResponse.Status = .ok, _ values: [String: Any] = [:]
    ) -> Response {
        // An absent value must read as false to a section: drop the keys whose value is a nil optional.
        var context = values.filter { !isNil($0.value) }
        context["title"] = title
        if let session {
            context["signedIn"] = session.operator.login
            context["csrf"] = session.csrfToken
        }
        context["crumbs"] = crumbs.map { ["label": $0.label, "href": $0.href] }
        context["hasCrumbs"] = !crumbs.isEmpty
        let html = ConsoleTemplates.library.render(context, withTemplate: template) ?? ""
        return response(html, status: status)
    }

    static func isNil(_ value: Any) -> Bool {
        let mirror = Mirror(reflecting: value)
        return mirror.displayStyle == .optional && mirror.children.isEmpty
    }

    /// An HTML response with the console's headers.
    static func response(_ html: String, status: HTTPResponse.Status = .ok) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "text/html; charset=utf-8"
        headers[.cacheControl] = "no-store"
        headers[.init("Content-Security-Policy")!] =
            "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        headers[.init("X-Frame-Options")!] = "DENY"
        headers[.init("X-Content-Type-Options")!] = "nosniff"
        headers[.init("Referrer-Policy")!] = "no-referrer"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: html)))
    }

    /// A 303 to `location` (after a form post, so a reload does not post again).
    static func redirect(_ location: String) -> Response {
        var headers = HTTPFields()
        headers[.location] = location
        headers[.cacheControl] = "no-store"
        return Response(status: .seeOther, headers: headers)
    }

    /// An error as a page, with the status its code carries.
    static func error(_ error: StratusError, session: ConsoleSession?, back: String? = nil) -> Response {
        var response = render(
            "message", title: "Refused", session: session, status: .init(code: error.code.httpStatus),
            ["message": error.reason, "back": back as Any])
        if let retryAfter = error.retryAfter { response.headers[.retryAfter] = "\(retryAfter)" }
        return response
    }

    /// Percent-encodes one path segment or query value.
    static func escape(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: segment) ?? ""
    }

    private static let segment: CharacterSet = {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return allowed
    }()
}

/// An `application/x-www-form-urlencoded` body, bounded, as name → value (the last of a repeated name wins).
struct ConsoleForm: Sendable {
    /// The most bytes a console form may post: records are edited here, so as large as one record may be.
    static let maxBytes = 2 * 1024 * 1024
    /// The most fields a form may carry.
    static let maxFields = 500

    let fields: [String: String]

    init(_ data: Data) throws(StratusError) {
        var fields: [String: String] = [:]
        let pairs = data.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true)
        guard pairs.count <= Self.maxFields else { throw StratusError(.limitExceeded, "The form has more than \(Self.maxFields) fields") }
        for pair in pairs {
            let parts = pair.split(separator: UInt8(ascii: "="), maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = Self.decode(parts[0]), let value = Self.decode(parts.count > 1 ? parts[1] : Data()[...]) else {
                throw StratusError(.badRequest, "The form is not valid URL-encoded text")
            }
            fields[name] = value
        }
        self.fields = fields
    }

    private static func decode(_ bytes: Data.SubSequence) -> String? {
        let text = String(decoding: bytes.map { $0 == UInt8(ascii: "+") ? UInt8(ascii: " ") : $0 }, as: UTF8.self)
        return text.removingPercentEncoding
    }

    subscript(_ name: String) -> String? { fields[name] }

    /// A field that must be present and non-empty, trimmed.
    func required(_ name: String, label: String) throws(StratusError) -> String {
        guard let value = fields[name]?.trimmingCharacters(in: .whitespacesAndNewlines), !value.isEmpty else {
            throw StratusError(.badRequest, "\(label) is required")
        }
        return value
    }
}
