import Crypto
import Foundation
import StratusPush
import XCTest

final class WebhookSignatureTests: XCTestCase {
    let secret = Data("whsec-test-secret".utf8)
    let body = Data(#"{"event":"record.changed","id":"e1"}"#.utf8)

    func testSignatureIsLowerCaseHexHMACOfTimestampDotBody() {
        let signature = WebhookSignature.sign(body: body, timestamp: 1_700_000_000, secret: secret)
        let expected = HMAC<SHA256>.authenticationCode(
            for: Data("1700000000.".utf8) + body, using: SymmetricKey(data: secret))
        XCTAssertEqual(signature, "v1=" + expected.map { String(format: "%02x", $0) }.joined())
    }

    func testFixedVector() {
        // HMAC-SHA256("key", "1.{}") computed independently.
        XCTAssertEqual(
            WebhookSignature.sign(body: Data("{}".utf8), timestamp: 1, secret: Data("key".utf8)),
            "v1=" + Self.hex(HMAC<SHA256>.authenticationCode(for: Data("1.{}".utf8), using: SymmetricKey(data: Data("key".utf8)))))
    }

    func testVerifyAcceptsItsOwnSignatureAndUpperCaseHex() {
        let now = Date(timeIntervalSince1970: 1_700_000_100)
        let signature = WebhookSignature.sign(body: body, timestamp: 1_700_000_000, secret: secret)
        XCTAssertTrue(WebhookSignature.verify(body: body, timestamp: 1_700_000_000, secret: secret, signature: signature, now: now))
        XCTAssertTrue(WebhookSignature.verify(body: body, timestamp: 1_700_000_000, secret: secret, signature: "v1=" + signature.dropFirst(3).uppercased(), now: now))
    }

    func testVerifyRefusesAnotherBodySecretTimestampOrVersion() {
        let now = Date(timeIntervalSince1970: 1_700_000_000)
        let signature = WebhookSignature.sign(body: body, timestamp: 1_700_000_000, secret: secret)
        XCTAssertFalse(WebhookSignature.verify(body: body + Data(" ".utf8), timestamp: 1_700_000_000, secret: secret, signature: signature, now: now))
        XCTAssertFalse(WebhookSignature.verify(body: body, timestamp: 1_700_000_000, secret: Data("other".utf8), signature: signature, now: now))
        XCTAssertFalse(WebhookSignature.verify(body: body, timestamp: 1_700_000_001, secret: secret, signature: signature, now: now))
        XCTAssertFalse(WebhookSignature.verify(body: body, timestamp: 1_700_000_000, secret: secret, signature: "v0" + signature.dropFirst(2), now: now))
        XCTAssertFalse(WebhookSignature.verify(body: body, timestamp: 1_700_000_000, secret: secret, signature: String(signature.dropLast(2)), now: now))
        XCTAssertFalse(WebhookSignature.verify(body: body, timestamp: 1_700_000_000, secret: secret, signature: "v1=zz", now: now))
        XCTAssertFalse(WebhookSignature.verify(body: body, timestamp: 1_700_000_000, secret: secret, signature: "", now: now))
    }

    func testVerifyRefusesTimestampsOutsideTheTolerance() {
        let signature = WebhookSignature.sign(body: body, timestamp: 1_700_000_000, secret: secret)
        func verify(at now: TimeInterval) -> Bool {
            WebhookSignature.verify(body: body, timestamp: 1_700_000_000, secret: secret, signature: signature,
                                    tolerance: .seconds(300), now: Date(timeIntervalSince1970: now))
        }
        XCTAssertTrue(verify(at: 1_700_000_300))
        XCTAssertTrue(verify(at: 1_699_999_700))
        XCTAssertFalse(verify(at: 1_700_000_301))
        XCTAssertFalse(verify(at: 1_699_999_699))
    }

    func testVerifyAcceptsAnyOfSeveralEntriesDuringRotation() {
        let now = Date(timeIntervalSince1970: 1_700_000_000)
        let old = WebhookSignature.sign(body: body, timestamp: 1_700_000_000, secret: Data("old".utf8))
        let new = WebhookSignature.sign(body: body, timestamp: 1_700_000_000, secret: secret)
        XCTAssertTrue(WebhookSignature.verify(body: body, timestamp: 1_700_000_000, secret: secret, signature: "\(old), \(new)", now: now))
        XCTAssertFalse(WebhookSignature.verify(body: body, timestamp: 1_700_000_000, secret: secret, signature: "\(old),\(old)", now: now))
    }

    static func hex(_ bytes: some Sequence<UInt8>) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
}
