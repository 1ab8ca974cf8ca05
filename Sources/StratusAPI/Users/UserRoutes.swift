import Foundation
import Hummingbird
import Logging
import StratusCore
import StratusPostgres

/// The user endpoints: `users/caller` (and the older `users/current`) tell callers who they are;
/// `users/discover`, `users/lookup/email` and `users/lookup/id` find other users of the container —
/// only those who made themselves discoverable. A user who is not discoverable (or does not exist)
/// is never told apart from one who does not exist, and only a discoverable user's email address
/// and name leave the server.
struct UserRoutes<Context: StratusRequestContext>: Sendable {
    let directory: UserDirectory
    let authenticator: Authenticator
    let limits: APILimits

    func register(on router: Router<Context>) {
        let base = "/database/1/:container/:environment/:database/users"
        router.get("\(base)/caller") { request, context in try await caller(request, context) }
        router.post("\(base)/caller") { request, context in try await caller(request, context) }
        router.get("\(base)/current") { request, context in try await current(request, context) }
        router.post("\(base)/current") { request, context in try await current(request, context) }
        router.get("\(base)/discover") { request, context in try await discoverAll(request, context) }
        router.post("\(base)/discover") { request, context in try await discover(request, context) }
        router.post("\(base)/lookup/email") { request, context in try await lookup(request, context, by: .emailAddress) }
        router.post("\(base)/lookup/id") { request, context in try await lookup(request, context, by: .userRecordName) }
    }

    /// A user identity lookup dictionary as clients send it: one of the three keys.
    struct LookupInfo: Decodable {
        var emailAddress: String?
        var phoneNumber: String?
        var userRecordName: String?
    }

    struct DiscoverRequest: Decodable {
        var lookupInfos: [LookupInfo]
    }

    struct LookupRequest: Decodable {
        var users: [LookupInfo]
    }

    /// What a lookup info asks for, checked.
    enum Wanted: Hashable {
        case emailAddress(String)
        case phoneNumber(String)
        case userRecordName(String)

        /// The lookup info as the answer repeats it.
        var json: JSONValue {
            switch self {
            case .emailAddress(let email): .object(["emailAddress": .string(email)])
            case .phoneNumber(let phone): .object(["phoneNumber": .string(phone)])
            case .userRecordName(let name): .object(["userRecordName": .string(name)])
            }
        }

        /// How two lookup infos are the same question: email addresses regardless of capitals.
        var key: String {
            switch self {
            case .emailAddress(let email): "e:" + email.lowercased()
            case .phoneNumber(let phone): "p:" + phone
            case .userRecordName(let name): "u:" + name
            }
        }
    }

    /// The key a users/lookup operation reads.
    enum LookupKey { case emailAddress, userRecordName }

    /// The longest phone number looked up (Stratus's directory holds none, so none is ever found).
    static var maxPhoneNumberBytes: Int { 64 }

    // MARK: - The caller

    func caller(_ request: Request, _ context: Context) async throws -> Response {
        let (user, identity) = try await callerIdentity(request, context)
        var lookupInfo: [String: JSONValue] = ["userRecordName": .string(user)]
        var answer: [String: JSONValue] = ["userRecordName": .string(user)]
        if let identity, identity.discoverable {
            if let email = identity.emailAddress { lookupInfo["emailAddress"] = .string(email) }
            if let names = Self.nameComponents(identity) { answer["nameComponents"] = names }
        }
        answer["lookupInfo"] = .object(lookupInfo)
        return json(JSONValue.object(answer))
    }

    /// `users/current`, the older form: `userRecordName`, and `firstName` / `lastName` for a discoverable user.
    func current(_ request: Request, _ context: Context) async throws -> Response {
        let (user, identity) = try await callerIdentity(request, context)
        var answer: [String: JSONValue] = ["userRecordName": .string(user)]
        if let identity, identity.discoverable {
            if let given = identity.nameComponents.givenName { answer["firstName"] = .string(given) }
            if let family = identity.nameComponents.familyName { answer["lastName"] = .string(family) }
        }
        return json(JSONValue.object(answer))
    }

    private func callerIdentity(_ request: Request, _ context: Context) async throws -> (String, UserIdentity?) {
        let opened = try await DatabaseCall.open(request, context: context, authenticator: authenticator, limits: limits, access: .user)
        // `.user` access guarantees a user.
        guard let user = opened.caller.userRecordName else { throw StratusError(.internalError, "no user after authentication") }
        return (user, try await directory.identity(container: opened.caller.container, userRecordName: user, logger: context.logger))
    }

    // MARK: - Discovery

    /// `GET users/discover`: Apple answers the discoverable users of the caller's address book;
    /// Stratus has no address books, so it answers the container's discoverable users, at most
    /// `maxResults`, without their email addresses (a list must not hand out addresses).
    func discoverAll(_ request: Request, _ context: Context) async throws -> Response {
        let opened = try await DatabaseCall.open(request, context: context, authenticator: authenticator, limits: limits, access: .user)
        let found = try await directory.discoverable(container: opened.caller.container, limit: limits.maxResults, logger: context.logger)
        let users = found.map { Self.discovered($0, lookupInfo: Wanted.userRecordName($0.userRecordName).json) }
        return json(JSONValue.object(["users": .array(users)]))
    }

    /// `POST users/discover`: one user identity per lookup info, in order — a discoverable user's
    /// full identity, anyone else's lookup info alone (CloudKit's answer for a user who is not
    /// discoverable, so the two cannot be told apart).
    func discover(_ request: Request, _ context: Context) async throws -> Response {
        let opened = try await DatabaseCall.open(request, context: context, authenticator: authenticator, limits: limits, access: .user)
        let body = try RequestBody.decode(DiscoverRequest.self, from: opened.body)
        let wanted = try check(body.lookupInfos, place: "lookupInfos", only: nil)
        let found = try await find(wanted, container: opened.caller.container, logger: context.logger)
        let users = wanted.map { want in
            found[want.key].map { Self.discovered($0, lookupInfo: want.json) } ?? JSONValue.object(["lookupInfo": want.json])
        }
        return json(JSONValue.object(["users": .array(users)]))
    }

    /// `users/lookup/email` and `users/lookup/id`: the discoverable users among those asked for, in
    /// the order asked; others are left out.
    func lookup(_ request: Request, _ context: Context, by key: LookupKey) async throws -> Response {
        let opened = try await DatabaseCall.open(request, context: context, authenticator: authenticator, limits: limits, access: .user)
        let body = try RequestBody.decode(LookupRequest.self, from: opened.body)
        let wanted = try check(body.users, place: "users", only: key)
        let found = try await find(wanted, container: opened.caller.container, logger: context.logger)
        let users = wanted.compactMap { want in found[want.key].map { Self.discovered($0, lookupInfo: want.json) } }
        return json(JSONValue.object(["users": .array(users)]))
    }

    /// Checks lookup infos: at most `maxOperations`, each naming exactly one key (`only`, when
    /// given), each asked once.
    private func check(_ infos: [LookupInfo], place: String, only: LookupKey?) throws(StratusError) -> [Wanted] {
        guard !infos.isEmpty else { throw StratusError(.badRequest, "\(place) must name at least one user") }
        guard infos.count <= limits.maxOperations else {
            throw StratusError(.limitExceeded, "\(place) has \(infos.count) entries; at most \(limits.maxOperations) are allowed")
        }
        var seen = Set<String>()
        var wanted: [Wanted] = []
        for (index, info) in infos.enumerated() {
            let here = "\(place)[\(index)]"
            let given = [info.emailAddress != nil, info.phoneNumber != nil, info.userRecordName != nil].filter { $0 }.count
            let want: Wanted
            switch only {
            case .emailAddress?:
                guard let email = info.emailAddress, given == 1 else { throw StratusError(.badRequest, "\(here) must hold emailAddress alone") }
                want = .emailAddress(try UserIdentityText.email(email, "\(here).emailAddress"))
            case .userRecordName?:
                guard let name = info.userRecordName, given == 1 else { throw StratusError(.badRequest, "\(here) must hold userRecordName alone") }
                want = .userRecordName(try UserIdentityText.userRecordName(name, "\(here).userRecordName"))
            case nil:
                guard given == 1 else { throw StratusError(.badRequest, "\(here) must hold exactly one of emailAddress, phoneNumber and userRecordName") }
                if let email = info.emailAddress {
                    want = .emailAddress(try UserIdentityText.email(email, "\(here).emailAddress"))
                } else if let name = info.userRecordName {
                    want = .userRecordName(try UserIdentityText.userRecordName(name, "\(here).userRecordName"))
                } else {
                    want = .phoneNumber(try Self.phoneNumber(info.phoneNumber ?? "", "\(here).phoneNumber"))
                }
            }
            guard seen.insert(want.key).inserted else { throw StratusError(.badRequest, "\(here) asks for a user already asked for") }
            wanted.append(want)
        }
        return wanted
    }

    /// The discoverable users asked for, by the key of what asked for them.
    private func find(_ wanted: [Wanted], container: String, logger: Logger) async throws -> [String: UserIdentity] {
        var emails: [String] = []
        var names: [String] = []
        for want in wanted {
            switch want {
            case .emailAddress(let email): emails.append(email)
            case .userRecordName(let name): names.append(name)
            case .phoneNumber: break
            }
        }
        var found: [String: UserIdentity] = [:]
        for identity in try await directory.discoverable(container: container, emailAddresses: emails, logger: logger) {
            if let email = identity.emailAddress { found[Wanted.emailAddress(email).key] = identity }
        }
        for identity in try await directory.discoverable(container: container, userRecordNames: names, logger: logger) {
            found[Wanted.userRecordName(identity.userRecordName).key] = identity
        }
        return found
    }

    // MARK: - Answers

    /// A discoverable user's identity: `userRecordName`, the lookup info asked with, `nameComponents`.
    static func discovered(_ identity: UserIdentity, lookupInfo: JSONValue) -> JSONValue {
        var answer: [String: JSONValue] = ["userRecordName": .string(identity.userRecordName), "lookupInfo": lookupInfo]
        if let names = nameComponents(identity) { answer["nameComponents"] = names }
        return .object(answer)
    }

    static func nameComponents(_ identity: UserIdentity) -> JSONValue? {
        guard !identity.nameComponents.isEmpty else { return nil }
        var names: [String: JSONValue] = [:]
        if let given = identity.nameComponents.givenName { names["givenName"] = .string(given) }
        if let family = identity.nameComponents.familyName { names["familyName"] = .string(family) }
        return .object(names)
    }

    static func phoneNumber(_ text: String, _ place: String) throws(StratusError) -> String {
        try ClientText.check(text, place)
        guard !text.isEmpty, text.utf8.count <= maxPhoneNumberBytes else {
            throw StratusError(.badRequest, "\(place) must be 1 to \(maxPhoneNumberBytes) bytes")
        }
        return text
    }
}
