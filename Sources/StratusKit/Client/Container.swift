import Crypto
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// How calls authenticate: the container's API token with a user's web auth token, the API token
/// alone (anonymous reads of the public database), or a server-to-server key (public database).
public enum Authentication: Sendable {
    case apiToken(String, webAuthToken: String?)
    case serverToServer(ServerKey)

    /// A server-to-server key: its id (`stratus key create`) and its P-256 private key.
    public static func serverToServer(keyID: String, privateKey: P256.Signing.PrivateKey) -> Authentication {
        .serverToServer(ServerKey(keyID: keyID, privateKey: privateKey))
    }
}

/// A server-to-server key, kept as its raw bytes (the cryptography package's key type is not
/// `Sendable`).
public struct ServerKey: Sendable {
    public let keyID: String
    let rawKey: Data

    public init(keyID: String, privateKey: P256.Signing.PrivateKey) {
        self.keyID = keyID
        self.rawKey = privateKey.rawRepresentation
    }
}

/// A container on a Stratus server: where it is, how calls authenticate, how they are retried,
/// and where encrypted fields' keys come from. Its databases make the calls.
public final class StratusContainer: Sendable {
    public let serverURL: URL
    public let identifier: String
    /// `development` or `production`.
    public let environment: String
    public let authentication: Authentication
    public let retryPolicy: RetryPolicy
    /// The keys encrypted fields are sealed under; nil: a record with encrypted values cannot be
    /// saved and one read keeps them sealed (`MISSING_KEY` when opened).
    public let keyProvider: (any FieldKeyProvider)?
    /// This device's id, sent as `X-Stratus-Device-ID`: the server stamps the device's writes with
    /// it (the records' `created`/`modified` `deviceID`). 1 to 64 letters, digits, `-`, `_`, `.`.
    public let deviceID: String?
    let transport: Transport

    public init(
        serverURL: URL, identifier: String, environment: String = "development", authentication: Authentication,
        retryPolicy: RetryPolicy = RetryPolicy(), keyProvider: (any FieldKeyProvider)? = nil, deviceID: String? = nil, session: URLSession = .shared
    ) {
        self.serverURL = serverURL
        self.identifier = identifier
        self.environment = environment
        self.authentication = authentication
        self.retryPolicy = retryPolicy
        self.keyProvider = keyProvider
        self.deviceID = deviceID
        self.transport = Transport(session: session)
    }

    /// The same container with another authentication (e.g. after signing in).
    public func with(authentication: Authentication) -> StratusContainer {
        StratusContainer(serverURL: serverURL, identifier: identifier, environment: environment, authentication: authentication,
                         retryPolicy: retryPolicy, keyProvider: keyProvider, deviceID: deviceID, session: transport.session)
    }

    /// The same container naming another device.
    public func with(deviceID: String?) -> StratusContainer {
        StratusContainer(serverURL: serverURL, identifier: identifier, environment: environment, authentication: authentication,
                         retryPolicy: retryPolicy, keyProvider: keyProvider, deviceID: deviceID, session: transport.session)
    }

    public var privateCloudDatabase: StratusDatabase { StratusDatabase(container: self, scope: .private) }
    public var publicCloudDatabase: StratusDatabase { StratusDatabase(container: self, scope: .public) }
    public var sharedCloudDatabase: StratusDatabase { StratusDatabase(container: self, scope: .shared) }
    public func database(_ scope: DatabaseScope) -> StratusDatabase { StratusDatabase(container: self, scope: scope) }

    /// What a password sign-in answers.
    public struct SignIn: Sendable, Hashable {
        public var webAuthToken: String
        public var userRecordName: String
        /// Milliseconds since 1970.
        public var expiresAt: Int64?
    }

    /// Signs a user of the container's directory in with login and password
    /// (`/auth/1/{container}/signin`); use `with(authentication:)` with the token it answers.
    public func signIn(login: String, password: String) async throws -> SignIn {
        guard case .apiToken(let apiToken, _) = authentication else {
            throw StratusKitError.invalidArgument("signing in needs the container's API token")
        }
        let answer = try await call(root: "auth/1/\(identifier.pathEscaped)/signin", query: [("ckAPIToken", apiToken)], body: ["login": .string(login), "password": .string(password)])
        guard let token = answer["ckWebAuthToken"]?.string, let user = answer["userRecordName"]?.string else {
            throw StratusKitError.invalidResponse("a sign-in answer without ckWebAuthToken")
        }
        return SignIn(webAuthToken: token, userRecordName: user, expiresAt: answer["expiresAt"]?.int64)
    }

    /// A call under `/database/1/{container}/{environment}/` (`database` nil: `tokens/create` and
    /// the like), retried by the policy.
    func call(database: DatabaseScope?, operation: String, body: JSON?, method: String = "POST") async throws -> JSON {
        var root = "database/1/\(identifier.pathEscaped)/\(environment.pathEscaped)"
        if let database { root += "/\(database.rawValue)" }
        return try await call(root: root + "/" + operation, query: credentials, body: body, method: method)
    }

    var credentials: [(String, String)] {
        switch authentication {
        case .apiToken(let token, let webAuthToken):
            var items = [("ckAPIToken", token)]
            if let webAuthToken { items.append(("ckWebAuthToken", webAuthToken)) }
            return items
        case .serverToServer: return []
        }
    }

    func call(root: String, query: [(String, String)], body: JSON?, method: String = "POST") async throws -> JSON {
        let url = try url(root, query: query)
        let data = body.map { $0.encoded() }
        return try await transport.withRetries(retryPolicy) {
            var request = URLRequest(url: url)
            request.httpMethod = method
            if let data {
                request.httpBody = data
                request.setValue("application/json; charset=utf-8", forHTTPHeaderField: "Content-Type")
            }
            if let deviceID = self.deviceID { request.setValue(deviceID, forHTTPHeaderField: "X-Stratus-Device-ID") }
            try self.sign(&request, body: data ?? Data())
            return try await self.transport.json(request)
        }
    }

    /// An absolute URL for a path below the server's URL, with query items.
    func url(_ path: String, query: [(String, String)]) throws -> URL {
        var text = serverURL.absoluteString
        if text.hasSuffix("/") { text.removeLast() }
        text += "/" + path
        if !query.isEmpty { text += "?" + query.map { "\($0.0)=\($0.1.queryEscaped)" }.joined(separator: "&") }
        guard let url = URL(string: text) else { throw StratusKitError.invalidArgument("not a URL: \(text.prefix(200))") }
        return url
    }

    /// Server-to-server signing: ECDSA P-256 over `date:base64(sha256(body)):subpath`.
    func sign(_ request: inout URLRequest, body: Data) throws {
        guard case .serverToServer(let serverKey) = authentication, let url = request.url else { return }
        let keyID = serverKey.keyID
        let key = try P256.Signing.PrivateKey(rawRepresentation: serverKey.rawKey)
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        let date = formatter.string(from: Date())
        var subpath = url.path
        if let range = subpath.range(of: "/database/") { subpath = String(subpath[range.lowerBound...]) }
        if let query = url.query, !query.isEmpty { subpath += "?" + query }
        let message = "\(date):\(Data(SHA256.hash(data: body)).base64EncodedString()):\(subpath)"
        let signature = try key.signature(for: Data(message.utf8))
        request.setValue(keyID, forHTTPHeaderField: "X-Apple-CloudKit-Request-KeyID")
        request.setValue(date, forHTTPHeaderField: "X-Apple-CloudKit-Request-ISO8601Date")
        request.setValue(signature.derRepresentation.base64EncodedString(), forHTTPHeaderField: "X-Apple-CloudKit-Request-SignatureV1")
    }
}

/// Sends requests with URLSession and reads CloudKit's answers and errors.
struct Transport: Sendable {
    let session: URLSession
    /// The most bytes of an answer read as JSON (a page of records is at most a few MB).
    static let maxAnswerBytes = 64 << 20

    func json(_ request: URLRequest) async throws -> JSON {
        let (data, response) = try await data(request)
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        return try Self.read(data, status: status, retryAfterHeader: (response as? HTTPURLResponse)?.value(forHTTPHeaderField: "Retry-After"))
    }

    func data(_ request: URLRequest) async throws -> (Data, URLResponse) {
        do {
            return try await session.data(for: request)
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            if Task.isCancelled { throw CancellationError() }
            throw StratusKitError(code: .networkFailure, reason: "no answer: \(error.localizedDescription)")
        }
    }

    /// An answer's JSON, or its error as `StratusKitError`.
    static func read(_ data: Data, status: Int, retryAfterHeader: String?) throws -> JSON {
        if status == 204 { return .object([:]) }
        guard data.count <= maxAnswerBytes else { throw StratusKitError.invalidResponse("an answer of \(data.count) bytes") }
        let json = data.isEmpty ? JSON.object([:]) : (try? JSON.decode(data))
        if (200..<300).contains(status), let json { return json }
        if let json, var error = StratusKitError(wire: json, httpStatus: status) {
            if error.retryAfter == nil, let header = retryAfterHeader { error.retryAfter = Int(header) }
            throw error
        }
        let code: StratusKitError.Code = status >= 500 ? .internalError : status == 429 ? .throttled : .invalidResponse
        throw StratusKitError(code: code, reason: "HTTP \(status) without a CloudKit error", retryAfter: retryAfterHeader.flatMap(Int.init), httpStatus: status)
    }

    /// Runs `attempt` until it succeeds, fails for good, or the policy gives up.
    func withRetries<T: Sendable>(_ policy: RetryPolicy, _ attempt: @Sendable () async throws -> T) async throws -> T {
        var number = 1
        while true {
            do {
                return try await attempt()
            } catch let error as StratusKitError where policy.shouldRetry(error, afterAttempt: number) {
                let seconds = policy.delay(afterAttempt: number, retryAfter: error.retryAfter, random: Double.random(in: 0..<1))
                try await Task.sleep(for: .milliseconds(Int64(seconds * 1000)))
                number += 1
            }
        }
    }
}

extension String {
    var pathEscaped: String { addingPercentEncoding(withAllowedCharacters: .urlPathAllowed.subtracting(CharacterSet(charactersIn: "/"))) ?? self }
    var queryEscaped: String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return addingPercentEncoding(withAllowedCharacters: allowed) ?? self
    }
}
