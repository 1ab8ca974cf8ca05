import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL

/// One message to a user: sign-up's verification or a password reset. Its token and link are
/// secrets: the message's description leaves them out, so it may be logged.
public struct EmailMessage: Sendable, CustomStringConvertible {
    /// The address it goes to (checked by `EmailAddress`: no spaces, line breaks or brackets).
    public var to: String
    public var subject: String
    /// The plain-text body.
    public var text: String
    /// `verify` or `reset`.
    public var purpose: String
    public var container: String
    /// The token the message carries.
    public var token: String
    /// The page the token is used on.
    public var link: String

    public init(to: String, subject: String, text: String, purpose: String, container: String, token: String, link: String) {
        self.to = to
        self.subject = subject
        self.text = text
        self.purpose = purpose
        self.container = container
        self.token = token
        self.link = link
    }

    public var description: String { "EmailMessage(purpose: \(purpose), container: \(container), token: <redacted>)" }
}

/// Hands email messages to whoever delivers them.
public protocol EmailSending: Sendable {
    /// Delivers one message, or throws saying why it could not (never with the message's secrets).
    func send(_ message: EmailMessage) async throws
}

/// Why a delivery failed; its text never holds the message, its token or a password.
public struct EmailDeliveryError: Error, CustomStringConvertible {
    public var description: String
    /// Whether the relay answered (with a refusal), rather than the connection failing.
    var answered = false

    init(description: String, answered: Bool = false) {
        self.description = description
        self.answered = answered
    }
}

/// Where and how to reach an SMTP relay (`STRATUS_SMTP_*`).
public struct SMTPSettings: Sendable, CustomStringConvertible {
    public var host: String
    public var port: Int = 587
    /// The envelope and `From:` address.
    public var from: String
    /// Upgrade the connection with STARTTLS before anything else is said (refused when the relay does not offer it).
    public var startTLS: Bool = true
    /// Credentials for `AUTH PLAIN` (only over STARTTLS); nil: none.
    public var username: String?
    public var password: String?
    /// The whole exchange, from connecting to the relay's acceptance.
    public var timeout: Duration = .seconds(15)
    /// The authorities whose certificates are trusted for the relay's, in place of the system's
    /// (`STRATUS_SMTP_CA_FILE`: a relay with a private authority's certificate); nil: the system's.
    public var trustedAuthorities: [NIOSSLCertificate]?

    /// The longest CA file read.
    public static let maxAuthorityFileBytes = 1 << 20

    public init(host: String, port: Int = 587, from: String) {
        self.host = host
        self.port = port
        self.from = from
    }

    public var description: String {
        let authorities = trustedAuthorities.map { "\($0.count) from a CA file" } ?? "the system's"
        return "SMTPSettings(host: \(host), port: \(port), from: \(from), startTLS: \(startTLS), authorities: \(authorities), username: \(username ?? "none"), password: \(password == nil ? "none" : "<redacted>"))"
    }

    /// The certificates of a PEM file of authorities (at most 1 MiB, at least one certificate), or
    /// an error that says what is wrong with the file.
    public static func authorities(fromPEMFile path: String) throws -> [NIOSSLCertificate] {
        let attributes = try? FileManager.default.attributesOfItem(atPath: path)
        guard let size = attributes?[.size] as? Int, let bytes = FileManager.default.contents(atPath: path) else {
            throw EmailDeliveryError(description: "cannot read the CA file '\(path)'")
        }
        guard size <= maxAuthorityFileBytes, bytes.count <= maxAuthorityFileBytes else {
            throw EmailDeliveryError(description: "the CA file '\(path)' is larger than \(maxAuthorityFileBytes) bytes")
        }
        guard let certificates = try? NIOSSLCertificate.fromPEMBytes(Array(bytes)), !certificates.isEmpty else {
            throw EmailDeliveryError(description: "the CA file '\(path)' holds no PEM certificate")
        }
        return certificates
    }

    /// The name TLS sends (SNI) and checks the relay's certificate for: the host when it is a DNS
    /// name; nil for an IP address, which SNI does not carry (the certificate is then checked for
    /// the address connected to).
    public static func serverName(of host: String) -> String? {
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        if (try? SocketAddress(ipAddress: bare, port: 0)) != nil { return nil }
        return host
    }
}

/// Sends each message over a new connection to the configured SMTP relay: EHLO, STARTTLS when set,
/// AUTH PLAIN when credentials are set, one MAIL/RCPT/DATA, QUIT. Bounded: every reply line is at
/// most 1,000 bytes and a reply at most 50 lines, and the exchange ends at the timeout.
public struct SMTPSender: EmailSending {
    let settings: SMTPSettings

    public init(settings: SMTPSettings) { self.settings = settings }

    public func send(_ message: EmailMessage) async throws {
        let settings = settings
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await Self.exchange(message, settings: settings) }
                group.addTask {
                    try await Task.sleep(for: settings.timeout)
                    throw EmailDeliveryError(description: "the SMTP relay did not accept the message within \(settings.timeout)")
                }
                try await group.next()
                group.cancelAll()
            }
        } catch let error as EmailDeliveryError {
            throw error
        } catch {
            throw EmailDeliveryError(description: "SMTP relay \(settings.host):\(settings.port): \(error)")
        }
    }

    static func exchange(_ message: EmailMessage, settings: SMTPSettings) async throws {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(.seconds(10))
            .connect(host: settings.host, port: settings.port) { channel in
                channel.eventLoop.makeCompletedFuture { try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel) }
            }
        let underlying = channel.channel
        try await channel.executeThenClose { inbound, outbound in
            var lines = SMTPReplies(inbound.makeAsyncIterator())
            func say(_ command: String) async throws { try await outbound.write(ByteBuffer(string: command + "\r\n")) }
            func expect(_ codes: Set<Int>, after what: String) async throws -> [String] {
                let reply = try await lines.reply()
                guard codes.contains(reply.code) else {
                    throw EmailDeliveryError(
                        description: "the SMTP relay answered \(what) with \(reply.code) \(reply.lines.last.map { String($0.prefix(200)) } ?? "")", answered: true)
                }
                return reply.lines
            }
            _ = try await expect([220], after: "the connection")
            try await say("EHLO stratus")
            var extensions = try await expect([250], after: "EHLO")
            if settings.startTLS {
                guard extensions.contains(where: { $0.uppercased().hasPrefix("STARTTLS") }) else {
                    throw EmailDeliveryError(description: "the SMTP relay does not offer STARTTLS (set STRATUS_SMTP_STARTTLS=false only for a relay on a trusted network)")
                }
                try await say("STARTTLS")
                _ = try await expect([220], after: "STARTTLS")
                var tls = TLSConfiguration.makeClientConfiguration()
                if let authorities = settings.trustedAuthorities { tls.trustRoots = .certificates(authorities) }
                let serverName = SMTPSettings.serverName(of: settings.host)
                let configuration = tls
                try await underlying.eventLoop.submit {
                    let context = try NIOSSLContext(configuration: configuration)
                    try underlying.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: context, serverHostname: serverName), position: .first)
                }.get()
                do {
                    try await say("EHLO stratus")
                    extensions = try await expect([250], after: "EHLO over TLS")
                } catch let error as EmailDeliveryError where error.answered {
                    throw error
                } catch {
                    // A refused certificate ends the stream with TLS's error, or closes it.
                    let name = serverName ?? "the address \(settings.host)"
                    let trusted = settings.trustedAuthorities == nil ? "the system's (STRATUS_SMTP_CA_FILE names others)" : "STRATUS_SMTP_CA_FILE's"
                    throw EmailDeliveryError(
                        description: "the TLS handshake with the SMTP relay \(settings.host):\(settings.port) failed: its certificate must be issued for "
                            + "\(name) by an authority this server trusts, \(trusted): \(error)")
                }
            }
            if let username = settings.username, let password = settings.password {
                guard settings.startTLS else { throw EmailDeliveryError(description: "SMTP credentials are sent only over STARTTLS") }
                let plain = Data(([0] + Array(username.utf8) + [0] + Array(password.utf8))).base64EncodedString()
                try await say("AUTH PLAIN " + plain)
                _ = try await expect([235], after: "AUTH")
            }
            try await say("MAIL FROM:<\(settings.from)>")
            _ = try await expect([250], after: "MAIL FROM")
            try await say("RCPT TO:<\(message.to)>")
            _ = try await expect([250, 251], after: "RCPT TO")
            try await say("DATA")
            _ = try await expect([354], after: "DATA")
            try await outbound.write(ByteBuffer(string: Self.data(message, from: settings.from)))
            _ = try await expect([250], after: "the message")
            try await say("QUIT")
            _ = try? await lines.reply()
        }
    }

    /// The message as DATA sends it: headers, a blank line, the body with CRLF line ends and
    /// leading dots doubled, and the lone dot that ends it.
    static func data(_ message: EmailMessage, from: String) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss Z"
        let date = formatter.string(from: Date())
        var text = "From: \(from)\r\nTo: \(message.to)\r\nSubject: \(message.subject)\r\nDate: \(date)\r\n"
        text += "Message-ID: <\(UUID().uuidString.lowercased())@stratus>\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n"
        text += "Content-Transfer-Encoding: 8bit\r\n\r\n"
        for line in message.text.split(separator: "\n", omittingEmptySubsequences: false) {
            let line = line.hasSuffix("\r") ? line.dropLast() : line
            text += (line.hasPrefix(".") ? "." : "") + line + "\r\n"
        }
        return text + ".\r\n"
    }
}

/// Reads SMTP replies (`250-…` lines up to the `250 …` one) from a connection's bytes, bounded.
struct SMTPReplies {
    var iterator: NIOAsyncChannelInboundStream<ByteBuffer>.AsyncIterator
    var pending: [UInt8] = []

    init(_ iterator: NIOAsyncChannelInboundStream<ByteBuffer>.AsyncIterator) { self.iterator = iterator }

    mutating func line() async throws -> String {
        while true {
            if let end = pending.firstIndex(of: UInt8(ascii: "\n")) {
                var line = Array(pending[..<end])
                pending.removeSubrange(...end)
                if line.last == UInt8(ascii: "\r") { line.removeLast() }
                return String(decoding: line, as: UTF8.self)
            }
            guard pending.count <= 1000 else { throw EmailDeliveryError(description: "the SMTP relay sent a line of more than 1000 bytes") }
            guard let buffer = try await iterator.next() else { throw EmailDeliveryError(description: "the SMTP relay closed the connection") }
            pending += buffer.readableBytesView
        }
    }

    mutating func reply() async throws -> (code: Int, lines: [String]) {
        var lines: [String] = []
        while lines.count < 50 {
            let line = try await line()
            guard line.utf8.count >= 3, let code = Int(line.prefix(3)) else {
                throw EmailDeliveryError(description: "the SMTP relay sent something that is not a reply")
            }
            lines.append(String(line.dropFirst(4)))
            if line.utf8.count == 3 || line.dropFirst(3).first == " " { return (code, lines) }
        }
        throw EmailDeliveryError(description: "the SMTP relay sent a reply of more than 50 lines")
    }
}

/// Where to post messages instead (`STRATUS_EMAIL_WEBHOOK_URL`, `STRATUS_EMAIL_WEBHOOK_SECRET`):
/// a JSON body `{to, subject, text, purpose, container, token, link}` signed as every webhook is
/// (`X-Stratus-Signature`, `WebhookSignature`), for a service of the operator's that sends mail.
public struct EmailWebhookSender: EmailSending {
    let url: String
    let secret: Data
    let sender: WebhookSender

    public init(url: String, secret: Data, sender: WebhookSender) {
        self.url = url
        self.secret = secret
        self.sender = sender
    }

    struct Body: Encodable {
        var to, subject, text, purpose, container, token, link: String
    }

    public func send(_ message: EmailMessage) async throws {
        let body = try JSONEncoder().encode(Body(
            to: message.to, subject: message.subject, text: message.text, purpose: message.purpose, container: message.container,
            token: message.token, link: message.link))
        let outcome = await sender.deliver(WebhookDelivery(url: url, secret: secret, body: body, idempotencyKey: UUID().uuidString.lowercased(), attempt: 1))
        if case .delivered = outcome { return }
        throw EmailDeliveryError(description: "the email webhook did not take the message: \(outcome)")
    }
}
