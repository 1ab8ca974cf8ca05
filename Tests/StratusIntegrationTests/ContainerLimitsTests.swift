import Foundation
import Hummingbird
import HummingbirdTesting
@testable import StratusAPI
import StratusCore
import StratusPostgres
import StratusTesting
import XCTest

/// A container's own limits (`ContainerLimits`, migration 0040), shared by every API process: the
/// request rate held across two API applications over one database, the storage quota and the
/// subscription limit refused whichever application receives the write, and the CLI that sets and
/// shows them.
final class ContainerLimitsTests: XCTestCase {
    typealias Body = [String: Any]
    typealias Fixture = RecordAPITests.Fixture
    static let container = "iCloud.com.example.notes"

    /// Two API applications over one fresh database (each with its own limiters and buckets, as two
    /// `stratus-api` processes have), one container whose limits `limits` sets before any request.
    static func withTwoAPIs(
        _ limits: ContainerLimits, _ body: @Sendable (Fixture, any TestClientProtocol, any TestClientProtocol) async throws -> Void
    ) async throws {
        let configuration = APIConfiguration(secretKey: SecretKey.generate())
        try await TestSupport.withMigratedStore { store, url in
            let containers = ContainerStore(store: store)
            let token = try await containers.create(container: container, label: "test", logger: TestSupport.logger)
            let set = try await containers.setLimits(of: container, limits, logger: TestSupport.logger)
            XCTAssertTrue(set)
            var fixture = Fixture(store: store, configuration: configuration, apiToken: token)
            fixture.databaseURL = url
            let fixed = fixture
            @Sendable func api() -> Application<RouterResponder<APIRequestContext>> {
                Application(router: buildRouter(APIDependencies(store: store, readiness: [], metrics: { "" }), configuration: configuration), logger: TestSupport.logger)
            }
            try await api().test(.router) { first in
                try await api().test(.router) { second in
                    try await body(fixed, first, second)
                }
            }
        }
    }

    /// Many clients spread over two applications for a few seconds, far past the container's rate:
    /// together they are admitted the bucket's burst and its rate over the time, within 10 %.
    func testTwoAPIProcessesHoldAContainersRateWithinTenPercent() async throws {
        let rate = 40.0, burst = 8.0
        try await Self.withTwoAPIs(ContainerLimits(requestRate: rate, requestBurst: burst)) { fixture, first, second in
            let query = try JSONSerialization.data(withJSONObject: ["query": ["recordType": "Note"]])
            let path = fixture.path("records/query", database: "public", user: nil)
            let seconds = 3.0
            let started = ContinuousClock.now
            let deadline = started + .milliseconds(Int64(seconds * 1000))
            // Per client: admitted, throttled (each with its retryAfter checked), anything else.
            let counts = try await withThrowingTaskGroup(of: (api: Int, admitted: Int, throttled: Int).self) { group in
                for client in 0..<16 {
                    let api = client % 2
                    let target = api == 0 ? first : second
                    group.addTask {
                        var admitted = 0, throttled = 0
                        while ContinuousClock.now < deadline {
                            let (status, retryAfter, code) = try await target.execute(uri: path, method: .post, body: ByteBuffer(data: query)) { response in
                                let object = try? JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? Body
                                return (Int(response.status.code), object?["retryAfter"] as? Int, object?["serverErrorCode"] as? String)
                            }
                            switch status {
                            case 200: admitted += 1
                            case 429:
                                XCTAssertEqual(code, "THROTTLED")
                                XCTAssertGreaterThanOrEqual(retryAfter ?? 0, 1)
                                throttled += 1
                                // A throttled client asks again a moment later, as a busy client would.
                                await Task.yield()
                            default: XCTFail("status \(status)")
                            }
                        }
                        return (api, admitted, throttled)
                    }
                }
                var all: [(api: Int, admitted: Int, throttled: Int)] = []
                for try await count in group { all.append(count) }
                return all
            }
            let elapsed = (ContinuousClock.now - started) / .seconds(1)
            let admitted = counts.reduce(0) { $0 + $1.admitted }
            let throttled = counts.reduce(0) { $0 + $1.throttled }
            let expected = burst + rate * elapsed
            XCTAssertGreaterThan(throttled, admitted, "the load was past the rate: \(counts)")
            for api in 0..<2 {
                XCTAssertGreaterThan(counts.filter { $0.api == api }.reduce(0) { $0 + $1.admitted }, 0, "application \(api) admitted some: \(counts)")
            }
            XCTAssertLessThanOrEqual(Double(admitted), expected * 1.1, "admitted \(admitted) in \(elapsed) s; the rate allows \(expected)")
            XCTAssertGreaterThanOrEqual(Double(admitted), expected * 0.9, "admitted \(admitted) in \(elapsed) s; the rate allows \(expected)")
        }
    }

    /// A user's rate of the container's own is shared too: the burst spent through one application
    /// is spent for the other, and another user keeps their own.
    func testAUsersRateIsSharedBetweenProcesses() async throws {
        try await Self.withTwoAPIs(ContainerLimits(userRequestRate: 0.01, userRequestBurst: 4)) { fixture, first, second in
            var statuses: [Int] = []
            for index in 0..<6 {
                let (status, _, _) = try await RateLimitTests.send(index % 2 == 0 ? first : second, fixture.path("zones/list"), [:])
                statuses.append(status)
            }
            XCTAssertEqual(statuses, [200, 200, 200, 200, 429, 429])
            let (status, retryAfter, body) = try await RateLimitTests.send(second, fixture.path("zones/list"), [:])
            XCTAssertEqual(status, 429)
            XCTAssertEqual(body["serverErrorCode"] as? String, "THROTTLED")
            XCTAssertTrue((body["reason"] as? String ?? "").contains("user"), "\(body)")
            XCTAssertGreaterThanOrEqual(Int(retryAfter ?? "") ?? 0, 90, "one token takes 100 s at 0.01 a second")
            let (bob, _, _) = try await RateLimitTests.send(first, fixture.path("zones/list", user: "_bob"), [:])
            XCTAssertEqual(bob, 200)
        }
    }

    /// The container's storage quota (no process quota is set) refuses the write that would pass it
    /// through either application, and a delete through one makes room for a write through the other.
    func testAContainersQuotaRefusesTheWriteThatPassesItWhicheverProcessReceivesIt() async throws {
        try await Self.withTwoAPIs(ContainerLimits(userQuotaBytes: 10_000)) { fixture, first, second in
            func modify(_ client: any TestClientProtocol, _ operations: [Body]) async throws -> [Body] {
                let (status, records) = try await QuotaTests.modify(client, fixture, operations)
                XCTAssertEqual(status, 200, "\(records)")
                return records
            }
            for index in 0..<4 {
                let records = try await modify(index % 2 == 0 ? first : second, [QuotaTests.save("n\(index)", bytes: 2_300)])
                XCTAssertNil(records[0]["serverErrorCode"], "\(records)")
            }
            for client in [first, second] {
                let records = try await modify(client, [QuotaTests.save("n4", bytes: 2_300)])
                XCTAssertEqual(records[0]["serverErrorCode"] as? String, "QUOTA_EXCEEDED", "\(records)")
                XCTAssertTrue((records[0]["reason"] as? String ?? "").contains("10000 bytes"), "\(records)")
            }
            let deleted = try await modify(first, [["operationType": "forceDelete", "record": ["recordName": "n0"]]])
            XCTAssertNil(deleted[0]["serverErrorCode"], "\(deleted)")
            let saved = try await modify(second, [QuotaTests.save("n4", bytes: 2_300)])
            XCTAssertNil(saved[0]["serverErrorCode"], "\(saved)")
        }
    }

    /// The container's subscription limit replaces the process's.
    func testAContainersSubscriptionLimitIsHeld() async throws {
        try await Self.withTwoAPIs(ContainerLimits(maxSubscriptionsPerUser: 1)) { fixture, first, second in
            let (_, created) = try await SubscriptionTests.modify(
                first, fixture, database: "public", [SubscriptionTests.create(SubscriptionTests.querySubscription("s1", zone: nil))])
            XCTAssertNil(created.first?["serverErrorCode"], "\(created)")
            let (_, refused) = try await SubscriptionTests.modify(
                second, fixture, database: "public", [SubscriptionTests.create(SubscriptionTests.querySubscription("s2", zone: nil))])
            XCTAssertEqual(refused.first?["serverErrorCode"] as? String, "LIMIT_EXCEEDED", "\(refused)")
        }
    }

    /// `stratus container set` changes the limits every process reads, audited; `show` prints them
    /// with the container's usage; a bad value is refused before anything changes.
    func testTheCLISetsAndShowsAContainersLimits() async throws {
        try await Self.withTwoAPIs(ContainerLimits()) { fixture, _, _ in
            let settings = ["STRATUS_DATABASE_URL": fixture.databaseURL]
            let set = try await StratusExecutable.run(
                "stratus", ["container", "set", Self.container, "--request-rate", "25", "--user-quota-bytes", "5000"], settings: settings)
            XCTAssertEqual(set.status, 0, set.output)
            let limits = try await ContainerStore(store: fixture.store).limits(of: Self.container, logger: TestSupport.logger)
            XCTAssertEqual(limits, ContainerLimits(requestRate: 25, userQuotaBytes: 5000))
            let show = try await StratusExecutable.run("stratus", ["container", "show", Self.container], settings: settings)
            XCTAssertEqual(show.status, 0, show.output)
            for line in ["request-rate: 25", "user-quota-bytes: 5000", "request-burst: default", "state: serving", "records: 0"] {
                XCTAssertTrue(show.output.contains(line), "\(line): \(show.output)")
            }
            let cleared = try await StratusExecutable.run("stratus", ["container", "set", Self.container, "--request-rate", "default"], settings: settings)
            XCTAssertEqual(cleared.status, 0, cleared.output)
            let after = try await ContainerStore(store: fixture.store).limits(of: Self.container, logger: TestSupport.logger)
            XCTAssertEqual(after, ContainerLimits(userQuotaBytes: 5000))
            let bad = try await StratusExecutable.run("stratus", ["container", "set", Self.container, "--request-rate", "-3"], settings: settings)
            XCTAssertNotEqual(bad.status, 0)
            XCTAssertTrue(bad.output.contains("request-rate"), bad.output)
            let unknown = try await StratusExecutable.run("stratus", ["container", "show", "iCloud.no.such"], settings: settings)
            XCTAssertNotEqual(unknown.status, 0)
        }
    }

    /// The container's page of the console shows its state, usage and limits; its forms change the
    /// limits (the API applies them at once) and suspend and resume it. Bad values change nothing.
    func testTheConsoleShowsAndChangesAContainersTenancy() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            let browser = ConsoleAuthTests.Browser(client)
            let csrf = try await ConsoleDataTests.signIn(browser, store: fixture.store)
            _ = try await RecordAPITests.modify(client, fixture, zone: nil, [["operationType": "create", "record": RecordAPITests.note("a", ["v": ["value": "a"]])]])
            let page = try await browser.request("/console/containers/\(Self.container)")
            XCTAssertEqual(page.status, 200, page.html)
            for fragment in ["<strong id=\"container-state\">serving</strong>", "<tr><td>records</td><td>1</td></tr>", "id=\"limit-request-rate\" name=\"request-rate\" value=\"default\""] {
                XCTAssertTrue(page.html.contains(fragment), "\(fragment): \(page.html)")
            }
            func form(_ fields: [String: String]) -> [String: String] { fields.merging(["csrf": csrf, "container": Self.container]) { $1 } }

            let bad = try await browser.request("/console/tenancy/limits", method: .post, form: form(["user-request-rate": "fast"]))
            XCTAssertEqual(bad.status, 400, bad.html)
            XCTAssertTrue(bad.html.contains("user-request-rate"), bad.html)
            let unchanged = try await ContainerStore(store: fixture.store).limits(of: Self.container, logger: TestSupport.logger)
            XCTAssertEqual(unchanged, ContainerLimits())

            let changed = try await browser.request(
                "/console/tenancy/limits", method: .post, form: form(["user-request-rate": "0.01", "user-request-burst": "2", "request-rate": "default"]))
            XCTAssertEqual(changed.status, 303, changed.html)
            let limits = try await ContainerStore(store: fixture.store).limits(of: Self.container, logger: TestSupport.logger)
            XCTAssertEqual(limits, ContainerLimits(userRequestRate: 0.01, userRequestBurst: 2))
            let shown = try await browser.request(try XCTUnwrap(changed.location))
            XCTAssertTrue(shown.html.contains("The limits were changed") && shown.html.contains("value=\"0.01\""), shown.html)
            var statuses: [Int] = []
            for _ in 0..<3 { statuses.append(try await RateLimitTests.send(client, fixture.path("zones/list", user: "_carol"), [:]).0) }
            XCTAssertEqual(statuses, [200, 200, 429], "the API applies the console's limit")

            // The allowed origins (CORS): a bad origin or a blank field changes nothing; a list is
            // kept normalized and shown; `*` alone allows any origin again.
            let containers = ContainerStore(store: fixture.store)
            XCTAssertTrue(shown.html.contains(">*</textarea>"), "any origin, by default: \(shown.html)")
            for (field, says) in [("https://notes.example.com\nnot an origin", "not a web origin"), (" \n ", "at least one origin")] {
                let refused = try await browser.request("/console/tenancy/origins", method: .post, form: form(["allowed-origins": field]))
                XCTAssertEqual(refused.status, 400, refused.html)
                XCTAssertTrue(refused.html.contains(says), refused.html)
                let kept = try await containers.allowedOrigins(container: Self.container, logger: TestSupport.logger)
                XCTAssertEqual(kept, .some(nil), "\(says): nothing changed")
            }
            let listed = try await browser.request(
                "/console/tenancy/origins", method: .post, form: form(["allowed-origins": "https://Notes.example.com\nhttp://localhost:3000, https://notes.example.com"]))
            XCTAssertEqual(listed.status, 303, listed.html)
            let origins = try await containers.allowedOrigins(container: Self.container, logger: TestSupport.logger)
            XCTAssertEqual(origins, .some(["https://notes.example.com", "http://localhost:3000"]))
            let listedPage = try await browser.request(try XCTUnwrap(listed.location))
            XCTAssertTrue(
                listedPage.html.contains("The allowed origins were changed") && listedPage.html.contains(">https://notes.example.com\nhttp://localhost:3000</textarea>"),
                listedPage.html)
            let any = try await browser.request("/console/tenancy/origins", method: .post, form: form(["allowed-origins": "*"]))
            XCTAssertEqual(any.status, 303, any.html)
            let anyAgain = try await containers.allowedOrigins(container: Self.container, logger: TestSupport.logger)
            XCTAssertEqual(anyAgain, .some(nil))

            let suspended = try await browser.request("/console/tenancy/suspend", method: .post, form: form(["reason": "unpaid"]))
            XCTAssertEqual(suspended.status, 303, suspended.html)
            let (refused, _, answer) = try await RateLimitTests.send(client, fixture.path("zones/list", user: "_dave"), [:])
            XCTAssertEqual(refused, 403, "\(answer)")
            let suspendedPage = try await browser.request(try XCTUnwrap(suspended.location))
            XCTAssertTrue(suspendedPage.html.contains("<strong id=\"container-state\">suspended</strong>"), suspendedPage.html)
            let resumed = try await browser.request("/console/tenancy/resume", method: .post, form: form([:]))
            XCTAssertEqual(resumed.status, 303, resumed.html)
            let (served, _, _) = try await RateLimitTests.send(client, fixture.path("zones/list", user: "_dave"), [:])
            XCTAssertEqual(served, 200)
        }
    }

    /// `/metrics` names at most the configured number of containers: requests past them count as
    /// `other`, and usage (read by `refresh`, not by the scrape) names the first containers only.
    func testUsagePerContainerIsExportedForABoundedNumberOfContainers() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let containers = ContainerStore(store: store)
            let token = try await containers.create(container: Self.container, label: "test", logger: TestSupport.logger)
            let other = "iCloud.com.example.other"
            let otherToken = try await containers.create(container: other, label: "test", logger: TestSupport.logger)
            let metrics = ContainerMetrics(limit: 1)
            var dependencies = APIDependencies(store: store, readiness: [], metrics: { "stratus_test 1\n" })
            dependencies.containerMetrics = metrics
            let configuration = APIConfiguration(secretKey: SecretKey.generate())
            let fixture = Fixture(store: store, configuration: configuration, apiToken: token)
            let router = buildRouter(dependencies, configuration: configuration)
            try await Application(router: router, logger: TestSupport.logger).test(.router) { client in
                let records = try await QuotaTests.modify(client, fixture, [QuotaTests.save("m1", bytes: 10)]).1
                XCTAssertNil(records.first?["serverErrorCode"], "\(records)")
                for _ in 0..<2 {
                    let (status, _) = try await RecordAPITests.post(
                        client, "/database/1/\(other)/development/public/records/query?ckAPIToken=\(otherToken)", ["query": ["recordType": "Note"]])
                    XCTAssertEqual(status, 200)
                }
                try await metrics.refresh(store: store, logger: TestSupport.logger)
                let text = try await client.execute(uri: "/metrics", method: .get) { String(buffer: $0.body) }
                for line in [
                    "stratus_test 1", "stratus_container_requests_total{container=\"\(Self.container)\"} 1", "stratus_container_requests_total{container=\"other\"} 2",
                    "stratus_container_records{container=\"\(Self.container)\"} 1", "stratus_container_zones{container=\"\(Self.container)\"} 0",
                ] {
                    XCTAssertTrue(text.split(separator: "\n").contains(Substring(line)), "\(line): \(text)")
                }
                XCTAssertFalse(text.contains(other), "the second container is not named: \(text)")
            }
        }
    }

    /// Two API processes that cache the container's access for 60 s: a change of its limits ends
    /// what each cached (migration 0040's trigger notifies them), so each applies it within a second.
    func testALimitChangeReachesEveryProcessWithinASecondWhateverItCached() async throws {
        try await TestSupport.withMigratedStore { store, url in
            let apiToken = try await ContainerStore(store: store).create(container: Self.container, label: "test", logger: TestSupport.logger)
            let query = AuthTests.path("records/query") + "?ckAPIToken=\(apiToken)"
            let body = try AuthTests.json(["query": ["recordType": "Note"]])
            try await ContainerTenancyTests.withTwoCachingAPIs(store: store, url: url, secretKey: SecretKey.generate()) { other, first, second in
                for client in [first, second] {
                    let (status, answer) = try await AuthTests.send(client, query, body: body)
                    XCTAssertEqual(status, 200, "served (and cached) before the change: \(answer)")
                }
                let set = try await ContainerStore(store: other).setLimits(
                    of: Self.container, ContainerLimits(requestRate: 0.01, requestBurst: 1), logger: TestSupport.logger)
                XCTAssertTrue(set)
                let changed = ContinuousClock.now
                for (name, client) in [("first", first), ("second", second)] {
                    try await TestSupport.eventually(timeout: .seconds(1), "the \(name) API process to apply the container's rate") {
                        try await AuthTests.send(client, query, body: body).0 == 429
                    }
                }
                XCTAssertLessThan(ContinuousClock.now - changed, .seconds(1))
            }
        }
    }
}
