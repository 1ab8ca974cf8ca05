import AsyncHTTPClient
import Synchronization
import Foundation
import NIOCore

extension BenchSuite {
    /// `asset.upload.*` and `asset.download.*`: one client uploads an asset of `megabytes` MB to an
    /// upload URL from `assets/upload` (the bytes made as they are sent), binds it to a record, and
    /// downloads it through the record's `downloadURL`, until the scenario's time or `rounds` have
    /// passed. MB/s are megabytes (10^6 bytes) of asset per second of transfer.
    func assets(_ client: CloudKitClient, megabytes: Int, rounds: Int) async throws -> [ScenarioResult] {
        let zone = zone("Assets")
        try await client.createZone(zone)
        let size = megabytes * 1_000_000
        let downloads = DownloadURLs()
        let upload = await closedLoop(concurrency: 1, duration: Duration(seconds: settings.seconds), limit: rounds, state: { $0 }) { _, iteration in
            let name = "asset-\(megabytes)-\(iteration)"
            let tokens = try await client.expectOK("assets/upload", [
                "zoneID": ["zoneName": zone], "tokens": [["recordType": "Photo", "recordName": name, "fieldName": "data"]],
            ])
            guard let url = (tokens.body["tokens"] as? [JSONObject])?.first?["url"] as? String else { return .failed("assets/upload gave no url") }
            var request = HTTPClientRequest(url: url)
            request.method = .POST
            request.body = .stream(GeneratedBytes(size: size), length: .known(Int64(size)))
            let response = try await client.http.execute(request, timeout: .seconds(300))
            let body = try await response.body.collect(upTo: 1 << 20)
            guard response.status == .ok, let answer = try? JSONSerialization.jsonObject(with: Data(buffer: body)) as? JSONObject,
                  let single = answer["singleFile"] as? JSONObject else { return .failed("upload: HTTP \(response.status.code)") }
            let saved = try await client.expectOK("records/modify", [
                "zoneID": ["zoneName": zone],
                "operations": [Self.create(["recordName": name, "recordType": "Photo", "fields": ["data": ["value": single, "type": "ASSETID"]] as JSONObject])],
            ])
            if let download = ((saved.records.first?["fields"] as? JSONObject)?["data"] as? JSONObject)?["value"] as? JSONObject,
               let url = download["downloadURL"] as? String {
                downloads.add(url)
            }
            return .done()
        }
        let urls = downloads.all
        let download = await closedLoop(concurrency: 1, duration: Duration(seconds: settings.seconds), limit: max(urls.count, 1), state: { $0 }) { _, iteration in
            guard !urls.isEmpty else { return .failed("no asset was uploaded") }
            let response = try await client.http.execute(HTTPClientRequest(url: urls[iteration % urls.count]), timeout: .seconds(300))
            var received = 0
            for try await chunk in response.body { received += chunk.readableBytes }
            guard response.status == .ok, received == size else { return .failed("download: HTTP \(response.status.code), \(received) bytes") }
            return .done()
        }
        func megabytesPerSecond(_ load: LoadOutcome) -> Double {
            load.seconds > 0 ? Double((load.operations - load.errors) * size) / 1_000_000 / load.seconds : 0
        }
        return [
            ScenarioResult(name: "asset.upload.\(megabytes)mb", operation: "assets/upload, POST of \(megabytes) MB, records/modify binding it",
                           concurrency: 1, load: upload, figures: ["MBps": megabytesPerSecond(upload)]),
            ScenarioResult(name: "asset.download.\(megabytes)mb", operation: "GET of a \(megabytes) MB asset's downloadURL",
                           concurrency: 1, load: download, figures: ["MBps": megabytesPerSecond(download)]),
        ]
    }
}

/// The download URLs the upload scenario bound, for the download scenario.
final class DownloadURLs: Sendable {
    private let urls = Mutex<[String]>([])
    func add(_ url: String) { urls.withLock { $0.append(url) } }
    var all: [String] { urls.withLock { $0 } }
}

/// `size` bytes made 64 KiB at a time as an upload reads them (each chunk one byte value, changing
/// from chunk to chunk): a large body that is never held whole.
public struct GeneratedBytes: AsyncSequence, Sendable {
    public typealias Element = ByteBuffer
    let size: Int

    /// A body of `size` bytes.
    public init(size: Int) { self.size = size }

    public struct AsyncIterator: AsyncIteratorProtocol {
        let size: Int
        var sent = 0

        public mutating func next() async throws -> ByteBuffer? {
            guard sent < size else { return nil }
            let count = Swift.min(64 * 1024, size - sent)
            var buffer = ByteBufferAllocator().buffer(capacity: count)
            buffer.writeRepeatingByte(UInt8(truncatingIfNeeded: sent / 65_536), count: count)
            sent += count
            return buffer
        }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(size: size) }
}
