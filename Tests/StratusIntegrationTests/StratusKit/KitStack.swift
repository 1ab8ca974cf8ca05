import Foundation
import HummingbirdTesting
import StratusAPI
import StratusCore
@testable import StratusKit
import StratusTesting
import StratusWorkers
import XCTest

/// Sync engines against stratus-api on a real port: the helpers the StratusKit tests share.
enum KitStack {
    typealias Fixture = RecordAPITests.Fixture

    /// The API on a real port (with the relay and a worker of `projection` when `pipeline`).
    static func with(
        projection: any Projection = SubscriptionsProjection(), pipeline: Bool = false,
        _ body: @Sendable (Fixture, Int, APIPipelineFixture.Location) async throws -> Void
    ) async throws {
        try await APIPipelineFixture.withStack(projection: projection, relay: pipeline, worker: pipeline, live: true) { fixture, client, _, location in
            try await body(fixture, try XCTUnwrap(client.port), location)
        }
    }

    static func container(_ fixture: Fixture, port: Int, user: String?, expiresIn seconds: Int64 = 3600, keys: (any StratusKit.FieldKeyProvider)? = nil) -> StratusContainer {
        let token = user.map {
            WebAuthToken(userRecordName: $0, container: fixture.container, expiresAt: Int64(Date().timeIntervalSince1970) + seconds).signed(with: fixture.configuration.secretKey)
        }
        return StratusContainer(
            serverURL: URL(string: "http://127.0.0.1:\(port)")!, identifier: fixture.container, authentication: .apiToken(fixture.apiToken, webAuthToken: token),
            retryPolicy: RetryPolicy(maxAttempts: 3, baseDelay: 0.05, maxDelay: 1), keyProvider: keys)
    }

    /// A container whose server cannot be reached: a device without network.
    static func offline(_ fixture: Fixture, user: String) -> StratusContainer {
        StratusContainer(serverURL: URL(string: "http://127.0.0.1:1")!, identifier: fixture.container,
                         authentication: .apiToken(fixture.apiToken, webAuthToken: "none"), retryPolicy: .none)
    }
}

