import Crypto
import Foundation
@testable import StratusPush
import StratusPushTestSupport
import Synchronization
import XCTest

final class APNsCredentialsTests: XCTestCase {
    let key = P256.Signing.PrivateKey()

    private func credentials() throws -> APNsCredentials {
        try APNsCredentials(teamID: "TEAM123456", keyID: "KEY7654321", privateKeyPEM: key.pemRepresentation, topic: "com.example.notes", environment: .production)
    }

    func testEnvironmentsNameApplesServers() {
        XCTAssertEqual(APNsEnvironment.production.baseURL, "https://api.push.apple.com")
        XCTAssertEqual(APNsEnvironment.development.baseURL, "https://api.sandbox.push.apple.com")
        XCTAssertEqual(APNsEnvironment(baseURL: "https://localhost:8443/").baseURL, "https://localhost:8443")
    }

    func testAKeyThatIsNotPEMIsRefusedWithoutQuotingIt() {
        let text = "-----BEGIN PRIVATE KEY-----\nc2VjcmV0LWtleS1tYXRlcmlhbA==\n-----END PRIVATE KEY-----"
        XCTAssertThrowsError(try APNsCredentials(teamID: "T", keyID: "K1", privateKeyPEM: text, topic: "t", environment: .development)) { error in
            XCTAssertTrue("\(error)".contains("K1"), "\(error)")
            XCTAssertFalse("\(error)".contains("c2VjcmV0"), "\(error)")
        }
    }

    func testDescriptionLeavesTheKeyOut() throws {
        let description = "\(try credentials())"
        XCTAssertTrue(description.contains("<redacted>"))
        XCTAssertFalse(description.contains(key.pemRepresentation.split(separator: "\n")[1]))
    }

    func testProviderTokenIsAnES256JWTWithRawSignature() throws {
        let jwt = try APNsProviderToken.make(teamID: "TEAM123456", keyID: "KEY7654321", issuedAt: 1_700_000_000, privateKey: key)
        let parts = jwt.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        XCTAssertEqual(parts.count, 3)
        XCTAssertFalse(jwt.contains("=") || jwt.contains("+") || jwt.contains("/"))
        XCTAssertEqual(APNsCheck.base64URLDecode(parts[0]).map { String(decoding: $0, as: UTF8.self) }, #"{"alg":"ES256","kid":"KEY7654321"}"#)
        XCTAssertEqual(APNsCheck.base64URLDecode(parts[1]).map { String(decoding: $0, as: UTF8.self) }, #"{"iat":1700000000,"iss":"TEAM123456"}"#)
        let signature = try XCTUnwrap(APNsCheck.base64URLDecode(parts[2]))
        XCTAssertEqual(signature.count, 64)
        let ecdsa = try P256.Signing.ECDSASignature(rawRepresentation: signature)
        XCTAssertTrue(key.publicKey.isValidSignature(ecdsa, for: Data((parts[0] + "." + parts[1]).utf8)))
        XCTAssertFalse(P256.Signing.PrivateKey().publicKey.isValidSignature(ecdsa, for: Data((parts[0] + "." + parts[1]).utf8)))
    }

    func testTokenIsCachedForFiftyMinutesThenRenewed() throws {
        let clock = Mutex(Date(timeIntervalSince1970: 1_700_000_000))
        let cache = APNsTokenCache(credentials: try credentials(), now: { clock.withLock { $0 } })
        let first = try cache.token()
        clock.withLock { $0 += 49 * 60 + 59 }
        XCTAssertEqual(try cache.token(), first)
        clock.withLock { $0 += 1 }
        let second = try cache.token()
        XCTAssertNotEqual(second, first)
        let claims = try XCTUnwrap(APNsCheck.base64URLDecode(String(second.split(separator: ".")[1])))
        XCTAssertEqual(String(decoding: claims, as: UTF8.self), #"{"iat":1700003000,"iss":"TEAM123456"}"#)
        XCTAssertEqual(try cache.token(), second)
    }

    func testInvalidatingAnOlderTokenKeepsTheCurrentOne() throws {
        let cache = APNsTokenCache(credentials: try credentials())
        let first = try cache.token()
        cache.invalidate(first)
        let second = try cache.token()
        XCTAssertNotEqual(first, second)
        cache.invalidate(first)  // a late report about the old token
        XCTAssertEqual(try cache.token(), second)
    }

    func testConcurrentCallersShareOneToken() async throws {
        let cache = APNsTokenCache(credentials: try credentials())
        let tokens = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<32 { group.addTask { try cache.token() } }
            return try await group.reduce(into: Set<String>()) { $0.insert($1) }
        }
        XCTAssertEqual(tokens.count, 1)
    }
}
