import Foundation
import Hummingbird
import HummingbirdTesting
import StratusAPI
import StratusTesting
import XCTest

/// The console's request-id search over the API's recent error answers.
final class ConsoleErrorsTests: XCTestCase {
    typealias Browser = ConsoleAuthTests.Browser

    func testAnErrorIsFoundByItsRequestIDWithoutTheTokensOfItsQuery() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            let browser = Browser(client)
            _ = try await ConsoleDataTests.signIn(browser, store: fixture.store)
            let path = fixture.path("records/modify")
            var requestIDs: [String] = []
            for _ in 0..<2 {
                requestIDs.append(try await client.execute(uri: path, method: .post, body: ByteBuffer(string: "{not json")) { response in
                    XCTAssertEqual(response.status, .badRequest)
                    return try XCTUnwrap(response.headers[.init("X-Request-ID")!])
                })
            }
            let all = try await browser.request("/console/errors")
            XCTAssertEqual(all.status, 200, all.html)
            XCTAssertTrue(requestIDs.allSatisfy { all.html.contains($0) }, all.html)
            let found = try await browser.request("/console/errors?requestID=\(requestIDs[0])")
            XCTAssertTrue(found.html.contains(requestIDs[0]))
            XCTAssertFalse(found.html.contains(requestIDs[1]), "only the request searched for")
            XCTAssertTrue(found.html.contains("BAD_REQUEST"), found.html)
            XCTAssertTrue(found.html.contains("POST /database/1/iCloud.com.example.notes/development/private/records/modify"), found.html)
            XCTAssertFalse(found.html.contains(fixture.apiToken), "the query and its tokens are never kept")
            XCTAssertFalse(found.html.contains("ckWebAuthToken"))
            let none = try await browser.request("/console/errors?requestID=nothing-like-this")
            XCTAssertTrue(none.html.contains("No errors."))
        }
    }

    func testOperatorsLimitedToContainersCannotSearchErrors() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            let browser = Browser(client)
            _ = try await ConsoleDataTests.signIn(browser, store: fixture.store, containers: [ConsoleDataTests.container])
            let page = try await browser.request("/console/errors")
            XCTAssertEqual(page.status, 403)
        }
    }
}
