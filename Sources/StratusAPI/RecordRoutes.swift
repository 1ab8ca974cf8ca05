import Foundation
import Hummingbird
import Logging
import StratusCore
import StratusPostgres

/// `records/modify` and `records/lookup`.
struct RecordRoutes<Context: StratusRequestContext>: Sendable {
    let records: RecordStore
    let shares: ShareStore
    let shareURL: String?
    let authenticator: Authenticator
    let limits: APILimits
    let assets: AssetBinding
    let secretKey: SecretKey

    func register(on router: Router<Context>) {
        let base = "/database/1/:container/:environment/:database/records"
        router.post("\(base)/modify") { request, context in try await modify(request, context) }
        router.post("\(base)/lookup") { request, context in try await lookup(request, context) }
    }

    struct ModifyRequest: Decodable {
        struct Operation: Decodable {
            var operationType: String
            var record: WireRecordInput
            var desiredKeys: [String]?
        }
        var operations: [Operation]
        var zoneID: WireZoneID?
        var atomic: Bool?
        var desiredKeys: [String]?
        var numbersAsStrings: Bool?
    }

    struct LookupRequest: Decodable {
        struct Item: Decodable {
            var recordName: String
            var desiredKeys: [String]?
        }
        var records: [Item]
        var zoneID: WireZoneID?
        var desiredKeys: [String]?
        var numbersAsStrings: Bool?
    }

    func modify(_ request: Request, _ context: Context) async throws -> Response {
        let opened = try await DatabaseCall.open(request, context: context, authenticator: authenticator, limits: limits, access: .write)
        let caller = opened.caller
        let parsed = try RequestBody.decode(ModifyRequest.self, from: opened.body)
        guard !parsed.operations.isEmpty else { throw StratusError(.badRequest, "operations must not be empty") }
        guard parsed.operations.count <= limits.maxOperations else {
            throw StratusError(.limitExceeded, "At most \(limits.maxOperations) operations are allowed per request, got \(parsed.operations.count)")
        }
        // In the shared database the write lands in the owner's zone for the participant, whose
        // access the write's transaction checks.
        let target = try opened.target.zone(named: parsed.zoneID?.zoneName, owner: parsed.zoneID?.ownerRecordName, rules: .records)
        let (zone, database) = (target.zone, target.database)
        try ClientText.check(names: parsed.desiredKeys, "desiredKeys", limit: limits.maxNames)
        var commands: [RecordStore.Command] = []
        // By exact bytes: canonically equivalent names are distinct records.
        var names = Set<ExactName>()
        var storeLimits = RecordStore.Limits()
        storeLimits.maxRecordBytes = limits.maxRecordBytes
        storeLimits.maxEventBytes = limits.maxEventBytes
        storeLimits.userQuotaBytes = caller.limits.userQuota(default: limits.userQuotaBytes)
        storeLimits.containerQuota = caller.limits.quota
        for (index, operation) in parsed.operations.enumerated() {
            guard let type = RecordOperationType(rawValue: operation.operationType) else {
                throw StratusError(.badRequest, "operations[\(index)]: unknown operationType '\(operation.operationType.prefix(64))'; use one of \(RecordOperationType.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            try ClientText.check(names: operation.desiredKeys, "operations[\(index)].desiredKeys", limit: limits.maxNames)
            // A record whose fields as sent cannot fit its limit is refused before they are decoded.
            let leastBytes = type.isDelete ? 0 : WriteLimits.leastRecordBytes(sent: operation.record.fields ?? [:], stop: storeLimits.maxRecordBytes)
            let input: RecordInput
            do {
                input = try RecordWire.input(operation.record, operation: type, zone: zone, decodingFields: leastBytes <= storeLimits.maxRecordBytes)
            } catch {
                throw StratusError(error.code, "operations[\(index)]: \(error.reason)")
            }
            guard names.insert(ExactName(input.recordName)).inserted else {
                throw StratusError(.badRequest, "Record '\(ClientText.excerpt(input.recordName))' appears in more than one operation; send one operation per record")
            }
            var refusal: StratusError?
            do {
                try storeLimits.checkSentRecord(input.recordName, leastBytes: leastBytes)
            } catch {
                refusal = error
            }
            commands.append(RecordStore.Command(type: type, input: input, refusal: refusal))
        }
        // Default zones cannot be atomic (no zone-wide transaction); custom zones are atomic unless told otherwise.
        commands = try await assets.bind(commands, zone: zone, database: database, logger: context.logger)
        let links = AssetLinks(request: request, key: secretKey, settings: assets.settings)
        let shareLinks = ShareLinks(request: request, template: shareURL, container: database.container)
        let atomic = !zone.isDefaultZone && (parsed.atomic ?? true)
        let deviceID = try DeviceHeader.deviceID(request)
        let causation = Causation(requestID: context.requestID, userRecordName: caller.userRecordName, deviceID: deviceID)
        let outcomes = try await records.modify(
            commands, zone: zone, in: database, atomic: atomic, causation: causation, deviceID: deviceID, limits: storeLimits, sharedWith: target.participant,
            logger: context.logger)
        await assets.saved(outcomes.compactMap { if case .success(.saved(let record)) = $0 { record } else { nil } }, logger: context.logger)
        let numbersAsStrings = parsed.numbersAsStrings ?? false
        // Written straight into the answer's bytes: a saved record's dictionary is not built first.
        let zoneID = zone.json.serialized()
        var answer = Array(#"{"records":["#.utf8)
        for (index, (operation, (command, outcome))) in zip(parsed.operations, zip(commands, outcomes)).enumerated() {
            if index > 0 { answer.append(UInt8(ascii: ",")) }
            switch outcome {
            case .success(.saved(let record)):
                RecordWire.write(
                    record, zone: zone, zoneID: zoneID, desiredKeys: operation.desiredKeys ?? parsed.desiredKeys, numbersAsStrings: numbersAsStrings,
                    links: links, shareURL: shareLinks.url, into: &answer)
            case .success(.deleted(let recordName)):
                JSONValue.object(["recordName": .string(recordName), "deleted": .bool(true), "zoneID": zone.json]).write(into: &answer)
            case .failure(let failure):
                let server = failure.serverRecord.map { RecordWire.dictionary($0, zone: zone, desiredKeys: nil, numbersAsStrings: numbersAsStrings, links: links) }
                RecordWire.error(failure.error, recordName: command.input.recordName, uuid: context.requestID, serverRecord: server).write(into: &answer)
            }
        }
        answer.append(contentsOf: "]}".utf8)
        return json(bytes: answer)
    }

    func lookup(_ request: Request, _ context: Context) async throws -> Response {
        let opened = try await DatabaseCall.open(request, context: context, authenticator: authenticator, limits: limits, access: .read)
        let parsed = try RequestBody.decode(LookupRequest.self, from: opened.body)
        guard parsed.records.count <= limits.maxOperations else {
            throw StratusError(.limitExceeded, "At most \(limits.maxOperations) records may be looked up per request")
        }
        let target = try opened.target.zone(named: parsed.zoneID?.zoneName, owner: parsed.zoneID?.ownerRecordName, rules: .records)
        let (zone, database) = (target.zone, target.database)
        try ClientText.check(names: parsed.desiredKeys, "desiredKeys", limit: limits.maxNames)
        // Each record once: a name repeated in one request would multiply the response, not the answer.
        var names = Set<ExactName>()
        for (index, item) in parsed.records.enumerated() {
            try Record.validate(recordName: item.recordName, "records[\(index)].recordName")
            try ClientText.check(names: item.desiredKeys, "records[\(index)].desiredKeys", limit: limits.maxNames)
            guard names.insert(ExactName(item.recordName)).inserted else {
                throw StratusError(.badRequest, "Record '\(ClientText.excerpt(item.recordName))' appears more than once in records; ask for each record once")
            }
        }
        let recordNames = parsed.records.map(\.recordName)
        let numbersAsStrings = parsed.numbersAsStrings ?? false
        let links = AssetLinks(request: request, key: secretKey, settings: assets.settings)
        let shareLinks = ShareLinks(request: request, template: shareURL, container: database.container)
        // A private database's records (all its user's) are answered from their stored text, copied
        // where it can be (one statement, no record read into values and written out again); the
        // public database (security roles decide per record) and the shared database read records.
        if opened.target.belongsToUser,
           let stored = try await records.lookupStored(recordNames, zone: zone, in: database, logger: context.logger) {
            var answer = Array(#"{"records":["#.utf8)
            let zoneID = zone.json.serialized()
            for (index, item) in parsed.records.enumerated() {
                if index > 0 { answer.append(UInt8(ascii: ",")) }
                guard let text = stored[ExactName(item.recordName)] else {
                    RecordWire.error(StratusError(.notFound, "Record '\(ClientText.excerpt(item.recordName))' does not exist"), recordName: item.recordName, uuid: context.requestID)
                        .write(into: &answer)
                    continue
                }
                try RecordWire.write(
                    stored: text, zone: zone, zoneID: zoneID, desiredKeys: (item.desiredKeys ?? parsed.desiredKeys).map(Set.init),
                    numbersAsStrings: numbersAsStrings, links: links, shareURL: shareLinks.url, into: &answer)
            }
            answer.append(contentsOf: "]}".utf8)
            return json(bytes: answer)
        }
        let read = if let participant = target.participant {
            RecordStore.Read(records: try await shares.lookup(
                recordNames, zoneName: zone.zoneName, owner: zone.ownerRecordName, user: participant, container: database.container,
                environment: database.environment, logger: context.logger), denied: [:])
        } else {
            try await records.lookup(recordNames, zone: zone, in: database, reader: opened.caller.userRecordName, logger: context.logger)
        }
        var answer = Array(#"{"records":["#.utf8)
        let zoneID = zone.json.serialized()
        for (index, item) in parsed.records.enumerated() {
            if index > 0 { answer.append(UInt8(ascii: ",")) }
            if let recordType = read.denied[ExactName(item.recordName)] {
                RecordWire.error(StratusError(.accessDenied,
                    "Record '\(ClientText.excerpt(item.recordName))' cannot be read: in the public database no security role this user holds has READ on record type '\(ClientText.excerpt(recordType))'"),
                    recordName: item.recordName, uuid: context.requestID).write(into: &answer)
            } else if let record = read.records[ExactName(item.recordName)] {
                RecordWire.write(
                    record, zone: zone, zoneID: zoneID, desiredKeys: item.desiredKeys ?? parsed.desiredKeys, numbersAsStrings: numbersAsStrings,
                    links: links, shareURL: shareLinks.url, into: &answer)
            } else {
                RecordWire.error(StratusError(.notFound, "Record '\(ClientText.excerpt(item.recordName))' does not exist"), recordName: item.recordName, uuid: context.requestID)
                    .write(into: &answer)
            }
        }
        answer.append(contentsOf: "]}".utf8)
        return json(bytes: answer)
    }
}
