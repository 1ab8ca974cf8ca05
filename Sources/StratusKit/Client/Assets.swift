import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension StratusDatabase {
    /// Uploads a file's bytes for a record's asset field, streamed from disk (never held in memory
    /// whole), and answers the asset value to save in that field of that record.
    public func uploadAsset(fileURL: URL, recordType: String, recordID: RecordID, fieldName: String) async throws -> Asset {
        let answer = try await call("assets/upload", [
            "tokens": [["recordType": .string(recordType), "recordName": .string(recordID.recordName), "fieldName": .string(fieldName)]],
            "zoneID": recordID.zoneID.wire,
        ])
        guard let text = answer["tokens"]?.array?.first?["url"]?.string, let url = URL(string: text) else {
            throw StratusKitError.invalidResponse("assets/upload answered no URL")
        }
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        request.setValue("application/octet-stream", forHTTPHeaderField: "Content-Type")
        // The URL is the credential and takes one upload: it is not retried.
        let (data, response): (Data, URLResponse)
        do {
            (data, response) = try await container.transport.session.upload(for: request, fromFile: fileURL)
        } catch {
            throw StratusKitError(code: .networkFailure, reason: "the upload got no answer: \(error.localizedDescription)")
        }
        let json = try Transport.read(data, status: (response as? HTTPURLResponse)?.statusCode ?? 0, retryAfterHeader: nil)
        guard let file = json["singleFile"], case .asset(let asset)? = FieldValue(type: "ASSETID", value: file) else {
            throw StratusKitError.invalidResponse("an upload answer without singleFile")
        }
        return asset
    }

    /// Downloads an asset's bytes to `destination` (replaced if it exists), streamed to disk.
    public func downloadAsset(_ asset: Asset, to destination: URL) async throws {
        guard let text = asset.downloadURL, let url = URL(string: text) else {
            throw StratusKitError.invalidArgument("the asset has no downloadURL (fetch its record first)")
        }
        let (file, response): (URL, URLResponse)
        do {
            (file, response) = try await container.transport.session.download(for: URLRequest(url: url))
        } catch {
            throw StratusKitError(code: .networkFailure, reason: "the download got no answer: \(error.localizedDescription)")
        }
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        guard (200..<300).contains(status) else {
            let data = (try? Data(contentsOf: file, options: .mappedIfSafe)) ?? Data()
            try? FileManager.default.removeItem(at: file)
            _ = try Transport.read(data.prefix(1 << 20), status: status, retryAfterHeader: nil)
            throw StratusKitError.invalidResponse("HTTP \(status)")
        }
        if FileManager.default.fileExists(atPath: destination.path) { try FileManager.default.removeItem(at: destination) }
        try FileManager.default.moveItem(at: file, to: destination)
    }
}
