import Foundation
import Hummingbird
import Logging
import StratusCore
import StratusPostgres

/// `records/resolve` (short GUIDs → share metadata) and `records/accept` (joins the caller to
/// shares). Apple documents both on the public database's path; any database segment is accepted.
struct ShareRoutes<Context: StratusRequestContext>: Sendable {
    let shares: ShareStore
    let authenticator: Authenticator
    let limits: APILimits
    let secretKey: SecretKey
    let assetSettings: AssetSettings
    let shareURL: String?

    func register(on router: Router<Context>) {
        let base = "/database/1/:container/:environment/:database/records"
        router.post("\(base)/resolve") { request, context in try await answer(request, context, accepting: false) }
        router.post("\(base)/accept") { request, context in try await answer(request, context, accepting: true) }
    }

    /// One short GUID dictionary: `{value, shouldFetchRootRecord?, rootRecordDesiredKeys?}`, or the
    /// short GUID as a plain string.
    struct ShortGUID: Decodable {
        var value: String
        var shouldFetchRootRecord: Bool?
        var rootRecordDesiredKeys: [String]?

        enum CodingKeys: String, CodingKey { case value, shouldFetchRootRecord, rootRecordDesiredKeys }

        init(from decoder: any Decoder) throws {
            if let text = try? decoder.singleValueContainer().decode(String.self) {
                value = text
                return
            }
            let container = try decoder.container(keyedBy: CodingKeys.self)
            value = try container.decode(String.self, forKey: .value)
            shouldFetchRootRecord = try container.decodeIfPresent(Bool.self, forKey: .shouldFetchRootRecord)
            rootRecordDesiredKeys = try container.decodeIfPresent([String].self, forKey: .rootRecordDesiredKeys)
        }
    }

    struct ResolveRequest: Decodable {
        var shortGUIDs: [ShortGUID]
        var numbersAsStrings: Bool?
    }

    /// The longest short GUID accepted (the server makes them 22 characters long).
    static var maxShortGUIDLength: Int { 64 }

    func answer(_ request: Request, _ context: Context, accepting: Bool) async throws -> Response {
        let opened = try await DatabaseCall.open(request, context: context, authenticator: authenticator, limits: limits, access: .read)
        guard let user = opened.caller.userRecordName else {
            throw StratusError(.authenticationRequired, "Sign in to \(accepting ? "accept" : "resolve") shares", redirectURL: authenticator.redirectURL(for: opened.caller))
        }
        let parsed = try RequestBody.decode(ResolveRequest.self, from: opened.body)
        guard !parsed.shortGUIDs.isEmpty else { throw StratusError(.badRequest, "shortGUIDs must not be empty") }
        guard parsed.shortGUIDs.count <= limits.maxOperations else {
            throw StratusError(.limitExceeded, "At most \(limits.maxOperations) short GUIDs are allowed per request, got \(parsed.shortGUIDs.count)")
        }
        var seen = Set<ExactName>()
        for (index, item) in parsed.shortGUIDs.enumerated() {
            guard !item.value.isEmpty, item.value.utf8.count <= Self.maxShortGUIDLength else {
                throw StratusError(.badRequest, "shortGUIDs[\(index)].value must be 1 to \(Self.maxShortGUIDLength) bytes")
            }
            try ClientText.check(item.value, "shortGUIDs[\(index)].value")
            try ClientText.check(names: item.rootRecordDesiredKeys, "shortGUIDs[\(index)].rootRecordDesiredKeys", limit: limits.maxNames)
            guard seen.insert(ExactName(item.value)).inserted else {
                throw StratusError(.badRequest, "Short GUID '\(item.value)' appears more than once in shortGUIDs; send each once")
            }
        }
        let guids = parsed.shortGUIDs.map(\.value)
        let path = opened.path
        let results = accepting
            ? try await shares.accept(guids, container: path.container, environment: path.environment, user: user, requestID: context.requestID, logger: context.logger)
            : try await shares.resolve(guids, container: path.container, environment: path.environment, user: user, logger: context.logger)
        let links = AssetLinks(request: request, key: secretKey, settings: assetSettings)
        let url = ShareLinks(request: request, template: shareURL, container: path.container)
        let numbersAsStrings = parsed.numbersAsStrings ?? false
        let answers: [JSONValue] = parsed.shortGUIDs.map { item in
            switch results[item.value] ?? .failure(StratusError(.notFound, "No share has short GUID '\(item.value)'")) {
            case .failure(let error):
                return .object([
                    "shortGUID": .string(item.value), "serverErrorCode": .string(error.code.rawValue), "reason": .string(error.reason),
                    "uuid": .string(context.requestID),
                ])
            case .success(let resolved):
                var members: [String: JSONValue] = [
                    "shortGUID": .string(resolved.shortGUID), "containerIdentifier": .string(path.container),
                    "environment": .string(path.environment.rawValue), "databaseScope": .string("SHARED"), "zoneID": resolved.zone.json,
                    "share": RecordWire.dictionary(
                        resolved.share, zone: resolved.zone, desiredKeys: nil, numbersAsStrings: numbersAsStrings, links: links, shareURL: url.url),
                    "ownerIdentity": .object([
                        "userRecordName": .string(resolved.zone.ownerRecordName),
                        "lookupInfo": .object(["userRecordName": .string(resolved.zone.ownerRecordName)]),
                    ]),
                ]
                if let shortGUID = resolved.share.shortGUID { members["url"] = .string(url.url(shortGUID)) }
                if let root = resolved.rootRecordName { members["rootRecordName"] = .string(root) }
                if item.shouldFetchRootRecord == true, let root = resolved.root {
                    members["rootRecord"] = RecordWire.dictionary(
                        root, zone: resolved.zone, desiredKeys: item.rootRecordDesiredKeys, numbersAsStrings: numbersAsStrings, links: links)
                }
                if let participant = resolved.participant {
                    members["participantType"] = .string(participant.type.rawValue)
                    members["participantStatus"] = .string(participant.acceptanceStatus.rawValue)
                    members["participantPermission"] = .string(participant.permission.rawValue)
                }
                return .object(members)
            }
        }
        return json(JSONValue.object(["results": .array(answers)]))
    }
}

/// Share URLs: the configured template (`{container}`, `{shortGUID}`), or the API's own address
/// followed by `/share/{container}/{shortGUID}`.
struct ShareLinks: Sendable {
    let template: String
    let container: String

    init(request: Request, template: String?, container: String) {
        self.template = template ?? publicBaseURL(request) + "/share/{container}/{shortGUID}"
        self.container = container
    }

    /// The URL of the share with this short GUID.
    @Sendable func url(_ shortGUID: String) -> String {
        ShareRecord.url(template: template, container: container, shortGUID: shortGUID)
    }
}
