import Foundation
import Hummingbird
import HummingbirdTesting
@testable import StratusAPI
import StratusCore
import StratusPostgres
import StratusRuntime
import StratusTesting
import XCTest

/// Request rate limits and sign-in throttling: the bucket arithmetic with instants of the test's
/// own (no sleeps), and the THROTTLED answers over HTTP against the real PostgreSQL.
final class RateLimitTests: XCTestCase {
    typealias Body = [String: Any]
    let start = ContinuousClock.now

    func at(_ seconds: Double) -> ContinuousClock.Instant { start + .milliseconds(Int64(seconds * 1000)) }

    func testTokenBucketRefillsAtItsRateUpToItsBurst() {
        let rate = TokenRate(perSecond: 2, burst: 3)
        var bucket = TokenBucket(rate: rate, now: at(0))
        for _ in 0..<3 { XCTAssertEqual(bucket.take(rate: rate, now: at(0)), .allowed) }
        // Empty: one token in 0.5 s, so the client is told 1 s (whole seconds, at least 1).
        XCTAssertEqual(bucket.take(rate: rate, now: at(0)), .limited(retryAfter: 1))
        XCTAssertEqual(bucket.take(rate: rate, now: at(0.4)), .limited(retryAfter: 1))
        XCTAssertEqual(bucket.take(rate: rate, now: at(0.5)), .allowed)
        XCTAssertEqual(bucket.take(rate: rate, now: at(0.5)), .limited(retryAfter: 1))
        // A long quiet spell refills to the burst, never past it.
        XCTAssertTrue(bucket.isFull(rate: rate, now: at(100)))
        for _ in 0..<3 { XCTAssertEqual(bucket.take(rate: rate, now: at(100)), .allowed) }
        XCTAssertEqual(bucket.take(rate: rate, now: at(100)), .limited(retryAfter: 1))

        // A slow rate tells the client how long to wait for the next token.
        let slow = TokenRate(perSecond: 0.1, burst: 1)
        var slowBucket = TokenBucket(rate: slow, now: at(0))
        XCTAssertEqual(slowBucket.take(rate: slow, now: at(0)), .allowed)
        XCTAssertEqual(slowBucket.take(rate: slow, now: at(0)), .limited(retryAfter: 10))
        XCTAssertEqual(slowBucket.take(rate: slow, now: at(7.5)), .limited(retryAfter: 3))
        XCTAssertEqual(slowBucket.take(rate: slow, now: at(10)), .allowed)
        // An instant before the last update (another thread's clock read) adds nothing and takes nothing back.
        XCTAssertEqual(slowBucket.take(rate: slow, now: at(9)), .limited(retryAfter: 10))
    }

    func testKeyedBucketsAreSeparateAndTheirNumberIsBounded() {
        let buckets = KeyedBuckets(rate: TokenRate(perSecond: 1, burst: 2), capacity: 160)
        XCTAssertEqual(buckets.take("a", now: at(0)), .allowed)
        XCTAssertEqual(buckets.take("a", now: at(0)), .allowed)
        XCTAssertEqual(buckets.take("a", now: at(0)), .limited(retryAfter: 1))
        XCTAssertEqual(buckets.take("b", now: at(0)), .allowed, "another key has its own bucket")

        // A client minting keys never grows the table past its capacity, whether the buckets it
        // leaves behind have refilled (dropped first) or are still in use (the oldest go).
        for index in 0..<10_000 { _ = buckets.take("minted-\(index)", now: at(Double(index) / 1000)) }
        XCTAssertLessThanOrEqual(buckets.count, 160)
        for index in 0..<10_000 { _ = buckets.take("busy-\(index)", cost: 1, now: at(10)) }
        XCTAssertLessThanOrEqual(buckets.count, 160)
        // Full buckets are dropped before anything else: a key whose bucket was refilled starts full.
        XCTAssertEqual(buckets.take("fresh", now: at(1000)), .allowed)
        XCTAssertGreaterThan(buckets.count, 0)
    }

    func testSignInLimiterLocksALoginAndAnAddress() throws {
        var limits = SignInLimits()
        limits.perLogin = 3
        limits.perAddress = 5
        limits.window = .seconds(300)
        let limiter = SignInLimiter(limits)
        // Three failures of one login (capitals and spaces folded) lock it for 100 s (300 s / 3).
        for login in ["alice", " Alice", "ALICE"] { _ = try limiter.begin(container: "c", login: login, address: "10.0.0.1", now: at(0)) }
        XCTAssertThrowsError(try limiter.begin(container: "c", login: "alice", address: "10.0.0.2", now: at(0))) { error in
            XCTAssertEqual((error as? StratusError)?.code, .throttled)
            XCTAssertEqual((error as? StratusError)?.retryAfter, 100)
        }
        // The same login in another container is another account.
        _ = try limiter.begin(container: "other", login: "alice", address: "10.0.0.3", now: at(0))
        // The lock lifts one attempt at a time.
        _ = try limiter.begin(container: "c", login: "alice", address: "10.0.0.2", now: at(100))
        XCTAssertThrowsError(try limiter.begin(container: "c", login: "alice", address: "10.0.0.2", now: at(100)))
        // A success starts the login afresh.
        try limiter.begin(container: "c", login: "bob", address: "10.0.0.4", now: at(0)).succeeded()
        for _ in 0..<3 { _ = try limiter.begin(container: "c", login: "bob", address: "10.0.0.4", now: at(0)) }
        XCTAssertThrowsError(try limiter.begin(container: "c", login: "bob", address: "10.0.0.4", now: at(0)))

        // Five failures from one address, each on another login, lock the address for every login.
        for index in 0..<5 { _ = try limiter.begin(container: "c", login: "user\(index)", address: "10.9.9.9", now: at(0)) }
        XCTAssertThrowsError(try limiter.begin(container: "c", login: "someone-new", address: "10.9.9.9", now: at(0))) { error in
            XCTAssertEqual((error as? StratusError)?.retryAfter, 60)
        }
        // A refused attempt used up nothing of the login's count.
        _ = try limiter.begin(container: "c", login: "someone-new", address: "10.0.0.5", now: at(0))
    }

    // MARK: Over HTTP

    typealias Fixture = RecordAPITests.Fixture

    /// The API over a fresh migrated database with one container, configured by `configure`.
    static func withAPI(
        _ configure: (inout APIConfiguration) -> Void, _ body: @Sendable (Fixture, any TestClientProtocol) async throws -> Void
    ) async throws {
        var configuration = APIConfiguration(secretKey: SecretKey.generate())
        configure(&configuration)
        let fixed = configuration
        try await TestSupport.withMigratedStore { store, _ in
            let token = try await ContainerStore(store: store).create(container: "iCloud.com.example.notes", label: "test", logger: TestSupport.logger)
            let fixture = Fixture(store: store, configuration: fixed, apiToken: token)
            let router = buildRouter(APIDependencies(store: store, readiness: [], metrics: { "" }), configuration: fixed)
            try await Application(router: router, logger: TestSupport.logger).test(.router) { client in
                try await body(fixture, client)
            }
        }
    }

    /// Sends a request: status, `Retry-After` header, decoded body.
    static func send(_ client: any TestClientProtocol, _ uri: String, _ json: Any) async throws -> (Int, String?, Body) {
        let data = try JSONSerialization.data(withJSONObject: json)
        return try await client.execute(uri: uri, method: .post, body: ByteBuffer(data: data)) { response in
            let object = try? JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? Body
            return (Int(response.status.code), response.headers[.retryAfter], object ?? [:])
        }
    }

    func testRequestsPastAUsersRateAreThrottledWithRetryAfter() async throws {
        try await Self.withAPI({ configuration in
            // A rate nobody reaches refilling within the test: the burst is all there is.
            configuration.rateLimits.user = TokenRate(perSecond: 0.01, burst: 3)
            configuration.rateLimits.container = TokenRate(perSecond: 0.01, burst: 5)
        }) { fixture, client in
            for _ in 0..<3 {
                let (status, _, body) = try await Self.send(client, fixture.path("zones/list"), [:])
                XCTAssertEqual(status, 200, "\(body)")
            }
            let (status, retryHeader, body) = try await Self.send(client, fixture.path("zones/list"), [:])
            XCTAssertEqual(status, 429)
            XCTAssertEqual(body["serverErrorCode"] as? String, "THROTTLED")
            let retryAfter = try XCTUnwrap(body["retryAfter"] as? Int)
            XCTAssertGreaterThanOrEqual(retryAfter, 99)
            XCTAssertLessThanOrEqual(retryAfter, 100)
            XCTAssertEqual(retryHeader, "\(retryAfter)")
            XCTAssertNotNil(body["uuid"] as? String)

            // Another user has a bucket of its own, but the container's is shared: 3 of alice's +
            // 2 of bob's use up its 5 (alice's refused call took none of it).
            for _ in 0..<2 {
                let (bobStatus, _, _) = try await Self.send(client, fixture.path("zones/list", user: "_bob"), [:])
                XCTAssertEqual(bobStatus, 200)
            }
            let (containerStatus, _, containerBody) = try await Self.send(client, fixture.path("zones/list", user: "_bob"), [:])
            XCTAssertEqual(containerStatus, 429)
            XCTAssertEqual(containerBody["serverErrorCode"] as? String, "THROTTLED")
            XCTAssertTrue((containerBody["reason"] as? String ?? "").contains("container"), "\(containerBody)")
            // Anonymous public reads count against the container too.
            let (anonymousStatus, _, _) = try await Self.send(client, fixture.path("records/query", database: "public", user: nil), ["query": ["recordType": "Note"]])
            XCTAssertEqual(anonymousStatus, 429)
        }
    }

    func testRateLimitsAreOffByDefault() async throws {
        try await Self.withAPI({ _ in }) { fixture, client in
            for _ in 0..<50 {
                let (status, _, _) = try await Self.send(client, fixture.path("zones/list"), [:])
                XCTAssertEqual(status, 200)
            }
        }
        let configuration = try StratusConfiguration.fromEnvironment(["STRATUS_SECRET_KEY": String(repeating: "ab", count: 32)])
        XCTAssertFalse(configuration.api.rateLimits.user.isOn)
        XCTAssertFalse(configuration.api.rateLimits.container.isOn)
        XCTAssertEqual(configuration.api.limits.userQuotaBytes, 0)
        XCTAssertEqual(configuration.api.signInLimits.perLogin, 10)
        XCTAssertEqual(configuration.api.signInLimits.perAddress, 50)
        XCTAssertEqual(configuration.api.signInLimits.window, .seconds(900))
    }

    func testLimitSettingsAreReadFromTheEnvironment() throws {
        let configuration = try StratusConfiguration.fromEnvironment([
            "STRATUS_SECRET_KEY": String(repeating: "ab", count: 32),
            "STRATUS_RATE_USER_PER_SECOND": "2.5", "STRATUS_RATE_USER_BURST": "20",
            "STRATUS_RATE_CONTAINER_PER_SECOND": "100",
            "STRATUS_RATE_MAX_BUCKETS": "5000",
            "STRATUS_SIGNIN_LOGIN_FAILURES": "5", "STRATUS_SIGNIN_ADDRESS_FAILURES": "0", "STRATUS_SIGNIN_WINDOW_SECONDS": "60",
            "STRATUS_USER_QUOTA_BYTES": "1048576",
        ])
        XCTAssertEqual(configuration.api.rateLimits.user, TokenRate(perSecond: 2.5, burst: 20))
        XCTAssertEqual(configuration.api.rateLimits.container, TokenRate(perSecond: 100, burst: 100), "the burst defaults to a second's worth")
        XCTAssertEqual(configuration.api.rateLimits.maxBuckets, 5000)
        XCTAssertEqual(configuration.api.signInLimits.perLogin, 5)
        XCTAssertEqual(configuration.api.signInLimits.perAddress, 0)
        XCTAssertEqual(configuration.api.signInLimits.window, .seconds(60))
        XCTAssertEqual(configuration.api.limits.userQuotaBytes, 1_048_576)
        for (name, value) in [("STRATUS_RATE_USER_PER_SECOND", "-1"), ("STRATUS_RATE_USER_PER_SECOND", "fast"), ("STRATUS_USER_QUOTA_BYTES", "-5"),
                              ("STRATUS_SIGNIN_WINDOW_SECONDS", "0")] {
            XCTAssertThrowsError(try StratusConfiguration.fromEnvironment(["STRATUS_SECRET_KEY": String(repeating: "ab", count: 32), name: value])) { error in
                XCTAssertTrue("\(error)".contains(name), "\(error)")
            }
        }
    }

    func testFailedSignInsLockTheLoginAndTheAddressAlikeForKnownAndUnknownLogins() async throws {
        try await Self.withAPI({ configuration in
            configuration.signInLimits.perLogin = 2
            configuration.signInLimits.perAddress = 4
            configuration.signInLimits.window = .seconds(600)
        }) { fixture, client in
            let users = UserStore(store: fixture.store)
            _ = try await users.create(container: fixture.container, login: "alice@example.com", password: "right password", logger: TestSupport.logger)
            let signIn = "/auth/1/\(fixture.container)/signin?ckAPIToken=\(fixture.apiToken)"
            func attempt(_ login: String, _ password: String) async throws -> (Int, String?, Body) {
                try await Self.send(client, signIn, ["login": login, "password": password])
            }
            // Two failures lock alice's login, and then even the right password is refused.
            for _ in 0..<2 {
                let (status, _, _) = try await attempt("alice@example.com", "wrong")
                XCTAssertEqual(status, 401)
            }
            let (locked, header, lockedBody) = try await attempt("alice@example.com", "right password")
            XCTAssertEqual(locked, 429)
            XCTAssertEqual(lockedBody["serverErrorCode"] as? String, "THROTTLED")
            // 600 s / 2 failures: the next attempt in at most 300 s (less what refilled during the test).
            let wait = try XCTUnwrap(lockedBody["retryAfter"] as? Int)
            XCTAssertTrue((280...300).contains(wait), "\(wait)")
            XCTAssertEqual(header, "\(wait)")
            // A login that does not exist locks the same way, with the same answer.
            for _ in 0..<2 {
                let (status, _, _) = try await attempt("nobody@example.com", "wrong")
                XCTAssertEqual(status, 401)
            }
            let (unknown, _, unknownBody) = try await attempt("nobody@example.com", "wrong")
            XCTAssertEqual(unknown, 429)
            // The same reason but for the seconds, which count down as the test runs (both are held
            // to the window above).
            let seconds = /[0-9]+ s/
            XCTAssertEqual((unknownBody["reason"] as? String)?.replacing(seconds, with: "N s"), (lockedBody["reason"] as? String)?.replacing(seconds, with: "N s"))
            XCTAssertEqual(unknownBody.keys.sorted(), lockedBody.keys.sorted())
            XCTAssertTrue((280...300).contains(unknownBody["retryAfter"] as? Int ?? 0), "\(unknownBody)")
            // The address (test requests come over no socket: they share the count of clients
            // without an address) has had 4 failures: a fresh login is refused too, with the
            // address's wait (600 s / 4).
            let (address, _, addressBody) = try await attempt("carol@example.com", "wrong")
            XCTAssertEqual(address, 429)
            XCTAssertTrue((130...150).contains(addressBody["retryAfter"] as? Int ?? 0), "\(addressBody)")
        }
    }

    func testASuccessfulSignInClearsTheLoginsFailures() async throws {
        try await Self.withAPI({ configuration in
            configuration.signInLimits.perLogin = 2
            configuration.signInLimits.perAddress = 0
        }) { fixture, client in
            _ = try await UserStore(store: fixture.store).create(container: fixture.container, login: "alice", password: "right password", logger: TestSupport.logger)
            let signIn = "/auth/1/\(fixture.container)/signin?ckAPIToken=\(fixture.apiToken)"
            // Without the reset the second failure would lock the login and the last sign-in would be refused.
            for (password, expected) in [("wrong", 401), ("right password", 200), ("wrong", 401), ("right password", 200)] {
                let (status, _, body) = try await Self.send(client, signIn, ["login": "alice", "password": password])
                XCTAssertEqual(status, expected, "\(body)")
            }
        }
    }
}
