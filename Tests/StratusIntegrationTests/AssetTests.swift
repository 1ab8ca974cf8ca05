import AsyncHTTPClient
import Crypto
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import PostgresNIO
import StratusAPI
import StratusBench
import StratusBlobStore
import StratusCore
import StratusPostgres
import StratusRelay
import StratusTesting
import StratusWorkers
import XCTest

/// Assets end to end over the filesystem blob store: `assets/upload`, the upload, binding receipts
/// in `records/modify`, signed downloads with Range, refusals, the 50 MB upload's memory, and
/// stratus-gc's orphan collection. `S3AssetTests` runs every test again over the S3 store.
class AssetTests: XCTestCase {
    typealias Body = [String: Any]

    /// The blob store under test and the settings a stratus-api process needs for it.
    func makeBlobs() async throws -> (store: any BlobStore, settings: [String: String]) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("stratus-assets-\(UUID().uuidString)").path
        addTeardownBlock { try? FileManager.default.removeItem(atPath: directory) }
        return (FileSystemBlobStore(directory: directory), ["STRATUS_ASSET_STORE": "filesystem", "STRATUS_ASSET_DIR": directory])
    }

    struct Stack: Sendable {
        let fixture: RecordAPITests.Fixture
        let client: any TestClientProtocol
        let blobs: any BlobStore
        /// What a Stratus executable needs to join the stack (database, broker, topic, blob store).
        let settings: [String: String]
    }

    /// The API on a real port over a fresh database, with `blobs` as its blob store; with `relay`,
    /// the relay publishes the event log to a topic of the test's own.
    func withStack(maxAssetBytes: Int64? = nil, quota: Int64? = nil, relay runsRelay: Bool = false, _ body: @Sendable (Stack) async throws -> Void) async throws {
        let (blobs, blobSettings) = try await makeBlobs()
        try await Self.withStack(blobs: blobs, blobSettings: blobSettings, maxAssetBytes: maxAssetBytes, quota: quota, relay: runsRelay, body)
    }

    /// `withStack` over a blob store the caller made (and removes).
    static func withStack(
        blobs: any BlobStore, blobSettings: [String: String], maxAssetBytes: Int64? = nil, quota: Int64? = nil, relay runsRelay: Bool = false,
        _ body: @Sendable (Stack) async throws -> Void
    ) async throws {
        try await TestSupport.withMigratedStore { store, url in
            let token = try await ContainerStore(store: store).create(container: "iCloud.com.example.notes", label: "test", logger: TestSupport.logger)
            var configuration = APIConfiguration(secretKey: SecretKey.generate())
            configuration.port = 0
            if let maxAssetBytes { configuration.assets.maxBytes = maxAssetBytes }
            if let quota { configuration.limits.userQuotaBytes = quota }
            let fixture = RecordAPITests.Fixture(store: store, configuration: configuration, apiToken: token)
            let dependencies = APIDependencies(store: store, readiness: [], metrics: { "" }, blobs: blobs)
            let app = buildApplication(dependencies, configuration: configuration, services: [], logger: TestSupport.logger)
            let pipeline = PipelineFixture()
            let topic = pipeline.uniqueTopic()
            let brokers = runsRelay ? try TestSupport.kafkaBrokers() : ""
            let pipelineSettings = runsRelay
                ? ["STRATUS_KAFKA_BROKERS": brokers, "STRATUS_TOPIC": topic, "STRATUS_TOPIC_PARTITIONS": "2", "STRATUS_CONSUMER_GROUP_SUFFIX": topic]
                : [:]
            let settings = blobSettings.merging(pipelineSettings.merging(["STRATUS_DATABASE_URL": url]) { _, new in new }) { _, new in new }
            try await withThrowingTaskGroup(of: Void.self) { group in
                if runsRelay {
                    let relay = Relay(
                        store: store, kafka: pipeline.kafka(brokers), configuration: pipeline.configurations(topic: topic, partitions: 2).relay,
                        logger: TestSupport.logger)
                    group.addTask { try await relay.run() }
                }
                defer { group.cancelAll() }
                try await app.test(.live) { client in
                    try await body(Stack(fixture: fixture, client: client, blobs: blobs, settings: settings))
                }
            }
        }
    }

    // MARK: helpers

    /// The path of an upload URL for one record field (`assets/upload`).
    static func uploadPath(_ client: any TestClientProtocol, _ fixture: RecordAPITests.Fixture, record: String, field: String, zone: String = "Notes", user: String = "_alice") async throws -> String {
        let (status, answer) = try await RecordAPITests.post(client, fixture.path("assets/upload", user: user), [
            "zoneID": ["zoneName": zone], "tokens": [["recordType": "Photo", "recordName": record, "fieldName": field]],
        ])
        XCTAssertEqual(status, 200, "\(answer)")
        let token = try XCTUnwrap((answer["tokens"] as? [Body])?.first)
        XCTAssertEqual(token["recordName"] as? String, record)
        XCTAssertEqual(token["fieldName"] as? String, field)
        let url = try XCTUnwrap(URL(string: try XCTUnwrap(token["url"] as? String)))
        return url.path
    }

    /// Sends bytes to an upload URL; returns the status and the answer.
    static func send(_ client: any TestClientProtocol, _ path: String, _ bytes: [UInt8], headers: HTTPFields = [:]) async throws -> (Int, Body) {
        try await client.execute(uri: path, method: .post, headers: headers, body: ByteBuffer(bytes: bytes)) { response in
            (Int(response.status.code), (try? JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? Body) ?? [:])
        }
    }

    /// Uploads `bytes` for a record field; returns the `singleFile` dictionary.
    static func upload(_ client: any TestClientProtocol, _ fixture: RecordAPITests.Fixture, record: String, field: String, _ bytes: [UInt8], zone: String = "Notes", user: String = "_alice") async throws -> Body {
        let path = try await uploadPath(client, fixture, record: record, field: field, zone: zone, user: user)
        let (status, answer) = try await send(client, path, bytes)
        XCTAssertEqual(status, 200, "\(answer)")
        return try XCTUnwrap(answer["singleFile"] as? Body)
    }

    static func random(_ count: Int) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
    }

    static func photo(_ name: String, _ fields: Body, tag: String? = nil) -> Body { RecordAPITests.note(name, fields, tag: tag, type: "Photo") }

    /// A GET of a URL the server handed out (its path and query).
    static func get(_ client: any TestClientProtocol, _ url: String, range: String? = nil) async throws -> (Int, HTTPFields, [UInt8]) {
        let parsed = try XCTUnwrap(URL(string: url))
        var headers = HTTPFields()
        if let range { headers[.range] = range }
        return try await client.execute(uri: parsed.path, method: .get, headers: headers) { response in
            (Int(response.status.code), response.headers, Array(buffer: response.body))
        }
    }

    static func downloadURL(_ record: Body, _ field: String) -> String? {
        (RecordAPITests.fields(record)[field]?["value"] as? Body)?["downloadURL"] as? String
    }

    /// Applies the event log to stratus-gc's projection, as the worker would.
    static func applyGC(_ store: PostgresStore) async throws {
        let events = try await EventLog(store: store).events(after: 0, limit: 10_000, logger: TestSupport.logger)
        _ = try await Applier(projection: AssetReferenceProjection(), store: store).apply(batch: events, logger: TestSupport.logger)
    }

    /// Whether the store still has the blob of a receipt.
    static func stored(_ blobs: any BlobStore, _ receipt: String) async throws -> Bool {
        do {
            try await blobs.read(key: BlobKey(receipt)!, range: 0..<1, logger: TestSupport.logger) { _ in }
            return true
        } catch let error as BlobStoreError where error.kind == .notFound {
            return false
        }
    }

    // MARK: tests

    func testUploadBindDownloadRoundTripWithChecksumAndRange() async throws {
        try await withStack { stack in
            try await RecordAPITests.createZone(stack.client, stack.fixture, "Notes")
            let bytes = Self.random(300_000)
            let path = try await Self.uploadPath(stack.client, stack.fixture, record: "p1", field: "image")
            var headers = HTTPFields()
            headers[.init("Content-Digest")!] = "sha-256=:\(Data(SHA256.hash(data: bytes)).base64EncodedString()):"
            let (status, answer) = try await Self.send(stack.client, path, bytes, headers: headers)
            XCTAssertEqual(status, 200, "\(answer)")
            let single = try XCTUnwrap(answer["singleFile"] as? Body)
            XCTAssertEqual((single["size"] as? NSNumber)?.intValue, bytes.count)
            XCTAssertEqual(single["fileChecksum"] as? String, Data(SHA256.hash(data: bytes)).base64EncodedString())
            XCTAssertNotNil(single["receipt"] as? String)
            XCTAssertNotNil(single["referenceChecksum"] as? String)
            let listed = [try await Self.upload(stack.client, stack.fixture, record: "p1", field: "album", [1, 2, 3]), try await Self.upload(stack.client, stack.fixture, record: "p1", field: "album", [4, 5])]

            let (saved, records) = try await RecordAPITests.modify(stack.client, stack.fixture, [[
                "operationType": "create",
                "record": Self.photo("p1", ["image": ["value": single, "type": "ASSETID"], "album": ["value": listed, "type": "ASSETID_LIST"]]),
            ]])
            XCTAssertEqual(saved, 200, "\(records)")
            XCTAssertNotNil(Self.downloadURL(records[0], "image"), "records/modify answers the asset with its downloadURL")
            let record = try await RecordAPITests.lookup(stack.client, stack.fixture, ["p1"])[0]
            let url = try XCTUnwrap(Self.downloadURL(record, "image"))
            let image = try XCTUnwrap(RecordAPITests.fields(record)["image"]?["value"] as? Body)
            XCTAssertEqual((image["size"] as? NSNumber)?.intValue, bytes.count)
            XCTAssertEqual(image["receipt"] as? String, single["receipt"] as? String)

            let (whole, wholeHeaders, body) = try await Self.get(stack.client, url)
            XCTAssertEqual(whole, 200)
            XCTAssertEqual(body, bytes)
            XCTAssertEqual(Data(SHA256.hash(data: body)).base64EncodedString(), image["fileChecksum"] as? String)
            XCTAssertEqual(wholeHeaders[.acceptRanges], "bytes")
            let (partial, partialHeaders, slice) = try await Self.get(stack.client, url, range: "bytes=1000-1999")
            XCTAssertEqual(partial, 206)
            XCTAssertEqual(slice, Array(bytes[1000..<2000]))
            XCTAssertEqual(partialHeaders[.contentRange], "bytes 1000-1999/\(bytes.count)")
            let (suffix, _, tail) = try await Self.get(stack.client, url, range: "bytes=-5")
            XCTAssertEqual(suffix, 206)
            XCTAssertEqual(tail, Array(bytes.suffix(5)))
            let (open, _, rest) = try await Self.get(stack.client, url, range: "bytes=299990-")
            XCTAssertEqual(open, 206)
            XCTAssertEqual(rest, Array(bytes[299_990...]))
            let (beyond, beyondHeaders, error) = try await Self.get(stack.client, url, range: "bytes=300000-")
            XCTAssertEqual(beyond, 416)
            XCTAssertEqual(beyondHeaders[.contentRange], "bytes */\(bytes.count)")
            XCTAssertEqual((try JSONSerialization.jsonObject(with: Data(error)) as? Body)?["serverErrorCode"] as? String, "BAD_REQUEST")

            let album = try XCTUnwrap(RecordAPITests.fields(record)["album"]?["value"] as? [Body])
            XCTAssertEqual(album.count, 2)
            let (second, _, secondBytes) = try await Self.get(stack.client, try XCTUnwrap(album[1]["downloadURL"] as? String))
            XCTAssertEqual(second, 200)
            XCTAssertEqual(secondBytes, [4, 5])

            // An altered download URL is refused.
            // (A character inside the signature: the last one of base64 may carry only padding bits.)
            var characters = Array(url)
            let position = characters.count - 10
            characters[position] = characters[position] == "A" ? "B" : "A"
            let altered = String(characters)
            let (refused, _, _) = try await Self.get(stack.client, altered)
            XCTAssertEqual(refused, 403)

            // records/changes carries the downloadURL too.
            let (changed, changes) = try await RecordAPITests.post(stack.client, stack.fixture.path("records/changes"), ["zoneID": ["zoneName": "Notes"]])
            XCTAssertEqual(changed, 200)
            XCTAssertNotNil(Self.downloadURL(try XCTUnwrap((changes["records"] as? [Body])?.first), "image"))

            // records/query too (once the indexer has applied the events).
            try await QueryTests.applyEventLog(stack.fixture.store)
            let (queried, query) = try await RecordAPITests.post(stack.client, stack.fixture.path("records/query"), [
                "zoneID": ["zoneName": "Notes"], "query": ["recordType": "Photo"],
            ])
            XCTAssertEqual(queried, 200, "\(query)")
            let found = try XCTUnwrap((query["records"] as? [Body])?.first)
            let (fromQuery, _, queriedBytes) = try await Self.get(stack.client, try XCTUnwrap(Self.downloadURL(found, "image")))
            XCTAssertEqual(fromQuery, 200)
            XCTAssertEqual(queriedBytes, bytes)

            // Sending the record back unchanged (its stored dictionary, downloadURL and all) keeps the asset.
            var resent = image
            resent["downloadURL"] = url
            let (updated, again) = try await RecordAPITests.modify(stack.client, stack.fixture, [[
                "operationType": "update",
                "record": Self.photo("p1", ["image": ["value": resent, "type": "ASSETID"]], tag: record["recordChangeTag"] as? String),
            ]])
            XCTAssertEqual(updated, 200, "\(again)")
        }
    }

    /// A `multipart/form-data` upload body: a form field, then the file part.
    static func multipart(_ file: [UInt8], boundary: String = "----stratus-form-4f2a", closed: Bool = true) -> [UInt8] {
        Array("--\(boundary)\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\nholiday\r\n".utf8)
            + Array("--\(boundary)\r\nContent-Disposition: form-data; name=\"files\"; filename=\"photo.jpg\"\r\nContent-Type: image/jpeg\r\n\r\n".utf8)
            + file + Array((closed ? "\r\n--\(boundary)--\r\n" : "").utf8)
    }

    static func multipartHeaders(boundary: String = "----stratus-form-4f2a") -> HTTPFields {
        var headers = HTTPFields()
        headers[.contentType] = "multipart/form-data; boundary=\(boundary)"
        return headers
    }

    /// `headers` with the `Content-Digest` of `bytes`.
    static func withDigest(_ headers: HTTPFields, of bytes: [UInt8]) -> HTTPFields {
        var headers = headers
        headers[.init("Content-Digest")!] = "sha-256=:\(Data(SHA256.hash(data: bytes)).base64EncodedString()):"
        return headers
    }

    /// A client that POSTs the upload URL as multipart/form-data gets the receipt, size and checksum
    /// of the file part, and downloads the file, not the envelope; a raw octet-stream body keeps
    /// working; a malformed or oversized envelope is refused clearly and leaves the URL unused.
    func testAMultipartUploadStoresTheFilePartsBytes() async throws {
        try await withStack { stack in
            try await RecordAPITests.createZone(stack.client, stack.fixture, "Notes")
            let file = Self.random(200_000)
            let path = try await Self.uploadPath(stack.client, stack.fixture, record: "m1", field: "image")
            let (status, answer) = try await Self.send(stack.client, path, Self.multipart(file), headers: Self.withDigest(Self.multipartHeaders(), of: file))
            XCTAssertEqual(status, 200, "\(answer)")
            let single = try XCTUnwrap(answer["singleFile"] as? Body)
            XCTAssertEqual((single["size"] as? NSNumber)?.intValue, file.count)
            XCTAssertEqual(single["fileChecksum"] as? String, Data(SHA256.hash(data: file)).base64EncodedString())
            // A raw body with an explicit octet-stream type is the file itself.
            let raw = Self.random(1000)
            var rawHeaders = HTTPFields()
            rawHeaders[.contentType] = "application/octet-stream"
            let (rawStatus, rawAnswer) = try await Self.send(stack.client, try await Self.uploadPath(stack.client, stack.fixture, record: "m1", field: "album"), raw, headers: rawHeaders)
            XCTAssertEqual(rawStatus, 200, "\(rawAnswer)")
            let rawFile = try XCTUnwrap(rawAnswer["singleFile"] as? Body)
            XCTAssertEqual((rawFile["size"] as? NSNumber)?.intValue, raw.count)

            let (saved, records) = try await RecordAPITests.modify(stack.client, stack.fixture, [[
                "operationType": "create",
                "record": Self.photo("m1", ["image": ["value": single, "type": "ASSETID"], "album": ["value": [rawFile], "type": "ASSETID_LIST"]]),
            ]])
            XCTAssertEqual(saved, 200, "\(records)")
            let record = try await RecordAPITests.lookup(stack.client, stack.fixture, ["m1"])[0]
            let (downloaded, _, bytes) = try await Self.get(stack.client, try XCTUnwrap(Self.downloadURL(record, "image")))
            XCTAssertEqual(downloaded, 200)
            XCTAssertEqual(bytes, file, "the download is the file part, not the envelope")
            let album = try XCTUnwrap(RecordAPITests.fields(record)["album"]?["value"] as? [Body])
            let (_, _, rawBytes) = try await Self.get(stack.client, try XCTUnwrap(album.first?["downloadURL"] as? String))
            XCTAssertEqual(rawBytes, raw)

            // Refusals: each a CloudKit error, and the URL stays unused.
            let refusedPath = try await Self.uploadPath(stack.client, stack.fixture, record: "m2", field: "image")
            var mixed = HTTPFields()
            mixed[.contentType] = "multipart/mixed; boundary=x"
            var noBoundary = HTTPFields()
            noBoundary[.contentType] = "multipart/form-data"
            let envelope = Array("--b\r\nContent-Disposition: form-data; name=\"pad\"\r\n\r\n".utf8)
                + [UInt8](repeating: 65, count: Int(MultipartUpload.maxEnvelopeBytes)) + Array("\r\n--b--".utf8)
            let refusals: [(String, [UInt8], HTTPFields, String)] = [
                ("no closing boundary", Self.multipart([1, 2, 3], closed: false), Self.multipartHeaders(), "BAD_REQUEST"),
                ("no file part", Array("--b\r\nContent-Disposition: form-data; name=\"n\"\r\n\r\nv\r\n--b--".utf8), Self.multipartHeaders(boundary: "b"), "BAD_REQUEST"),
                ("another multipart type", Self.multipart([1]), mixed, "BAD_REQUEST"),
                ("no boundary", Self.multipart([1]), noBoundary, "BAD_REQUEST"),
                ("an envelope past its bound", envelope, Self.multipartHeaders(boundary: "b"), "LIMIT_EXCEEDED"),
            ]
            for (name, body, requestHeaders, code) in refusals {
                let (refused, refusal) = try await Self.send(stack.client, refusedPath, body, headers: requestHeaders)
                XCTAssertEqual(refused, 400, "\(name): \(refusal)")
                XCTAssertEqual(refusal["serverErrorCode"] as? String, code, name)
                XCTAssertTrue((refusal["reason"] as? String ?? "").lowercased().contains("multipart"), "\(name): \(refusal)")
            }
            let (reused, _) = try await Self.send(stack.client, refusedPath, Self.multipart([7, 8, 9]), headers: Self.multipartHeaders())
            XCTAssertEqual(reused, 200, "refused uploads leave their URL unused")
        }
    }

    func testBadReceiptsAndUploadURLsAreRefused() async throws {
        try await withStack { stack in
            try await RecordAPITests.createZone(stack.client, stack.fixture, "Notes")
            try await RecordAPITests.createZone(stack.client, stack.fixture, "Notes", user: "_bob")
            func refuse(_ value: Any, field: String = "image", record: String = "p1", user: String = "_alice", _ reason: String) async throws {
                let (status, answer) = try await RecordAPITests.modify(
                    stack.client, stack.fixture, user: user, [["operationType": "create", "record": Self.photo(record, [field: ["value": value, "type": "ASSETID"]])]])
                let error = (answer.first ?? [:])
                XCTAssertTrue(status == 400 || error["serverErrorCode"] as? String == "BAD_REQUEST", "\(reason): \(status) \(answer)")
                XCTAssertTrue((error["reason"] as? String ?? "").contains("Field '\(field)'"), "\(reason): \(answer)")
            }
            let single = try await Self.upload(stack.client, stack.fixture, record: "p1", field: "image", [1, 2, 3])
            try await refuse(["receipt": UUID().uuidString.lowercased()], "an unknown receipt")
            try await refuse(["receipt": "r1", "size": 3], "a receipt that is no asset id")
            try await refuse(["fileChecksum": "abc", "size": 3], "no receipt")
            try await refuse(single, field: "other", "a receipt of another field")
            try await refuse(single, record: "p2", "a receipt of another record")
            try await refuse(single, user: "_bob", "another user's receipt")
            var wrongSize = single
            wrongSize["size"] = 4
            try await refuse(wrongSize, "a size that is not the upload's")
            // The same receipt twice in one request.
            let (twice, twiceAnswer) = try await RecordAPITests.modify(stack.client, stack.fixture, [[
                "operationType": "create", "record": Self.photo("p1", ["image": ["value": [single, single], "type": "ASSETID_LIST"]]),
            ]])
            XCTAssertEqual(twice, 400, "\(twiceAnswer)")

            // Bound, replaced by another upload, then sent again: refused as used.
            let (saved, records) = try await RecordAPITests.modify(stack.client, stack.fixture, [[
                "operationType": "create", "record": Self.photo("p1", ["image": ["value": single, "type": "ASSETID"]]),
            ]])
            XCTAssertEqual(saved, 200, "\(records)")
            let replacement = try await Self.upload(stack.client, stack.fixture, record: "p1", field: "image", [9])
            let (replaced, replacedRecords) = try await RecordAPITests.modify(stack.client, stack.fixture, [[
                "operationType": "forceUpdate", "record": Self.photo("p1", ["image": ["value": replacement, "type": "ASSETID"]]),
            ]])
            XCTAssertEqual(replaced, 200, "\(replacedRecords)")
            // Known as used at once, before stratus-gc has applied the events.
            let (reused, reusedAnswer) = try await RecordAPITests.modify(stack.client, stack.fixture, [[
                "operationType": "forceUpdate", "record": Self.photo("p1", ["image": ["value": single, "type": "ASSETID"]]),
            ]])
            XCTAssertEqual(reused, 400, "\(reusedAnswer)")
            XCTAssertTrue(((reusedAnswer.first?["reason"] as? String) ?? "").contains("bound already"), "\(reusedAnswer)")

            // Upload URLs: used twice, altered, or a download URL sent as one.
            let path = try await Self.uploadPath(stack.client, stack.fixture, record: "p3", field: "image")
            let (first, _) = try await Self.send(stack.client, path, [1])
            XCTAssertEqual(first, 200)
            let (second, secondAnswer) = try await Self.send(stack.client, path, [1])
            XCTAssertEqual(second, 400, "\(secondAnswer)")
            let (altered, alteredAnswer) = try await Self.send(stack.client, path + "x", [1])
            XCTAssertEqual(altered, 401, "\(alteredAnswer)")
            XCTAssertEqual(alteredAnswer["serverErrorCode"] as? String, "AUTHENTICATION_FAILED")
            // A Content-Digest that does not match: nothing is stored.
            let digestPath = try await Self.uploadPath(stack.client, stack.fixture, record: "p4", field: "image")
            var headers = HTTPFields()
            headers[.init("Content-Digest")!] = "sha-256=:\(Data(SHA256.hash(data: Data([1]))).base64EncodedString()):"
            let (mismatch, mismatchAnswer) = try await Self.send(stack.client, digestPath, [2], headers: headers)
            XCTAssertEqual(mismatch, 400, "\(mismatchAnswer)")
            // assets/upload itself checks its tokens.
            let (noTokens, _) = try await RecordAPITests.post(stack.client, stack.fixture.path("assets/upload"), ["tokens": []])
            XCTAssertEqual(noTokens, 400)
            let (badField, _) = try await RecordAPITests.post(stack.client, stack.fixture.path("assets/upload"), [
                "tokens": [["recordType": "Photo", "fieldName": "bad\u{1}name"]],
            ])
            XCTAssertEqual(badField, 400)
        }
    }

    func testOversizeUploadsAreRefused() async throws {
        try await withStack(maxAssetBytes: 1000) { stack in
            try await RecordAPITests.createZone(stack.client, stack.fixture, "Notes")
            let path = try await Self.uploadPath(stack.client, stack.fixture, record: "p1", field: "image")
            let (declared, answer) = try await Self.send(stack.client, path, Self.random(1001))
            XCTAssertEqual(declared, 413, "\(answer)")
            XCTAssertEqual(answer["serverErrorCode"] as? String, "LIMIT_EXCEEDED")
            XCTAssertTrue((answer["reason"] as? String ?? "").contains("1000 bytes"), "\(answer)")
            // The limit itself is fine.
            let (fits, _) = try await Self.send(stack.client, try await Self.uploadPath(stack.client, stack.fixture, record: "p1", field: "image"), Self.random(1000))
            XCTAssertEqual(fits, 200)
            // Sent without a length (chunked), the upload is stopped once its bytes pass the limit.
            let port = try XCTUnwrap(stack.client.port)
            let streamed = try await Self.uploadPath(stack.client, stack.fixture, record: "p2", field: "image")
            var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)\(streamed)")
            request.method = .POST
            request.body = .stream(GeneratedBytes(size: 200_000), length: .unknown)
            let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
            let body = try await response.body.collect(upTo: 1 << 20)
            XCTAssertEqual(response.status.code, 413)
            XCTAssertEqual((try JSONSerialization.jsonObject(with: Data(buffer: body)) as? Body)?["serverErrorCode"] as? String, "LIMIT_EXCEEDED")
            // Nothing of a refused upload is kept, and its URL may not be used again.
            let (again, _) = try await Self.send(stack.client, streamed, [1])
            XCTAssertEqual(again, 200, "a refused upload leaves its URL unused")
            // A multipart upload is bounded by its file's bytes, not by its envelope's.
            let (multipartFits, fitsAnswer) = try await Self.send(
                stack.client, try await Self.uploadPath(stack.client, stack.fixture, record: "p3", field: "image"), Self.multipart(Self.random(1000)),
                headers: Self.multipartHeaders())
            XCTAssertEqual(multipartFits, 200, "\(fitsAnswer)")
            XCTAssertEqual(((fitsAnswer["singleFile"] as? Body)?["size"] as? NSNumber)?.intValue, 1000)
            let (multipartTooLarge, tooLargeAnswer) = try await Self.send(
                stack.client, try await Self.uploadPath(stack.client, stack.fixture, record: "p3", field: "image"), Self.multipart(Self.random(1001)),
                headers: Self.multipartHeaders())
            XCTAssertEqual(multipartTooLarge, 413, "\(tooLargeAnswer)")
            XCTAssertEqual(tooLargeAnswer["serverErrorCode"] as? String, "LIMIT_EXCEEDED")
        }
    }

    func testOrphanedAssetsAreCollectedAfterTheGracePeriodAndReferencedOnesNever() async throws {
        try await withStack { stack in
            try await RecordAPITests.createZone(stack.client, stack.fixture, "Notes")
            let store = stack.fixture.store
            let unbound = try await Self.upload(stack.client, stack.fixture, record: "p1", field: "image", [1])
            let kept = try await Self.upload(stack.client, stack.fixture, record: "p2", field: "image", [2])
            let released = try await Self.upload(stack.client, stack.fixture, record: "p3", field: "image", [3])
            let successor = try await Self.upload(stack.client, stack.fixture, record: "p3", field: "image", [4])
            for (name, value) in [("p2", kept), ("p3", released)] {
                let (status, answer) = try await RecordAPITests.modify(stack.client, stack.fixture, [[
                    "operationType": "create", "record": Self.photo(name, ["image": ["value": value, "type": "ASSETID"]]),
                ]])
                XCTAssertEqual(status, 200, "\(answer)")
            }
            let (updated, answer) = try await RecordAPITests.modify(stack.client, stack.fixture, [[
                "operationType": "forceUpdate", "record": Self.photo("p3", ["image": ["value": successor, "type": "ASSETID"]]),
            ]])
            XCTAssertEqual(updated, 200, "\(answer)")
            try await Self.applyGC(store)
            let receipt = { (value: Body) in value["receipt"] as! String }
            let collector = OrphanAssetCollector(store: store, blobs: stack.blobs, grace: .seconds(60), logger: TestSupport.logger)

            // Within the grace period nothing goes, bound or not.
            let firstPass = try await collector.collectOnce()
            XCTAssertEqual(firstPass, 0)
            let later = Date().addingTimeInterval(120)
            // A replay of stratus-gc that has not caught up yet (its counts forgotten) deletes
            // nothing a record holds: the collector checks the records themselves.
            try await Applier(projection: AssetReferenceProjection(), store: store).reset(logger: TestSupport.logger)
            let afterReset = try await collector.collectOnce(now: later)
            XCTAssertEqual(afterReset, 2, "the unbound upload and the released asset")
            for value in [kept, successor] {
                let present = try await Self.stored(stack.blobs, receipt(value))
                XCTAssertTrue(present, "referenced assets stay")
            }
            for value in [unbound, released] {
                let present = try await Self.stored(stack.blobs, receipt(value))
                XCTAssertFalse(present, "orphans go")
            }
            try await Self.applyGC(store)
            let afterReplay = try await collector.collectOnce(now: later)
            XCTAssertEqual(afterReplay, 0, "the replay, caught up, decides the same")
            for value in [kept, successor] {
                let present = try await Self.stored(stack.blobs, receipt(value))
                XCTAssertTrue(present, "still referenced after the replay")
            }

            // A collected asset's download is gone; a kept one is served.
            let record = try await RecordAPITests.lookup(stack.client, stack.fixture, ["p2"])[0]
            let (served, _, bytes) = try await Self.get(stack.client, try XCTUnwrap(Self.downloadURL(record, "image")))
            XCTAssertEqual(served, 200)
            XCTAssertEqual(bytes, [2])

            // Deleting the record releases its asset: collected once the grace period has passed since.
            let (deleted, deletedAnswer) = try await RecordAPITests.modify(stack.client, stack.fixture, [[
                "operationType": "forceDelete", "record": ["recordName": "p2"],
            ]])
            XCTAssertEqual(deleted, 200, "\(deletedAnswer)")
            try await Self.applyGC(store)
            let withinGrace = try await collector.collectOnce()
            XCTAssertEqual(withinGrace, 0)
            let afterGrace = try await collector.collectOnce(now: Date().addingTimeInterval(120))
            XCTAssertEqual(afterGrace, 1)
            let keptPresent = try await Self.stored(stack.blobs, receipt(kept))
            let successorPresent = try await Self.stored(stack.blobs, receipt(successor))
            XCTAssertFalse(keptPresent)
            XCTAssertTrue(successorPresent)
        }
    }
}

extension AssetTests {
    /// A 50 MB upload to a real stratus-api process, streamed from the test with a declared length:
    /// the process's peak resident memory grows by far less than the asset, and the download streams
    /// the same bytes back.
    func testFiftyMegabyteUploadKeepsTheAPIResidentMemoryBounded() async throws {
        try await withStack { stack in
            let (token, key) = (stack.fixture.apiToken, stack.fixture.configuration.secretKey)
            let port = try Broker.freePort()
            let dataDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("stratus-data-\(UUID().uuidString)").path
            defer { try? FileManager.default.removeItem(atPath: dataDirectory) }
            let settings = stack.settings.merging([
                "STRATUS_RELAY": "off", "STRATUS_HTTP_PORT": "\(port)", "STRATUS_SECRET_KEY": key.hex,
                "STRATUS_DATA_DIR": dataDirectory,
            ]) { _, new in new }
            try await StratusExecutable.with("stratus-api", settings: settings) { api in
                let base = "http://127.0.0.1:\(port)"
                let client = HTTPClient.shared
                try await api.answersHealth(at: base)
                let user = WebAuthToken(userRecordName: "_alice", container: "iCloud.com.example.notes", expiresAt: Int64(Date().timeIntervalSince1970) + 3600)
                let query = "ckAPIToken=\(token)&ckWebAuthToken=\(user.signed(with: key))"
                func post(_ operation: String, _ json: Any) async throws -> Body {
                    var request = HTTPClientRequest(url: "\(base)/database/1/iCloud.com.example.notes/development/private/\(operation)?\(query)")
                    request.method = .POST
                    request.body = .bytes(ByteBuffer(data: try JSONSerialization.data(withJSONObject: json)))
                    let response = try await client.execute(request, timeout: .seconds(30))
                    let data = Data(buffer: try await response.body.collect(upTo: 1 << 20))
                    return try XCTUnwrap(JSONSerialization.jsonObject(with: data) as? Body, "\(response.status)")
                }
                func upload(size: Int) async throws -> (Body, String) {
                    let tokens = try await post("assets/upload", ["tokens": [["recordType": "Photo", "recordName": "big", "fieldName": "video"]]])
                    let url = try XCTUnwrap((tokens["tokens"] as? [Body])?.first?["url"] as? String, "\(tokens)")
                    // The bytes are made as they are sent: the test holds one chunk at a time.
                    var hash = SHA256()
                    for try await chunk in GeneratedBytes(size: size) { chunk.withUnsafeReadableBytes { hash.update(bufferPointer: $0) } }
                    let stream = GeneratedBytes(size: size)
                    var request = HTTPClientRequest(url: url)
                    request.method = .POST
                    request.body = .stream(stream, length: .known(Int64(size)))
                    let response = try await client.execute(request, timeout: .seconds(300))
                    let data = Data(buffer: try await response.body.collect(upTo: 1 << 20))
                    let answer = try XCTUnwrap(JSONSerialization.jsonObject(with: data) as? Body)
                    XCTAssertEqual(response.status, .ok, "\(answer)")
                    return (try XCTUnwrap(answer["singleFile"] as? Body, "\(answer)"), Data(hash.finalize()).base64EncodedString())
                }
                _ = try await upload(size: 1 << 20)
                let before = try Self.memory(api.processIdentifier)
                let size = 50 * 1024 * 1024
                let (single, checksum) = try await upload(size: size)
                XCTAssertEqual((single["size"] as? NSNumber)?.intValue, size)
                XCTAssertEqual(single["fileChecksum"] as? String, checksum)
                let afterUpload = try Self.memory(api.processIdentifier)
                print("stratus-api memory: RSS before \(before.rss >> 10) KiB, peak after the 50 MB upload \(afterUpload.peak >> 10) KiB")
                XCTAssertLessThan(afterUpload.peak - before.rss, 40 << 20, "the upload streamed: peak RSS grew by \((afterUpload.peak - before.rss) >> 20) MiB")

                let saved = try await post("records/modify", ["operations": [["operationType": "create", "record": [
                    "recordName": "big", "recordType": "Photo", "fields": ["video": ["value": single, "type": "ASSETID"]],
                ]]]])
                let record = try XCTUnwrap((saved["records"] as? [Body])?.first, "\(saved)")
                let download = try XCTUnwrap(Self.downloadURL(record, "video"), "\(record)")
                let response = try await client.execute(HTTPClientRequest(url: download), timeout: .seconds(300))
                XCTAssertEqual(response.status, .ok)
                var hash = SHA256()
                var received = 0
                for try await chunk in response.body {
                    received += chunk.readableBytes
                    chunk.withUnsafeReadableBytes { hash.update(bufferPointer: $0) }
                }
                XCTAssertEqual(received, size)
                XCTAssertEqual(Data(hash.finalize()).base64EncodedString(), checksum)
                let afterDownload = try Self.memory(api.processIdentifier)
                print("stratus-api memory: peak after the 50 MB download \(afterDownload.peak >> 10) KiB")
                XCTAssertLessThan(afterDownload.peak - before.rss, 40 << 20, "the download streamed")
                // The request log names asset URLs without their grants, and no store secret.
                let log = api.output()
                XCTAssertTrue(log.contains("path=/assets/1/download/…"), String(log.suffix(2000)))
                XCTAssertFalse(log.contains(try XCTUnwrap(URL(string: download)).lastPathComponent), "a download grant was logged")
                XCTAssertFalse(log.contains("test-secret"), "the S3 secret was logged")
            }
        }
    }

    /// VmRSS and VmHWM (peak) of a process, in bytes.
    static func memory(_ pid: Int32) throws -> (rss: Int, peak: Int) {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        func value(_ name: String) -> Int {
            guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix(name + ":") }) else { return 0 }
            return (Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "0") ?? 0) * 1024
        }
        return (value("VmRSS"), value("VmHWM"))
    }
}

/// Every asset test again, over the S3 blob store against the S3-compatible server of the test run
/// (`STRATUS_TEST_S3_ENDPOINT`, started by scripts/test.sh).
final class S3AssetTests: AssetTests {
    override func makeBlobs() async throws -> (store: any BlobStore, settings: [String: String]) {
        guard let endpoint = ProcessInfo.processInfo.environment["STRATUS_TEST_S3_ENDPOINT"] else {
            throw TestSupport.MissingServer(description: "STRATUS_TEST_S3_ENDPOINT is not set; run the tests with scripts/test.sh")
        }
        let bucket = "stratus-test-\(UUID().uuidString.prefix(8).lowercased())"
        let configuration = S3Configuration(
            endpoint: try XCTUnwrap(URL(string: endpoint)), region: "us-east-1", bucket: bucket, accessKeyID: "test", secretAccessKey: "test-secret",
            addressing: .path)
        let store = S3BlobStore(configuration: configuration)
        try await store.createBucketIfMissing(logger: TestSupport.logger)
        return (store, [
            "STRATUS_ASSET_STORE": "s3", "STRATUS_S3_ENDPOINT": endpoint, "STRATUS_S3_BUCKET": bucket, "STRATUS_S3_REGION": "us-east-1",
            "STRATUS_S3_ACCESS_KEY_ID": "test", "STRATUS_S3_SECRET_ACCESS_KEY": "test-secret", "STRATUS_S3_ADDRESSING": "path",
            // The smallest part S3 takes: the process holds a part or two of an upload (the allocator
            // keeps a freed part for the next), so the memory test's bound stays far below the asset.
            "STRATUS_S3_PART_SIZE_BYTES": "\(5 << 20)",
        ])
    }

    /// Both addressing styles name the same object; the signature covers the host each one uses.
    func testAddressingStylesAndSigningFollowTheReference() throws {
        let path = S3Configuration(endpoint: URL(string: "http://127.0.0.1:9000")!, region: "us-east-1", bucket: "b", accessKeyID: "k", secretAccessKey: "s")
        XCTAssertEqual(path.location(of: "ab-cd").host, "127.0.0.1:9000")
        XCTAssertEqual(path.location(of: "ab-cd").path, "/b/ab-cd")
        var virtual = path
        virtual.endpoint = URL(string: "https://s3.eu-west-1.amazonaws.com")!
        virtual.addressing = .virtualHost
        XCTAssertEqual(virtual.location(of: "ab-cd").host, "b.s3.eu-west-1.amazonaws.com")
        XCTAssertEqual(virtual.location(of: "ab-cd").path, "/ab-cd")
        XCTAssertFalse("\(virtual)".contains("\"s\""))
        XCTAssertTrue("\(virtual)".contains("redacted"))
        // AWS's documented example (GET Object with a Range, "Signature Version 4 examples" of the S3 API reference).
        let signer = S3Signer(accessKeyID: "AKIAIOSFODNN7EXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", region: "us-east-1")
        let date = Date(timeIntervalSince1970: 1_369_353_600)  // 2013-05-24T00:00:00Z
        let headers = signer.sign(
            method: "GET", host: "examplebucket.s3.amazonaws.com", path: "/test.txt", query: [], headers: ["range": "bytes=0-9"],
            payloadHash: S3Signer.emptyPayloadHash, date: date)
        let authorization = headers.first { $0.0 == "Authorization" }?.1
        XCTAssertEqual(authorization, "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            + "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
    }
}


extension AssetTests {
    /// The real `stratus-gc` (its projection behind the relay and the broker, its collector every
    /// second, a 2 s grace period) collects an unbound upload and a released asset but never the
    /// bound one; killed, replayed from the beginning with `stratus replay stratus-gc` and started
    /// again, it still keeps the bound asset and goes on collecting what is released.
    func testStratusGCCollectsOrphansAndAfterKillAndReplayKeepsReferencedAssets() async throws {
        try await withStack(relay: true) { stack in
            let (client, fixture, blobs, store) = (stack.client, stack.fixture, stack.blobs, stack.fixture.store)
            let settings = stack.settings.merging([
                "STRATUS_KAFKA_BACKGROUND_FETCH_WAIT_MS": "100", "STRATUS_ASSET_GRACE_SECONDS": "2", "STRATUS_ASSET_GC_INTERVAL_SECONDS": "1",
            ]) { _, new in new }
            try await RecordAPITests.createZone(client, fixture, "Notes")
            let unbound = try await Self.upload(client, fixture, record: "p1", field: "image", [1])
            let kept = try await Self.upload(client, fixture, record: "p2", field: "image", [2])
            let released = try await Self.upload(client, fixture, record: "p3", field: "image", [3])
            for (name, value) in [("p2", kept), ("p3", released)] {
                let (status, answer) = try await RecordAPITests.modify(client, fixture, [[
                    "operationType": "create", "record": Self.photo(name, ["image": ["value": value, "type": "ASSETID"]]),
                ]])
                XCTAssertEqual(status, 200, "\(answer)")
            }
            let receipt = { (value: Body) in value["receipt"] as! String }
            try await StratusExecutable.with("stratus-gc", settings: settings) { gc in
                try await TestSupport.eventually(timeout: .seconds(60), "stratus-gc collects the unbound upload") {
                    try gc.requireRunning()
                    return try await !Self.stored(blobs, receipt(unbound))
                }
                try await TestSupport.eventually(timeout: .seconds(60), "stratus-gc counts the bound assets") {
                    let keptCounted = try await Self.referenced(store, receipt(kept))
                    let releasedCounted = try await Self.referenced(store, receipt(released))
                    return keptCounted == true && releasedCounted == true
                }
                let (deleted, answer) = try await RecordAPITests.modify(client, fixture, [["operationType": "forceDelete", "record": ["recordName": "p3"]]])
                XCTAssertEqual(deleted, 200, "\(answer)")
                try await TestSupport.eventually(timeout: .seconds(60), "stratus-gc collects the released asset") {
                    try gc.requireRunning()
                    return try await !Self.stored(blobs, receipt(released))
                }
                let keptPresent = try await Self.stored(blobs, receipt(kept))
                XCTAssertTrue(keptPresent, "the bound asset stays")
            }  // ends with SIGKILL

            let replay = try await StratusExecutable.run("stratus", ["replay", "stratus-gc"], settings: settings)
            XCTAssertEqual(replay.status, 0, replay.output)
            let afterReplay = try await Self.referenced(store, receipt(kept))
            XCTAssertEqual(afterReplay, true, "the replay counts the bound asset again")
            let late = try await Self.upload(client, fixture, record: "p4", field: "image", [4])
            try await StratusExecutable.with("stratus-gc", settings: settings) { gc in
                try await TestSupport.eventually(timeout: .seconds(60), "the restarted stratus-gc collects a new orphan") {
                    try gc.requireRunning()
                    return try await !Self.stored(blobs, receipt(late))
                }
                let keptPresent = try await Self.stored(blobs, receipt(kept))
                XCTAssertTrue(keptPresent, "after kill and replay the bound asset is still there")
                let record = try await RecordAPITests.lookup(client, fixture, ["p2"])[0]
                let (served, _, bytes) = try await Self.get(client, try XCTUnwrap(Self.downloadURL(record, "image")))
                XCTAssertEqual(served, 200)
                XCTAssertEqual(bytes, [2])
            }
        }
    }

    /// Whether stratus-gc's counts hold the asset as referenced (nil: it has no entry).
    static func referenced(_ store: PostgresStore, _ receipt: String) async throws -> Bool? {
        let id = try XCTUnwrap(UUID(uuidString: receipt))
        return try await store.withConnection { connection in
            let rows = try await connection.query("SELECT referenced FROM asset_references WHERE asset_id = \(id)", logger: TestSupport.logger)
            for try await referenced in rows.decode(Bool.self) { return referenced }
            return nil
        }
    }
}
