import Crypto
import Foundation
import Hummingbird
import Logging
import NIOCore
import StratusBlobStore
import StratusCore
import StratusPostgres

/// `assets/upload` (upload URLs for record fields), the upload itself (`POST` of the bytes to such a
/// URL, answered with the asset's receipt) and downloads (`GET` of a record's `downloadURL`, with
/// `Range`). Bytes stream between the connection and the blob store: no asset is held whole in memory.
struct AssetRoutes<Context: StratusRequestContext>: Sendable {
    let assets: AssetStore
    let records: RecordStore
    let blobs: any BlobStore
    let authenticator: Authenticator
    let limits: APILimits
    let settings: AssetSettings
    let secretKey: SecretKey

    func register(on router: Router<Context>) {
        router.post("/database/1/:container/:environment/:database/assets/upload") { request, context in try await requestUpload(request, context) }
        router.post("/database/1/:container/:environment/:database/assets/rereference") { request, context in try await rereference(request, context) }
        router.post("/assets/1/upload/:grant") { request, context in try await upload(request, context) }
        router.get("/assets/1/download/:grant") { request, context in try await download(request, context) }
    }

    struct UploadRequest: Decodable {
        struct Token: Decodable {
            var recordName: String?
            var recordType: String
            var fieldName: String
        }
        var zoneID: WireZoneID?
        var tokens: [Token]
    }

    func requestUpload(_ request: Request, _ context: Context) async throws -> Response {
        let opened = try await DatabaseCall.open(request, context: context, authenticator: authenticator, limits: limits, access: .write)
        let parsed = try RequestBody.decode(UploadRequest.self, from: opened.body)
        guard !parsed.tokens.isEmpty else { throw StratusError(.badRequest, "tokens must name at least one asset field") }
        guard parsed.tokens.count <= limits.maxOperations else {
            throw StratusError(.limitExceeded, "At most \(limits.maxOperations) tokens are allowed per request, got \(parsed.tokens.count)")
        }
        let zone = try opened.target.zone(named: parsed.zoneID?.zoneName, owner: parsed.zoneID?.ownerRecordName, rules: .assets).zone
        let expiresAt = Int64(Date().timeIntervalSince1970 * 1000) + Int64(settings.urlLifetime.components.seconds) * 1000
        let base = publicBaseURL(request)
        var tokens: [JSONValue] = []
        for (index, token) in parsed.tokens.enumerated() {
            let recordName = token.recordName ?? UUID().uuidString
            do {
                try Record.validate(recordName: recordName)
                try Record.validate(recordType: token.recordType)
                try Record.validate(fieldName: token.fieldName)
            } catch {
                throw StratusError(error.code, "tokens[\(index)]: \(error.reason)")
            }
            let grant = AssetUploadGrant(
                assetID: UUID(), database: opened.database, zoneName: zone.zoneName, recordName: recordName, recordType: token.recordType,
                fieldName: token.fieldName, expiresAt: expiresAt, uploader: opened.caller.userRecordName)
            tokens.append(.object([
                "recordName": .string(recordName), "fieldName": .string(token.fieldName), "recordType": .string(token.recordType),
                "url": .string("\(base)/assets/1/upload/\(grant.signed(with: secretKey))"),
            ]))
        }
        return json(JSONValue.object(["tokens": .array(tokens)]))
    }

    struct RereferenceRequest: Decodable {
        struct Field: Decodable {
            var recordName: String
            var fieldName: String
        }
        var zoneID: WireZoneID?
        var assets: [Field]
    }

    /// `assets/rereference`: new receipts for the assets that record fields the caller may read hold,
    /// sharing their bytes, to bind to another record's field with `records/modify` without uploading
    /// again. Each field answers `{recordName, fieldName, value}` (`value` an asset dictionary, or a
    /// list of them for an ASSETID_LIST field), or a `NOT_FOUND` error: a record that does not exist,
    /// is expired, may not be read, or has no asset in that field all look the same.
    func rereference(_ request: Request, _ context: Context) async throws -> Response {
        let opened = try await DatabaseCall.open(request, context: context, authenticator: authenticator, limits: limits, access: .write)
        let database = opened.database
        guard opened.target.participant == nil else {
            throw StratusError(.badRequest, "assets/rereference serves the private and public databases; re-reference a shared record's assets from its owner's database")
        }
        let parsed = try RequestBody.decode(RereferenceRequest.self, from: opened.body)
        guard !parsed.assets.isEmpty else { throw StratusError(.badRequest, "assets must name at least one asset field") }
        guard parsed.assets.count <= limits.maxOperations else {
            throw StratusError(.limitExceeded, "At most \(limits.maxOperations) asset fields are allowed per request, got \(parsed.assets.count)")
        }
        let zone = try opened.target.zone(named: parsed.zoneID?.zoneName, owner: parsed.zoneID?.ownerRecordName, rules: .assets).zone
        var seen = Set<String>()
        for (index, field) in parsed.assets.enumerated() {
            do {
                try Record.validate(recordName: field.recordName)
                try Record.validate(fieldName: field.fieldName)
            } catch {
                throw StratusError(error.code, "assets[\(index)]: \(error.reason)")
            }
            guard seen.insert("\(field.recordName)\u{0}\(field.fieldName)").inserted else {
                throw StratusError(.badRequest, "assets[\(index)]: record '\(ClientText.excerpt(field.recordName))' field '\(ClientText.excerpt(field.fieldName))' appears more than once")
            }
        }
        let names = Array(Set(parsed.assets.map(\.recordName)))
        let read = try await records.lookup(names, zone: zone, in: database, reader: opened.caller.userRecordName, logger: context.logger)
        // The assets each field holds, in order; a field that holds none answers NOT_FOUND.
        var held: [[UUID]?] = []
        for field in parsed.assets {
            let value = read.records[ExactName(field.recordName)]?.fields[field.fieldName]
            let ids = value.map { $0.assetReceipts.compactMap { $0.flatMap(AssetValue.assetID(receipt:)) } } ?? []
            held.append(ids.isEmpty ? nil : ids)
        }
        let total = held.reduce(0) { $0 + ($1?.count ?? 0) }
        guard total <= limits.maxOperations else {
            throw StratusError(.limitExceeded, "At most \(limits.maxOperations) assets may be re-referenced per request; these fields hold \(total)")
        }
        let made = try await assets.rereference(Array(Set(held.compactMap { $0 }.joined())), database: database, logger: context.logger)
        var results: [JSONValue] = []
        for (field, ids) in zip(parsed.assets, held) {
            let values = ids?.compactMap { made[$0]?.json } ?? []
            guard let ids, values.count == ids.count else {
                let error = RecordWire.error(StratusError(.notFound,
                    "Record '\(ClientText.excerpt(field.recordName))' has no asset in field '\(ClientText.excerpt(field.fieldName))' that this caller may read"),
                    recordName: field.recordName, uuid: context.requestID)
                guard case .object(var members) = error else { continue }
                members["fieldName"] = .string(field.fieldName)
                results.append(.object(members))
                continue
            }
            let isList = if case .list = read.records[ExactName(field.recordName)]?.fields[field.fieldName] { true } else { false }
            results.append(.object([
                "recordName": .string(field.recordName), "fieldName": .string(field.fieldName),
                "value": isList ? .array(values) : values[0],
            ]))
        }
        return json(JSONValue.object(["assets": .array(results)]))
    }

    func upload(_ request: Request, _ context: Context) async throws -> Response {
        guard let text = context.parameters.get("grant"), let grant = AssetUploadGrant.open(text, key: secretKey) else {
            throw StratusError(.authenticationFailed, "This upload URL is not valid; ask assets/upload for one")
        }
        guard grant.expiresAt > Int64(Date().timeIntervalSince1970 * 1000) else {
            throw StratusError(.authenticationFailed, "This upload URL has expired; ask assets/upload for a new one")
        }
        // A multipart/form-data body carries the file in one part; any other body is the file.
        let boundary = try MultipartUpload.boundary(contentType: request.headers[.contentType])
        let declaredLimit = settings.maxBytes + (boundary == nil ? 0 : MultipartUpload.maxEnvelopeBytes)
        if let declared = request.headers[.contentLength].flatMap({ Int64($0) }), declared > declaredLimit {
            throw UploadMeter.tooLarge(settings.maxBytes)
        }
        let expected = try Self.contentDigest(request.headers[.init("Content-Digest")!])
        // The upload URL stands for the caller who asked for it: the container's own quota is read here.
        let own = try await authenticator.containers.limits(of: grant.database.container, logger: context.logger)
        let quota = (own ?? ContainerLimits()).userQuota(default: limits.userQuotaBytes)
        // A multipart body's length is more than its file's: its quota is checked when the file is stored.
        if quota > 0, boundary == nil, let declared = request.headers[.contentLength].flatMap({ Int64($0) }) {
            // A declared length past what the user has left is refused before any byte is stored.
            let used = try await assets.usage(
                container: grant.database.container, environment: grant.database.environment, owner: grant.usageOwner, logger: context.logger)
            if used + declared > quota {
                throw StratusError(.quotaExceeded, AssetStore.quotaReason(size: declared, total: used + declared, quota: quota))
            }
        }
        guard try await assets.beginUpload(grant, logger: context.logger) else {
            throw StratusError(.badRequest, "This upload URL was used already; ask assets/upload for another")
        }
        let receipt = AssetValue.receipt(grant.assetID)
        let key = BlobKey(receipt)!
        let meter = UploadMeter(limit: settings.maxBytes)
        let multipart = boundary.map(MultipartFile.init)
        do {
            if let multipart {
                let file = StagedBody(base: request.body, stage: multipart)
                try await blobs.put(key: key, body: StagedBody(base: file, stage: meter), logger: context.logger)
            } else {
                try await blobs.put(key: key, body: StagedBody(base: request.body, stage: meter), logger: context.logger)
            }
            let (size, digest) = meter.total
            if let expected, Data(digest) != expected {
                throw StratusError(.badRequest, "The bytes received do not match Content-Digest; nothing was stored")
            }
            let value = AssetValue(receipt: receipt, size: size, fileChecksum: AssetValue.fileChecksum(digest))
            try await assets.finishUpload(
                grant.assetID, size: size, fileChecksum: value.fileChecksum, usageOwner: grant.usageOwner, quota: quota,
                containerQuota: (own ?? ContainerLimits()).quota,
                logger: context.logger)
            return json(JSONValue.object(["singleFile": value.json]))
        } catch {
            try? await blobs.delete(key: key, logger: context.logger)
            try? await assets.abandonUpload(grant.assetID, logger: context.logger)
            if meter.exceeded { throw UploadMeter.tooLarge(settings.maxBytes) }
            if let refusal = multipart?.refusal { throw refusal }
            if error is StratusError { throw error }
            context.logger.error("storing an asset failed", metadata: ["error": "\(error)"])
            throw StratusError(.tryAgainLater, "The asset could not be stored; send it again")
        }
    }

    /// The SHA-256 an RFC 9530 `Content-Digest: sha-256=:base64:` header names; nil without one.
    static func contentDigest(_ header: String?) throws(StratusError) -> Data? {
        guard let header else { return nil }
        for member in header.split(separator: ",") {
            let parts = member.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1)
            guard parts.count == 2, parts[0].lowercased() == "sha-256" else { continue }
            let value = parts[1]
            guard value.count > 2, value.hasPrefix(":"), value.hasSuffix(":"), let digest = Data(base64Encoded: String(value.dropFirst().dropLast())),
                  digest.count == 32 else {
                throw StratusError(.badRequest, "Content-Digest sha-256 must be :base64 of 32 bytes:")
            }
            return digest
        }
        return nil
    }

    func download(_ request: Request, _ context: Context) async throws -> Response {
        guard let text = context.parameters.get("grant"), let grant = AssetDownloadGrant.open(text, key: secretKey),
              grant.expiresAt > Int64(Date().timeIntervalSince1970 * 1000) else {
            throw StratusError(.accessDenied, "This download URL is not valid or has expired; fetch the record again for a new one")
        }
        guard let asset = try await assets.find([grant.assetID], logger: context.logger)[grant.assetID], let value = asset.value else {
            throw StratusError(.notFound, "This asset no longer exists")
        }
        var headers = HTTPFields()
        headers[.acceptRanges] = "bytes"
        headers[.contentType] = "application/octet-stream"
        headers[.eTag] = "\"\(value.fileChecksum)\""
        headers[.cacheControl] = "private, max-age=\(settings.urlLifetime.components.seconds)"
        let range: Range<Int64>
        let status: HTTPResponse.Status
        switch ByteRange.parse(request.headers[.range], size: value.size) {
        case .whole:
            range = 0..<value.size
            status = .ok
        case .partial(let partial):
            range = partial
            status = .partialContent
            headers[.contentRange] = "bytes \(partial.lowerBound)-\(partial.upperBound - 1)/\(value.size)"
        case .unsatisfiable:
            var errorHeaders = HTTPFields()
            errorHeaders[.contentType] = "application/json; charset=utf-8"
            errorHeaders[.contentRange] = "bytes */\(value.size)"
            let error = StratusError(ServerErrorCode("BAD_REQUEST", httpStatus: 416), "The range starts past the asset's \(value.size) bytes")
            return Response(status: .rangeNotSatisfiable, headers: errorHeaders, body: .init(byteBuffer: ByteBuffer(data: EventCoding.encode(ErrorDictionary(error, uuid: context.requestID)))))
        }
        headers[.contentLength] = String(range.count)
        let blobs = blobs
        let logger = context.logger
        let key = BlobKey(AssetValue.receipt(asset.blobID))!
        return Response(status: status, headers: headers, body: ResponseBody(contentLength: Int(range.count)) { writer in
            try await blobs.read(key: key, range: range, logger: logger) { chunk in try await writer.write(chunk) }
            try await writer.finish(nil)
        })
    }
}
