import Foundation
import StratusBlobStore
import StratusCore
import StratusRuntime
import StratusTesting
import XCTest

/// The asset settings: defaults, the S3 store's required and defaulted settings, and refusals that
/// name the variable.
final class AssetConfigurationTests: XCTestCase {
    let base = ["STRATUS_SECRET_KEY": SecretKey.generate().hex, "STRATUS_DATA_DIR": "/tmp/stratus-asset-configuration"]

    func read(_ settings: [String: String]) throws -> StratusConfiguration {
        try StratusConfiguration.fromEnvironment(base.merging(settings) { $1 })
    }

    func testDefaultsAreAFolderUnderTheDataFolderAndApplesLimit() throws {
        let configuration = try read([:])
        guard case .fileSystem(let directory) = configuration.blobStore else { return XCTFail("\(configuration.blobStore)") }
        XCTAssertEqual(directory, "/tmp/stratus-asset-configuration/assets")
        XCTAssertEqual(configuration.api.assets.maxBytes, 52_428_800)
        XCTAssertEqual(configuration.api.assets.urlLifetime, .seconds(3600))
        XCTAssertEqual(configuration.assetGrace, .seconds(86_400))
        XCTAssertEqual(configuration.api.assets.bindWindow, .seconds(43_200), "half the grace period")
        let tuned = try read(["STRATUS_MAX_ASSET_BYTES": "1000", "STRATUS_ASSET_GRACE_SECONDS": "600", "STRATUS_ASSET_DIR": "/srv/assets"])
        XCTAssertEqual(tuned.api.assets.maxBytes, 1000)
        XCTAssertEqual(tuned.api.assets.bindWindow, .seconds(300))
        guard case .fileSystem("/srv/assets") = tuned.blobStore else { return XCTFail("\(tuned.blobStore)") }
    }

    func testS3NeedsABucketAndCredentialsAndDefaultsItsAddressing() throws {
        let credentials = ["STRATUS_ASSET_STORE": "s3", "STRATUS_S3_BUCKET": "b", "STRATUS_S3_ACCESS_KEY_ID": "k", "STRATUS_S3_SECRET_ACCESS_KEY": "very-secret"]
        for missing in ["STRATUS_S3_BUCKET", "STRATUS_S3_ACCESS_KEY_ID", "STRATUS_S3_SECRET_ACCESS_KEY"] {
            XCTAssertThrowsError(try read(credentials.filter { $0.key != missing }), missing) { error in
                XCTAssertTrue("\(error)".contains(missing), "\(error)")
            }
        }
        let aws = try read(credentials.merging(["STRATUS_S3_REGION": "eu-west-1"]) { $1 })
        guard case .s3(let amazon) = aws.blobStore else { return XCTFail("\(aws.blobStore)") }
        XCTAssertEqual(amazon.endpoint.absoluteString, "https://s3.eu-west-1.amazonaws.com")
        XCTAssertEqual(amazon.addressing, .virtualHost)
        XCTAssertFalse("\(aws.blobStore)".contains("very-secret"), "the secret is never printed")
        let minio = try read(credentials.merging(["STRATUS_S3_ENDPOINT": "http://minio.internal:9000"]) { $1 })
        guard case .s3(let local) = minio.blobStore else { return XCTFail("\(minio.blobStore)") }
        XCTAssertEqual(local.addressing, .path)
        XCTAssertEqual(local.location(of: "k").host, "minio.internal:9000")
    }

    func testBadValuesAreRefusedNamingTheVariable() throws {
        let refused: [[String: String]] = [
            ["STRATUS_ASSET_STORE": "ftp"],
            ["STRATUS_MAX_ASSET_BYTES": "0"],
            ["STRATUS_MAX_ASSET_BYTES": "lots"],
            ["STRATUS_ASSET_GRACE_SECONDS": "1"],
            ["STRATUS_ASSET_URL_TTL_SECONDS": "-5"],
            ["STRATUS_ASSET_STORE": "s3", "STRATUS_S3_BUCKET": "b", "STRATUS_S3_ACCESS_KEY_ID": "k", "STRATUS_S3_SECRET_ACCESS_KEY": "s", "STRATUS_S3_ENDPOINT": "ftp://x"],
            ["STRATUS_ASSET_STORE": "s3", "STRATUS_S3_BUCKET": "b", "STRATUS_S3_ACCESS_KEY_ID": "k", "STRATUS_S3_SECRET_ACCESS_KEY": "s", "STRATUS_S3_ADDRESSING": "dns"],
            ["STRATUS_ASSET_STORE": "s3", "STRATUS_S3_BUCKET": "b", "STRATUS_S3_ACCESS_KEY_ID": "k", "STRATUS_S3_SECRET_ACCESS_KEY": "s", "STRATUS_S3_PART_SIZE_BYTES": "1000"],
        ]
        for settings in refused {
            XCTAssertThrowsError(try read(settings), "\(settings)") { error in
                let named = settings.keys.filter { $0 != "STRATUS_S3_BUCKET" && $0 != "STRATUS_S3_ACCESS_KEY_ID" && $0 != "STRATUS_S3_SECRET_ACCESS_KEY" }
                XCTAssertTrue(named.contains { "\(error)".contains($0) }, "\(settings): \(error)")
            }
        }
    }
}
