import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import StratusCore

/// Where the suite sends its requests: a running `stratus-api`, a container, and a signed-in user.
public struct BenchTarget: Sendable {
    /// The API's base URL, e.g. `http://127.0.0.1:8080`.
    public var apiURL: String
    /// The container the suite writes to (development environment, the user's private database).
    public var container: String
    /// The container's API token.
    public var apiToken: String
    /// A web auth token of the user whose private database the suite uses.
    public var webAuthToken: String
    /// The API's PostgreSQL: the raw-transaction limit runs there, beside the API's own tables.
    public var databaseURL: String
    /// The stack's processes whose CPU the report shows, idle and under each scenario's load.
    public var processes: [WatchedProcess]
    /// The load generator's own process, shown under each scenario's load beside the stack's
    /// processes (it shares their cores) but left out of the idle measurement, which is the stack's.
    public var loadGenerator: WatchedProcess?
    /// The API's token-signing key, when the suite may sign in as other users (share.fanout's
    /// participants); without it share.fanout is left out.
    public var secretKey: SecretKey?

    /// Creates a target.
    public init(
        apiURL: String, container: String, apiToken: String, webAuthToken: String, databaseURL: String, processes: [WatchedProcess] = [],
        loadGenerator: WatchedProcess? = nil, secretKey: SecretKey? = nil
    ) {
        self.loadGenerator = loadGenerator
        self.secretKey = secretKey
        self.apiURL = apiURL
        self.container = container
        self.apiToken = apiToken
        self.webAuthToken = webAuthToken
        self.databaseURL = databaseURL
        self.processes = processes
    }

    /// Web auth tokens of `users` in the container, signed with the API's key (a day long); nil
    /// without the key.
    func signIn(_ users: [String]) -> [String]? {
        guard let secretKey else { return nil }
        let expiresAt = Int64(Date().timeIntervalSince1970) + 86_400
        return users.map { WebAuthToken(userRecordName: $0, container: container, expiresAt: expiresAt).signed(with: secretKey) }
    }
}

/// A JSON object as the suite reads replies; only ever used inside one task.
typealias JSONObject = [String: Any]

/// One reply of the API.
struct Reply {
    var status: Int
    var body: JSONObject
    var headers: HTTPHeaders

    /// The per-record entries of a records/* reply.
    var records: [JSONObject] { body["records"] as? [JSONObject] ?? [] }

    /// The first error of the reply: the whole request's, or the first record's.
    var errorCode: String? {
        if let code = body["serverErrorCode"] as? String { return code }
        return records.lazy.compactMap { $0["serverErrorCode"] as? String }.first
    }
}

/// A failed call: the status and what the server said.
struct BenchFailure: Error, CustomStringConvertible {
    var description: String
}

/// Speaks CloudKit Web Services to the target over loopback HTTP/1.1 with a pool of keep-alive
/// connections, as a web client would.
struct CloudKitClient: Sendable {
    let http: HTTPClient
    let target: BenchTarget

    init(target: BenchTarget, connections: Int) {
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool = .init(idleTimeout: .seconds(120), concurrentHTTP1ConnectionsPerHostSoftLimit: connections)
        configuration.timeout = .init(connect: .seconds(10), read: .seconds(120))
        http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        self.target = target
    }

    func shutdown() async throws { try await http.shutdown() }

    /// POSTs `body` to `operation` of the private database of the suite's user, or of the user
    /// `webAuthToken` signs in.
    func post(_ operation: String, _ body: JSONObject, as webAuthToken: String? = nil) async throws -> Reply {
        try await post(path: "private/\(operation)", body, webAuthToken: webAuthToken)
    }

    /// POSTs `body` to an operation about the user rather than a database (`tokens/create`).
    func postUser(_ operation: String, _ body: JSONObject) async throws -> Reply {
        try await post(path: operation, body)
    }

    /// The signed-in user's record name (`users/caller`).
    func userRecordName() async throws -> String {
        let reply = try await post("users/caller", [:])
        guard reply.status == 200, let name = reply.body["userRecordName"] as? String else {
            throw BenchFailure(description: "users/caller: HTTP \(reply.status)")
        }
        return name
    }

    /// POSTs `body` to `path` (`<database>/<operation>`) signed in with another web auth token.
    func post(path: String, as webAuthToken: String, _ body: JSONObject) async throws -> Reply {
        try await post(path: path, body, webAuthToken: webAuthToken)
    }

    /// What a records/* reply says, read without turning it into Foundation values (the queries'
    /// replies are 100 records each, and the load generator shares the two cores with what it
    /// measures): its status, how many records it holds, and the first error, its own or a record's.
    struct Summary {
        var status: Int
        var records: Int
        var errorCode: String?
    }

    /// POSTs `body` to `operation` (`records/…`) of the user's private database (or of the user
    /// `webAuthToken` signs in) and summarises the reply; a reply that is not a records answer in
    /// JSON counts as an error.
    func postSummarised(_ operation: String, _ body: JSONObject, as webAuthToken: String? = nil) async throws -> Summary {
        let (status, buffer, _) = try await send(path: "private/\(operation)", body, webAuthToken: webAuthToken)
        // Read on demand, as the sync pulls read their pages (`RecordsAnswer`).
        guard let answer = try? RecordsAnswer.read(buffer) else {
            return Summary(status: status, records: 0, errorCode: "not JSON")
        }
        return Summary(status: status, records: answer.records, errorCode: answer.errorCode)
    }

    /// The first error of a records/* reply read as a `JSONValue`: the whole request's, or the first record's.
    static func errorCode(of reply: JSONValue) -> String? {
        if let code = reply["serverErrorCode"]?.stringValue { return code }
        guard case .array(let entries)? = reply["records"] else { return nil }
        return entries.lazy.compactMap { $0["serverErrorCode"]?.stringValue }.first
    }

    private func post(path: String, _ body: JSONObject, webAuthToken: String? = nil) async throws -> Reply {
        let (status, buffer, headers) = try await send(path: path, body, webAuthToken: webAuthToken)
        // The load generator shares the machine with what it measures: replies are read with the
        // server's own JSON reader, several times cheaper than JSONSerialization.
        let object = (try? JSONParser.parse(Array(buffer.readableBytesView))).map(Self.foundationValue) as? JSONObject ?? [:]
        return Reply(status: status, body: object, headers: headers)
    }

    /// POSTs `body` to `path` (`<database>/<operation>`) signed in with `webAuthToken`, written and
    /// read as `JSONValue`s without Foundation's JSON or values: for scenarios whose client makes
    /// about as many requests a second as the server answers (share.fanout's polls). A reply that
    /// is not JSON reads as null.
    func postValue(path: String, as webAuthToken: String, _ body: JSONValue) async throws -> (status: Int, body: JSONValue) {
        let (status, buffer, _) = try await send(path: path, bytes: body.serialized(), webAuthToken: webAuthToken)
        return (status, (try? JSONParser.parse(Array(buffer.readableBytesView))) ?? .null)
    }

    /// POSTs the bytes of a body as they are (hostile.cpu's, which no JSON writer would make) to
    /// `operation` of the user's private database; a reply that is not JSON reads as null.
    func postBytes(_ operation: String, _ bytes: [UInt8]) async throws -> (status: Int, body: JSONValue) {
        let (status, buffer, _) = try await send(path: "private/\(operation)", bytes: bytes)
        return (status, (try? JSONParser.parse(Array(buffer.readableBytesView))) ?? .null)
    }

    /// POSTs `body` to `operation` of the user's private database and reads the whole reply as a
    /// `JSONValue` (every record parsed, as a client must) without turning it into Foundation
    /// values; fails unless the reply is 200 without an error, its own or a record's. For the
    /// lookups.
    func expectOKValue(_ operation: String, _ body: JSONValue) async throws -> JSONValue {
        let (status, buffer, _) = try await send(path: "private/\(operation)", bytes: body.serialized())
        let reply = (try? JSONParser.parse(Array(buffer.readableBytesView))) ?? .null
        let errorCode = Self.errorCode(of: reply)
        guard status == 200, errorCode == nil, case .object = reply else {
            throw BenchFailure(description: "\(operation): HTTP \(status) \(errorCode ?? "") \(reply["reason"]?.stringValue ?? "")")
        }
        return reply
    }

    /// POSTs `body` to records/changes of the user's private database and reads the answer on
    /// demand (`RecordsAnswer`: every byte checked, every record read, no tree built); fails unless
    /// the answer is 200 without an error, its own or a record's. For the sync pulls.
    func changesPage(_ body: JSONValue) async throws -> RecordsAnswer {
        let (status, buffer, _) = try await send(path: "private/records/changes", bytes: body.serialized())
        let page: RecordsAnswer
        do {
            page = try RecordsAnswer.read(buffer)
        } catch {
            throw BenchFailure(description: "records/changes: HTTP \(status), \(error)")
        }
        guard status == 200, page.errorCode == nil else {
            throw BenchFailure(description: "records/changes: HTTP \(status) \(page.errorCode ?? "") \(page.reason ?? "")")
        }
        return page
    }

    private func send(path: String, _ body: JSONObject, webAuthToken: String? = nil) async throws -> (Int, ByteBuffer, HTTPHeaders) {
        try await send(path: path, bytes: try Self.bytes(of: body), webAuthToken: webAuthToken)
    }

    /// A request body's JSON, written with the server's own JSON writer: JSONSerialization's
    /// bridging of every dictionary and value was a quarter of the load generator's CPU in the
    /// write scenarios (docs/benchmarks.md). A body holding a value the writer does not know is
    /// left to JSONSerialization.
    static func bytes(of body: JSONObject) throws -> [UInt8] {
        if let value = jsonValue(body) { return value.serialized() }
        return Array(try JSONSerialization.data(withJSONObject: body))
    }

    /// `value` (as the scenarios build bodies: strings, integers, doubles, flags, NSNull, arrays
    /// and dictionaries of them) as a `JSONValue`; nil for anything else.
    static func jsonValue(_ value: Any) -> JSONValue? {
        switch value {
        case let text as String: return .string(text)
        case let flag as Bool: return .bool(flag)
        case let number as Int: return .int(Int64(number))
        case let number as Double: return .double(number)
        case let members as [String: Any]:
            var object: [String: JSONValue] = [:]
            object.reserveCapacity(members.count)
            for (key, member) in members {
                guard let converted = jsonValue(member) else { return nil }
                object[key] = converted
            }
            return .object(object)
        case let elements as [Any]:
            var array: [JSONValue] = []
            array.reserveCapacity(elements.count)
            for element in elements {
                guard let converted = jsonValue(element) else { return nil }
                array.append(converted)
            }
            return .array(array)
        case is NSNull: return .null
        case let number as Int64: return .int(number)
        case let json as JSONValue: return json
        default: return nil
        }
    }

    private func send(path: String, bytes data: [UInt8], webAuthToken: String? = nil) async throws -> (Int, ByteBuffer, HTTPHeaders) {
        let url = "\(target.apiURL)/database/1/\(target.container)/development/\(path)"
            + "?ckAPIToken=\(target.apiToken)&ckWebAuthToken=\(webAuthToken ?? target.webAuthToken)"
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(ByteBuffer(bytes: data))
        let response = try await http.execute(request, timeout: .seconds(120))
        let buffer = try await response.body.collect(upTo: 64 << 20)
        return (Int(response.status.code), buffer, response.headers)
    }

    /// A JSON value as JSONSerialization gives one (numbers as Int or Double, null as NSNull).
    static func foundationValue(_ value: JSONValue) -> Any {
        switch value {
        case .null: NSNull()
        case .bool(let flag): flag
        case .int(let number): Int(number)
        case .double(let number): number
        case .string(let text): text
        case .array(let values): values.map(foundationValue)
        case .object(let members): members.mapValues(foundationValue)
        }
    }

    /// Like `post`, but anything but a 200 without record errors is a failure.
    func expectOK(_ operation: String, _ body: JSONObject, as webAuthToken: String? = nil) async throws -> Reply {
        let reply = try await post(operation, body, as: webAuthToken)
        guard reply.status == 200, reply.errorCode == nil else {
            throw BenchFailure(description: "\(operation): HTTP \(reply.status) \(reply.errorCode ?? "") \(reply.body["reason"] as? String ?? "")")
        }
        return reply
    }

    /// Creates a custom zone (an existing one is returned unchanged).
    func createZone(_ name: String, as webAuthToken: String? = nil) async throws {
        try await createZones([name], as: webAuthToken)
    }

    /// Creates custom zones, 200 a request (the API's most operations).
    func createZones(_ names: [String], as webAuthToken: String? = nil) async throws {
        for start in stride(from: 0, to: names.count, by: 200) {
            _ = try await expectOK("zones/modify", ["operations": names[start..<min(start + 200, names.count)].map {
                ["operationType": "create", "zone": ["zoneID": ["zoneName": $0]]]
            }], as: webAuthToken)
        }
    }
}
