import StratusPush
import XCTest

final class WebhookURLPolicyTests: XCTestCase {
    private func code(_ text: String, loopback: Bool = false) -> WebhookURLError.Code? {
        do {
            _ = try WebhookURLPolicy.check(text, allowInsecureLoopback: loopback)
            return nil
        } catch {
            return error.code
        }
    }

    func testHTTPSIsAccepted() throws {
        let url = try WebhookURLPolicy.check("https://hooks.example.com/stratus?x=1", allowInsecureLoopback: false)
        XCTAssertEqual(url.host, "hooks.example.com")
        XCTAssertNil(code("HTTPS://hooks.example.com:8443/a"))
    }

    func testPlainHTTPOnlyToLoopbackAndOnlyWhenAllowed() {
        XCTAssertEqual(code("http://hooks.example.com/a"), .insecureScheme)
        XCTAssertEqual(code("http://hooks.example.com/a", loopback: true), .insecureScheme)
        XCTAssertEqual(code("http://127.0.0.1:8080/a"), .insecureScheme)
        for loopback in ["http://127.0.0.1:8080/a", "http://127.1.2.3/a", "http://localhost/a", "http://[::1]:9000/a", "http://api.localhost/a"] {
            XCTAssertNil(code(loopback, loopback: true), loopback)
        }
        for outside in ["http://localhost.example.com/a", "http://127.0.0.1.example.com/a", "http://10.0.0.1/a", "http://128.0.0.1/a", "http://127.0.0.256/a"] {
            XCTAssertEqual(code(outside, loopback: true), .insecureScheme, outside)
        }
    }

    func testOtherSchemesAreRefused() {
        XCTAssertEqual(code("ftp://hooks.example.com/a", loopback: true), .insecureScheme)
        XCTAssertEqual(code("file:///etc/passwd", loopback: true), .missingHost)
    }

    func testUserInfoIsRefused() {
        XCTAssertEqual(code("https://user:pass@hooks.example.com/a"), .userInfo)
        XCTAssertEqual(code("https://user@hooks.example.com/a"), .userInfo)
    }

    func testLengthLimit() {
        let base = "https://hooks.example.com/"
        XCTAssertNil(code(base + String(repeating: "a", count: 2048 - base.count)))
        XCTAssertEqual(code(base + String(repeating: "a", count: 2049 - base.count)), .tooLong)
    }

    func testHostAndAbsoluteURLRequired() {
        XCTAssertEqual(code("https:///path"), .missingHost)
        XCTAssertEqual(code("/relative/path"), .malformed)
        XCTAssertEqual(code("not a url"), .malformed)
        XCTAssertEqual(code(""), .malformed)
    }

    func testErrorsSayWhy() {
        XCTAssertThrowsError(try WebhookURLPolicy.check("http://hooks.example.com/a", allowInsecureLoopback: false)) { error in
            XCTAssertTrue("\(error)".contains("https"), "\(error)")
        }
    }
}
