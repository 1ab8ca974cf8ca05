import Foundation
import Hummingbird
import Logging
import StratusCore
import StratusPostgres

/// `subscriptions/modify`, `subscriptions/list` and `subscriptions/lookup`.
struct SubscriptionRoutes<Context: StratusRequestContext>: Sendable {
    let subscriptions: SubscriptionStore
    let authenticator: Authenticator
    let limits: APILimits

    func register(on router: Router<Context>) {
        let base = "/database/1/:container/:environment/:database/subscriptions"
        router.post("\(base)/modify") { request, context in try await modify(request, context) }
        router.post("\(base)/list") { request, context in try await list(request, context) }
        router.get("\(base)/list") { request, context in try await list(request, context) }
        router.post("\(base)/lookup") { request, context in try await lookup(request, context) }
    }

    struct ModifyRequest: Decodable {
        struct Operation: Decodable {
            var operationType: String
            var subscription: JSONValue
        }
        var operations: [Operation]
    }

    struct LookupRequest: Decodable {
        struct Item: Decodable { var subscriptionID: String }
        var subscriptions: [Item]
    }

    /// Subscriptions belong to a user: every call needs one (a server key acts for its own user).
    private func open(_ request: Request, _ context: Context) async throws -> (DatabaseID, String, Data, ContainerLimits) {
        let opened = try await DatabaseCall.open(request, context: context, authenticator: authenticator, limits: limits, access: .write)
        guard let subscriber = opened.caller.userRecordName else {
            throw StratusError(.authenticationRequired, "Sign in to use subscriptions", redirectURL: authenticator.redirectURL(for: opened.caller))
        }
        return (opened.database, subscriber, opened.body, opened.caller.limits)
    }

    func modify(_ request: Request, _ context: Context) async throws -> Response {
        let (database, subscriber, body, containerLimits) = try await open(request, context)
        let parsed = try RequestBody.decode(ModifyRequest.self, from: body)
        guard !parsed.operations.isEmpty else { throw StratusError(.badRequest, "operations must not be empty") }
        guard parsed.operations.count <= limits.maxOperations else {
            throw StratusError(.limitExceeded, "At most \(limits.maxOperations) operations are allowed per request, got \(parsed.operations.count)")
        }
        var limits = Subscription.Limits()
        limits.query = self.limits.query
        // Each operation is checked on its own: a bad one answers its error in place, the others go on.
        var checked: [Result<SubscriptionStore.Operation, StratusError>] = []
        var ids: [String] = []
        var seen = Set<ExactName>()
        for (index, operation) in parsed.operations.enumerated() {
            let id = operation.subscription["subscriptionID"]?.stringValue ?? ""
            ids.append(id)
            let result: Result<SubscriptionStore.Operation, StratusError>
            do {
                switch operation.operationType {
                case "create", "update":
                    let subscription = try Subscription.parse(operation.subscription, scope: database.scope, databaseOwner: database.owner, limits: limits)
                    ids[index] = subscription.subscriptionID
                    result = .success(operation.operationType == "create" ? .create(subscription) : .update(subscription))
                case "delete":
                    guard case .string(let id) = operation.subscription["subscriptionID"] else {
                        throw StratusError(.badRequest, "operations[\(index)]: delete needs subscription.subscriptionID")
                    }
                    try Subscription.validate(subscriptionID: id)
                    result = .success(.delete(subscriptionID: id))
                default:
                    throw StratusError(.badRequest, "operations[\(index)]: unknown operationType '\(operation.operationType.prefix(64))'; use create, update or delete")
                }
            } catch let error as StratusError {
                result = .failure(error)
            }
            if case .success = result, !seen.insert(ExactName(ids[index])).inserted {
                throw StratusError(.badRequest, "Subscription '\(ClientText.excerpt(ids[index]))' appears in more than one operation; send one operation per subscription")
            }
            checked.append(result)
        }
        let valid = checked.compactMap { try? $0.get() }
        let outcomes = valid.isEmpty ? [] : try await subscriptions.modify(
            valid, in: database, subscriber: subscriber, maxPerSubscriber: containerLimits.subscriptionsPerUser(default: self.limits.maxSubscriptionsPerUser), logger: context.logger)
        var stored = outcomes.makeIterator()
        let results: [JSONValue] = checked.enumerated().map { index, check in
            let outcome: Result<SubscriptionStore.Outcome, StratusError>
            switch check {
            case .failure(let error): outcome = .failure(error)
            case .success: outcome = stored.next() ?? .failure(StratusError(.internalError, "no outcome"))
            }
            switch outcome {
            case .success(.saved(let subscription)): return subscription.json
            case .success(.deleted(let id)): return .object(["subscriptionID": .string(id), "deleted": .bool(true)])
            case .failure(let error): return Self.error(error, subscriptionID: ids[index], uuid: context.requestID)
            }
        }
        return json(JSONValue.object(["subscriptions": .array(results)]))
    }

    func list(_ request: Request, _ context: Context) async throws -> Response {
        let (database, subscriber, _, _) = try await open(request, context)
        let found = try await subscriptions.list(in: database, subscriber: subscriber, logger: context.logger)
        return json(JSONValue.object(["subscriptions": .array(found.map(\.json))]))
    }

    func lookup(_ request: Request, _ context: Context) async throws -> Response {
        let (database, subscriber, body, _) = try await open(request, context)
        let parsed = try RequestBody.decode(LookupRequest.self, from: body)
        guard parsed.subscriptions.count <= limits.maxOperations else {
            throw StratusError(.limitExceeded, "At most \(limits.maxOperations) subscriptions may be looked up per request")
        }
        var seen = Set<ExactName>()
        for (index, item) in parsed.subscriptions.enumerated() {
            do { try Subscription.validate(subscriptionID: item.subscriptionID) } catch {
                throw StratusError(.badRequest, "subscriptions[\(index)]: \(error.reason)")
            }
            guard seen.insert(ExactName(item.subscriptionID)).inserted else {
                throw StratusError(.badRequest, "Subscription '\(ClientText.excerpt(item.subscriptionID))' appears more than once; ask for each once")
            }
        }
        let found = try await subscriptions.lookup(parsed.subscriptions.map(\.subscriptionID), in: database, subscriber: subscriber, logger: context.logger)
        let results: [JSONValue] = parsed.subscriptions.map { item in
            found[item.subscriptionID]?.json
                ?? Self.error(StratusError(.notFound, "Subscription '\(ClientText.excerpt(item.subscriptionID))' does not exist"),
                              subscriptionID: item.subscriptionID, uuid: context.requestID)
        }
        return json(JSONValue.object(["subscriptions": .array(results)]))
    }

    /// A per-subscription error dictionary.
    static func error(_ error: StratusError, subscriptionID: String, uuid: String) -> JSONValue {
        var members: [String: JSONValue] = [
            "subscriptionID": .string(String(ClientText.excerpt(subscriptionID))), "serverErrorCode": .string(error.code.rawValue),
            "reason": .string(error.reason), "uuid": .string(uuid),
        ]
        if let retryAfter = error.retryAfter { members["retryAfter"] = .int(Int64(retryAfter)) }
        return .object(members)
    }
}
