import Foundation
import StratusBlobStore

extension StratusConfiguration {
    /// Reads where asset bytes live and how assets are limited and collected: `STRATUS_ASSET_STORE`
    /// (`filesystem` or `s3`), `STRATUS_ASSET_DIR`, `STRATUS_S3_*`, `STRATUS_MAX_ASSET_BYTES`,
    /// `STRATUS_ASSET_URL_TTL_SECONDS`, `STRATUS_ASSET_GRACE_SECONDS`, `STRATUS_ASSET_GC_INTERVAL_SECONDS`.
    static func readAssets(_ environment: [String: String], into configuration: inout StratusConfiguration) throws {
        func number(_ name: String, _ fallback: Int64, _ range: ClosedRange<Int64>) throws -> Int64 {
            guard let text = environment[name] else { return fallback }
            guard let value = Int64(text), range.contains(value) else {
                throw ConfigurationProblem("\(name) must be a whole number from \(range.lowerBound) to \(range.upperBound), got '\(text)'")
            }
            return value
        }
        configuration.api.assets.maxBytes = try number("STRATUS_MAX_ASSET_BYTES", configuration.api.assets.maxBytes, 1...(5 << 40))
        configuration.api.assets.urlLifetime = .seconds(try number("STRATUS_ASSET_URL_TTL_SECONDS", 3600, 10...7 * 86_400))
        let grace = try number("STRATUS_ASSET_GRACE_SECONDS", 86_400, 2...365 * 86_400)
        configuration.assetGrace = .seconds(grace)
        // A receipt may be bound for the first time only during the first half of the grace period.
        configuration.api.assets.bindWindow = .seconds(grace / 2)
        configuration.assetCollectionInterval = .seconds(try number("STRATUS_ASSET_GC_INTERVAL_SECONDS", 300, 1...86_400))
        switch environment["STRATUS_ASSET_STORE"] ?? "filesystem" {
        case "filesystem":
            configuration.blobStore = .fileSystem(directory: environment["STRATUS_ASSET_DIR"] ?? configuration.dataDirectory + "/assets")
        case "s3":
            func required(_ name: String) throws -> String {
                guard let value = environment[name], !value.isEmpty else { throw ConfigurationProblem("STRATUS_ASSET_STORE=s3 needs \(name)") }
                return value
            }
            let region = environment["STRATUS_S3_REGION"] ?? "us-east-1"
            let endpointText = environment["STRATUS_S3_ENDPOINT"] ?? "https://s3.\(region).amazonaws.com"
            guard let endpoint = URL(string: endpointText), let scheme = endpoint.scheme, ["http", "https"].contains(scheme), endpoint.host != nil else {
                throw ConfigurationProblem("STRATUS_S3_ENDPOINT must be an http(s) URL, got '\(endpointText)'")
            }
            let defaultAddressing: S3Configuration.Addressing = (endpoint.host ?? "").hasSuffix("amazonaws.com") ? .virtualHost : .path
            let addressingText = environment["STRATUS_S3_ADDRESSING"] ?? defaultAddressing.rawValue
            guard let addressing = S3Configuration.Addressing(rawValue: addressingText) else {
                throw ConfigurationProblem("STRATUS_S3_ADDRESSING must be 'path' or 'virtual', got '\(addressingText)'")
            }
            configuration.blobStore = .s3(S3Configuration(
                endpoint: endpoint, region: region, bucket: try required("STRATUS_S3_BUCKET"), accessKeyID: try required("STRATUS_S3_ACCESS_KEY_ID"),
                secretAccessKey: try required("STRATUS_S3_SECRET_ACCESS_KEY"), addressing: addressing, keyPrefix: environment["STRATUS_S3_KEY_PREFIX"] ?? "",
                partSize: Int(try number("STRATUS_S3_PART_SIZE_BYTES", 8 << 20, (5 << 20)...(1 << 30)))))
        case let other:
            throw ConfigurationProblem("STRATUS_ASSET_STORE must be 'filesystem' or 's3', got '\(other)'")
        }
    }
}
