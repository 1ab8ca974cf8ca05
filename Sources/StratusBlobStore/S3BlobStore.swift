import AsyncHTTPClient
import Crypto
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// Blobs as objects of an S3-compatible store (AWS S3, MinIO, …), signed with SigV4. A put holds at
/// most one part (`partSize`) in memory: a blob up to that size is one PUT, a larger one a multipart
/// upload, aborted when anything fails so no part is left behind. Reads stream the object's range.
public struct S3BlobStore: BlobStore {
    let configuration: S3Configuration
    let signer: S3Signer
    let client: HTTPClient
    let timeout: TimeAmount

    /// Creates the store over `client` (the shared client by default).
    public init(configuration: S3Configuration, client: HTTPClient = .shared, timeout: TimeAmount = .seconds(120)) {
        self.configuration = configuration
        signer = S3Signer(accessKeyID: configuration.accessKeyID, secretAccessKey: configuration.secretAccessKey, region: configuration.region)
        self.client = client
        self.timeout = timeout
    }

    /// Creates the bucket unless it exists (tests, and a first start against an empty store).
    public func createBucketIfMissing(logger: Logger) async throws {
        let head = try await send("HEAD", key: nil, logger: logger)
        if head.status == .ok { return }
        var body = ByteBuffer()
        if configuration.region != "us-east-1" {
            body.writeString("<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><LocationConstraint>\(configuration.region)</LocationConstraint></CreateBucketConfiguration>")
        }
        let created = try await send("PUT", key: nil, body: body, logger: logger)
        guard created.status == .ok || created.status == .conflict else { throw failure("create bucket", created) }
    }

    public func put<Body: AsyncSequence & Sendable>(key: BlobKey, body: Body, logger: Logger) async throws where Body.Element == ByteBuffer {
        let partSize = configuration.partSize
        var pending = ByteBufferAllocator().buffer(capacity: partSize)
        var upload: String?
        var parts: [(number: Int, etag: String)] = []
        do {
            for try await chunk in body {
                var chunk = chunk
                while chunk.readableBytes > 0 {
                    let take = min(chunk.readableBytes, partSize - pending.readableBytes)
                    var slice = chunk.readSlice(length: take)!
                    pending.writeBuffer(&slice)
                    if pending.readableBytes == partSize {
                        if upload == nil { upload = try await startMultipart(key, logger: logger) }
                        parts.append((parts.count + 1, try await uploadPart(key, upload: upload!, number: parts.count + 1, pending, logger: logger)))
                        // The part was sent and answered: its buffer is free again, so the next part reuses it.
                        pending.clear()
                    }
                }
            }
            guard let upload else {
                let answer = try await send("PUT", key: key.rawValue, body: pending, logger: logger)
                guard answer.status == .ok else { throw failure("put \(key)", answer) }
                return
            }
            if pending.readableBytes > 0 || parts.isEmpty {
                parts.append((parts.count + 1, try await uploadPart(key, upload: upload, number: parts.count + 1, pending, logger: logger)))
            }
            var xml = "<CompleteMultipartUpload>"
            for part in parts { xml += "<Part><PartNumber>\(part.number)</PartNumber><ETag>\(part.etag)</ETag></Part>" }
            xml += "</CompleteMultipartUpload>"
            let answer = try await send("POST", key: key.rawValue, query: [("uploadId", upload)], body: ByteBuffer(string: xml), logger: logger)
            // S3 may answer 200 with an error document when completing fails late.
            guard answer.status == .ok, !answer.body.contains("<Error>") else { throw failure("complete \(key)", answer) }
        } catch {
            if let upload {
                // Best effort: a failed abort leaves parts the bucket's lifecycle rule removes.
                _ = try? await send("DELETE", key: key.rawValue, query: [("uploadId", upload)], logger: logger)
            }
            throw error
        }
    }

    private func startMultipart(_ key: BlobKey, logger: Logger) async throws -> String {
        let answer = try await send("POST", key: key.rawValue, query: [("uploads", "")], logger: logger)
        guard answer.status == .ok, let id = Self.element("UploadId", in: answer.body) else { throw failure("start multipart \(key)", answer) }
        return id
    }

    private func uploadPart(_ key: BlobKey, upload: String, number: Int, _ bytes: ByteBuffer, logger: Logger) async throws -> String {
        let answer = try await send("PUT", key: key.rawValue, query: [("partNumber", String(number)), ("uploadId", upload)], body: bytes, logger: logger)
        guard answer.status == .ok, let etag = answer.headers.first(name: "ETag") else { throw failure("part \(number) of \(key)", answer) }
        return etag
    }

    public func read(key: BlobKey, range: Range<Int64>, logger: Logger, consume: (ByteBuffer) async throws -> Void) async throws {
        guard !range.isEmpty else { return }
        let request = request("GET", key: key.rawValue, query: [], headers: ["range": "bytes=\(range.lowerBound)-\(range.upperBound - 1)"], body: nil)
        let response = try await client.execute(request, timeout: timeout, logger: logger)
        guard response.status == .ok || response.status == .partialContent else {
            let text = String(buffer: try await response.body.collect(upTo: 64 * 1024))
            if response.status == .notFound { throw BlobStoreError(.notFound, "no blob \(key)") }
            throw BlobStoreError(.failed, "get \(key): HTTP \(response.status.code) \(Self.element("Code", in: text) ?? "")")
        }
        for try await chunk in response.body { try await consume(chunk) }
    }

    public func delete(key: BlobKey, logger: Logger) async throws {
        let answer = try await send("DELETE", key: key.rawValue, logger: logger)
        guard answer.status == .noContent || answer.status == .ok || answer.status == .notFound else { throw failure("delete \(key)", answer) }
    }

    /// A small answer: status, headers and up to 1 MiB of body text.
    struct Answer {
        var status: HTTPResponseStatus
        var headers: HTTPHeaders
        var body: String
    }

    private func send(
        _ method: String, key: String?, query: [(String, String)] = [], body: ByteBuffer? = nil, logger: Logger
    ) async throws -> Answer {
        let response = try await client.execute(request(method, key: key, query: query, headers: [:], body: body), timeout: timeout, logger: logger)
        let text = method == "HEAD" ? "" : String(buffer: try await response.body.collect(upTo: 1024 * 1024))
        return Answer(status: response.status, headers: response.headers, body: text)
    }

    private func request(_ method: String, key: String?, query: [(String, String)], headers: [String: String], body: ByteBuffer?) -> HTTPClientRequest {
        let (scheme, host, path) = configuration.location(of: key)
        let payloadHash = body.map { $0.withUnsafeReadableBytes { S3Signer.hex(SHA256.hash(data: $0)) } } ?? S3Signer.emptyPayloadHash
        let queryText = query.map { $0.1.isEmpty ? S3Signer.encode($0.0) : "\(S3Signer.encode($0.0))=\(S3Signer.encode($0.1))" }.joined(separator: "&")
        var request = HTTPClientRequest(url: "\(scheme)://\(host)\(path)\(queryText.isEmpty ? "" : "?" + queryText)")
        request.method = HTTPMethod(rawValue: method)
        request.headers.add(name: "Host", value: host)
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        for (name, value) in signer.sign(method: method, host: host, path: path, query: query, headers: headers, payloadHash: payloadHash, date: Date()) {
            request.headers.add(name: name, value: value)
        }
        if let body {
            request.body = .bytes(body)
        }
        return request
    }

    private func failure(_ what: String, _ answer: Answer) -> BlobStoreError {
        BlobStoreError(.failed, "\(what): HTTP \(answer.status.code) \(Self.element("Code", in: answer.body) ?? "")")
    }

    /// The text of the first `<name>` element of a small XML answer.
    static func element(_ name: String, in xml: String) -> String? {
        guard let start = xml.range(of: "<\(name)>"), let end = xml.range(of: "</\(name)>", range: start.upperBound..<xml.endIndex) else { return nil }
        return String(xml[start.upperBound..<end.lowerBound])
    }
}
