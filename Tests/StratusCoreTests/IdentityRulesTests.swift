import _CryptoExtras
import Crypto
import Foundation
import StratusCore
import XCTest

/// ID-token sign-in's rules without a server: reading tokens and key sets, signatures, claims,
/// nonces, audiences, when key sets are fetched again, which addresses may serve them, account
/// linking, and sessions in web auth tokens.
final class IdentityRulesTests: XCTestCase {
    static let issuer = TrustedIssuer(issuer: "https://issuer.example", keySetURL: "https://issuer.example/keys", audiences: ["com.example.app", "web.example"])
    static let now: Int64 = 1_800_000_000
    let rsa = try! _RSA.Signing.PrivateKey(keySize: .bits2048)
    let p256 = P256.Signing.PrivateKey()

    static func claims(_ change: (inout IDToken.Claims) -> Void = { _ in }) -> IDToken.Claims {
        var claims = IDToken.Claims(
            issuer: issuer.issuer, subject: "001234.abcd", audiences: ["com.example.app"], expiresAt: now + 600, issuedAt: now - 5,
            nonce: IDTokenRules.hashedNonce("raw nonce"), email: "x7@privaterelay.appleid.com", emailVerified: true, isPrivateEmail: true)
        change(&claims)
        return claims
    }

    // MARK: Claims

    func testClaimsRulesTable() {
        let cases: [(String, IDToken.Claims, String?, String?)] = [
            ("good, hashed nonce", Self.claims(), "raw nonce", nil),
            ("good, plain nonce", Self.claims { $0.nonce = "raw nonce" }, "raw nonce", nil),
            ("second audience", Self.claims { $0.audiences = ["web.example"] }, "raw nonce", nil),
            ("within the leeway after exp", Self.claims { $0.expiresAt = Self.now - 30 }, "raw nonce", nil),
            ("nbf within the leeway", Self.claims { $0.notBefore = Self.now + 30 }, "raw nonce", nil),
            ("expired", Self.claims { $0.expiresAt = Self.now - 61 }, "raw nonce", "expired"),
            ("not yet valid", Self.claims { $0.notBefore = Self.now + 120 }, "raw nonce", "not valid yet"),
            ("issued in the future", Self.claims { $0.issuedAt = Self.now + 120 }, "raw nonce", "issued in the future"),
            ("issued too long ago", Self.claims { $0.issuedAt = Self.now - 2 * 86_400 }, "raw nonce", "issued more than"),
            ("wrong issuer", Self.claims { $0.issuer = "https://evil.example" }, "raw nonce", "not by the trusted issuer"),
            ("wrong audience", Self.claims { $0.audiences = ["com.other.app"] }, "raw nonce", "not to a client id"),
            ("several audiences, no azp", Self.claims { $0.audiences = ["com.example.app", "x"] }, "raw nonce", "no authorized party"),
            ("several audiences, trusted azp", Self.claims { $0.audiences = ["com.example.app", "x"]; $0.authorizedParty = "com.example.app" }, "raw nonce", nil),
            ("untrusted azp", Self.claims { $0.authorizedParty = "x" }, "raw nonce", "authorized party"),
            ("no nonce claim", Self.claims { $0.nonce = nil }, "raw nonce", "carries no nonce"),
            ("no nonce sent", Self.claims(), nil, "nonce is required"),
            ("other nonce", Self.claims(), "another nonce", "does not match"),
            ("the hash sent as the nonce", Self.claims(), IDTokenRules.hashedNonce("raw nonce"), nil),
            ("nonce too long", Self.claims(), String(repeating: "n", count: 256), "longer than"),
        ]
        for (name, claims, nonce, refusal) in cases {
            do {
                let account = try IDTokenRules.check(claims, trusted: Self.issuer, nonce: nonce, now: Self.now)
                XCTAssertNil(refusal, "\(name): accepted")
                XCTAssertEqual(account.subject, "001234.abcd", name)
                XCTAssertEqual(account.nonce, claims.nonce, name)
                XCTAssertGreaterThanOrEqual(account.expiresAt, claims.expiresAt, name)
            } catch {
                XCTAssertNotNil(refusal, "\(name): refused with \(error)")
                if let refusal { XCTAssertTrue(error.reason.contains(refusal), "\(name): \(error.reason)") }
            }
        }
    }

    /// The hash sent as the nonce is the claim itself: the raw nonce never left the app, which is
    /// why the plain form is also accepted (other providers put the nonce itself in the token).
    func testEmailIsKeptOnlyWhenVerifiedAndTheAppsNameFillsGaps() throws {
        let verified = try IDTokenRules.check(Self.claims(), trusted: Self.issuer, nonce: "raw nonce", now: Self.now)
        XCTAssertEqual(verified.email, "x7@privaterelay.appleid.com")
        XCTAssertTrue(verified.isPrivateEmail)
        let unverified = try IDTokenRules.check(Self.claims { $0.emailVerified = false }, trusted: Self.issuer, nonce: "raw nonce", now: Self.now)
        XCTAssertNil(unverified.email)
        let named = try verified.naming(givenName: " Ada ", familyName: "Lovelace")
        XCTAssertEqual(named.nameComponents, NameComponents(givenName: "Ada", familyName: "Lovelace"))
        let fromToken = try IDTokenRules.check(Self.claims { $0.givenName = "Grace" }, trusted: Self.issuer, nonce: "raw nonce", now: Self.now)
        XCTAssertEqual(try fromToken.naming(givenName: "Ada", familyName: nil).nameComponents.givenName, "Grace")
        XCTAssertThrowsError(try verified.naming(givenName: String(repeating: "a", count: 300), familyName: nil))
    }

    // MARK: Tokens and signatures

    static func segment(_ object: [String: Any]) -> String {
        Base64URL.encode(try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]))
    }

    static var payload: [String: Any] {
        ["iss": issuer.issuer, "sub": "001234.abcd", "aud": "com.example.app", "exp": now + 600, "iat": now, "nonce": "n",
         "email": "a@example.com", "email_verified": "true", "is_private_email": "false"]
    }

    func rs256(_ header: [String: Any] = ["alg": "RS256", "kid": "r1"], _ payload: [String: Any] = IdentityRulesTests.payload) -> String {
        let input = Self.segment(header) + "." + Self.segment(payload)
        let signature = try! rsa.signature(for: SHA256.hash(data: Data(input.utf8)), padding: .insecurePKCS1v1_5)
        return input + "." + Base64URL.encode(signature.rawRepresentation)
    }

    func es256(_ header: [String: Any] = ["alg": "ES256", "kid": "e1"], _ payload: [String: Any] = IdentityRulesTests.payload) -> String {
        let input = Self.segment(header) + "." + Self.segment(payload)
        return input + "." + Base64URL.encode(try! p256.signature(for: Data(input.utf8)).rawRepresentation)
    }

    var keySetJSON: [String: Any] {
        let primitives = try! rsa.publicKey.getKeyPrimitives()
        let point = p256.publicKey.rawRepresentation
        return ["keys": [
            ["kty": "RSA", "kid": "r1", "use": "sig", "alg": "RS256", "n": Base64URL.encode(primitives.modulus), "e": Base64URL.encode(primitives.publicExponent)],
            ["kty": "EC", "kid": "e1", "crv": "P-256", "x": Base64URL.encode(point.prefix(32)), "y": Base64URL.encode(point.suffix(32))],
            ["kty": "EC", "kid": "enc", "use": "enc", "crv": "P-256", "x": Base64URL.encode(point.prefix(32)), "y": Base64URL.encode(point.suffix(32))],
            ["kty": "oct", "kid": "hmac", "k": "c2VjcmV0"],
        ]]
    }

    var keySet: KeySet { try! KeySet.parse(Array(try! JSONSerialization.data(withJSONObject: keySetJSON))) }

    func testSignaturesOfBothAlgorithmsVerifyAndTamperingIsRefused() throws {
        let keys = keySet
        XCTAssertEqual(Set(keys.keys.keys), ["r1", "e1"], "keys for encryption and of other types are left out")
        for text in [rs256(), es256()] {
            let token = try IDToken.parse(text)
            try token.verify(with: try XCTUnwrap(keys.keys[token.keyID]))
            XCTAssertEqual(token.claims.subject, "001234.abcd")
            XCTAssertTrue(token.claims.emailVerified)
            XCTAssertFalse(token.claims.isPrivateEmail)
        }
        // Another payload under the same signature.
        let parts = rs256().split(separator: ".")
        var changed = Self.payload
        changed["sub"] = "someone.else"
        let forged = try IDToken.parse([String(parts[0]), Self.segment(changed), String(parts[2])].joined(separator: "."))
        XCTAssertThrowsError(try forged.verify(with: keys.keys["r1"]!)) { XCTAssertEqual(($0 as? StratusError)?.code, .authenticationFailed) }
        // A key of the wrong type for the algorithm: an ES256 token against the RSA key.
        let mismatched = try IDToken.parse(es256(["alg": "ES256", "kid": "r1"]))
        XCTAssertThrowsError(try mismatched.verify(with: keys.keys["r1"]!)) { XCTAssertTrue(($0 as! StratusError).reason.contains("not a key for ES256")) }
        // Another signer's key under the same key id.
        let other = try IDToken.parse(es256())
        let point = P256.Signing.PrivateKey().publicKey.rawRepresentation
        let otherKey = try XCTUnwrap(KeySet.usableKey(.object([
            "kty": .string("EC"), "kid": .string("e1"), "crv": .string("P-256"),
            "x": .string(Base64URL.encode(point.prefix(32))), "y": .string(Base64URL.encode(point.suffix(32))),
        ])))
        XCTAssertThrowsError(try other.verify(with: otherKey))
    }

    func testMalformedTokensAreRefusedWithAReason() {
        let none = Self.segment(["alg": "none", "kid": "r1"]) + "." + Self.segment(Self.payload) + "."
        var noExp = Self.payload
        noExp["exp"] = nil
        var stringAud = Self.payload
        stringAud["aud"] = 7
        var longSub = Self.payload
        longSub["sub"] = String(repeating: "s", count: 256)
        let cases: [(String, String, String)] = [
            ("empty", "", "empty"),
            ("too long", String(repeating: "a", count: IDToken.maxBytes + 1), "longer than"),
            ("two parts", "a.b", "three"),
            ("not base64url", "a+b.c.d", "base64url"),
            ("alg none", none, "'none'"),
            ("HS256", rs256(["alg": "HS256", "kid": "r1"]), "'HS256'"),
            ("no kid", rs256(["alg": "RS256"]), "key id"),
            ("critical header", rs256(["alg": "RS256", "kid": "r1", "crit": ["b64"]]), "critical"),
            ("no exp", rs256(["alg": "RS256", "kid": "r1"], noExp), "'exp'"),
            ("aud a number", rs256(["alg": "RS256", "kid": "r1"], stringAud), "'aud'"),
            ("sub too long", rs256(["alg": "RS256", "kid": "r1"], longSub), "'sub'"),
            ("payload not JSON", Self.segment(["alg": "RS256", "kid": "r1"]) + "." + Base64URL.encode(Data("nope".utf8)) + ".AA", "not a JSON object"),
        ]
        for (name, text, reason) in cases {
            XCTAssertThrowsError(try IDToken.parse(text), name) { error in
                let error = error as! StratusError
                XCTAssertEqual(error.code, .authenticationFailed, name)
                XCTAssertTrue(error.reason.contains(reason), "\(name): \(error.reason)")
                XCTAssertLessThan(error.reason.utf8.count, 700, name)
            }
        }
    }

    func testKeySetsAreBounded() throws {
        XCTAssertThrowsError(try KeySet.parse(Array(repeating: UInt8(ascii: " "), count: KeySet.maxBytes + 1))) {
            XCTAssertTrue(($0 as! StratusError).reason.contains("larger than"))
        }
        XCTAssertThrowsError(try KeySet.parse(Array("[]".utf8))) { XCTAssertTrue(($0 as! StratusError).reason.contains("'keys' list")) }
        let many = ["keys": Array(repeating: (keySetJSON["keys"] as! [[String: Any]])[1], count: KeySet.maxKeys + 1)]
        XCTAssertThrowsError(try KeySet.parse(Array(try JSONSerialization.data(withJSONObject: many)))) {
            XCTAssertTrue(($0 as! StratusError).reason.contains("at most \(KeySet.maxKeys)"))
        }
        let unusable = ["keys": [["kty": "oct", "kid": "k", "k": "AA"]]]
        XCTAssertThrowsError(try KeySet.parse(Array(try JSONSerialization.data(withJSONObject: unusable)))) {
            XCTAssertTrue(($0 as! StratusError).reason.contains("no RS256 or ES256"))
        }
        // A short RSA modulus is not a usable key.
        let short = try _RSA.Signing.PublicKey(n: Data(repeating: 0xC5, count: 128), e: Data([1, 0, 1]))
        let primitives = try short.getKeyPrimitives()
        XCTAssertNil(KeySet.usableKey(.object([
            "kty": .string("RSA"), "kid": .string("s"), "n": .string(Base64URL.encode(primitives.modulus)), "e": .string(Base64URL.encode(primitives.publicExponent)),
        ])))
    }

    // MARK: Fetching key sets again

    func testKeySetRefreshTable() {
        let refresh = KeySetRefresh(maxAge: 3600, refetchInterval: 60)
        let kept = KeySetRefresh.Kept(fetchedAt: 1000, keyIDs: ["a"])
        let cases: [(String, KeySetRefresh.Kept?, String, Int64, KeySetRefresh.Decision)] = [
            ("nothing kept", nil, "a", 1000, .fetch),
            ("known key", kept, "a", 1010, .use),
            ("too old", kept, "a", 1000 + 3600, .fetch),
            ("clock went back", kept, "a", 999, .fetch),
            ("unknown key, never refetched", kept, "b", 1010, .refetch),
            ("unknown key, refetched just now", KeySetRefresh.Kept(fetchedAt: 1000, keyIDs: ["a"], lastRefetchAt: 1005), "b", 1010, .unknownKey),
            ("unknown key, refetched a while ago", KeySetRefresh.Kept(fetchedAt: 1000, keyIDs: ["a"], lastRefetchAt: 1005), "b", 1065, .refetch),
            ("known key, refetched just now", KeySetRefresh.Kept(fetchedAt: 1000, keyIDs: ["a"], lastRefetchAt: 1005), "a", 1010, .use),
        ]
        for (name, kept, keyID, now, expected) in cases {
            XCTAssertEqual(refresh.decide(keyID: keyID, kept: kept, now: now), expected, name)
        }
    }

    // MARK: Addresses

    func testOnlyPublicAddressesTable() {
        let cases: [([UInt8], Bool)] = [
            ([17, 253, 144, 10], true), ([8, 8, 8, 8], true), ([172, 32, 0, 1], true), ([100, 128, 0, 1], true),
            ([127, 0, 0, 1], false), ([10, 1, 2, 3], false), ([172, 16, 0, 1], false), ([172, 31, 255, 255], false), ([192, 168, 1, 1], false),
            ([169, 254, 169, 254], false), ([100, 64, 0, 1], false), ([0, 0, 0, 0], false), ([224, 0, 0, 1], false), ([255, 255, 255, 255], false),
            ([192, 0, 2, 1], false), ([198, 18, 0, 1], false),
            (Array(repeating: 0, count: 15) + [1], false), (Array(repeating: 0, count: 16), false),
            (Array(repeating: 0, count: 10) + [0xff, 0xff, 127, 0, 0, 1], false), (Array(repeating: 0, count: 10) + [0xff, 0xff, 8, 8, 8, 8], true),
            ([0xfd, 0] + Array(repeating: 0, count: 13) + [1], false), ([0xfe, 0x80] + Array(repeating: 0, count: 13) + [1], false),
            ([0xff, 0x02] + Array(repeating: 0, count: 13) + [1], false), ([0x20, 0x01, 0x0d, 0xb8] + Array(repeating: 0, count: 12), false),
            ([0x26, 0x06, 0x47, 0x00] + Array(repeating: 0, count: 11) + [1], true), ([1, 2, 3], false),
        ]
        for (address, expected) in cases {
            XCTAssertEqual(AddressPolicy.isPublic(address), expected, "\(address)")
        }
        XCTAssertNoThrow(try AddressPolicy.checkScheme(URL(string: "https://a.example/k")!, allowPrivate: false))
        XCTAssertThrowsError(try AddressPolicy.checkScheme(URL(string: "http://a.example/k")!, allowPrivate: false))
        XCTAssertNoThrow(try AddressPolicy.checkScheme(URL(string: "http://127.0.0.1/k")!, allowPrivate: true))
        XCTAssertThrowsError(try AddressPolicy.checkScheme(URL(string: "ftp://a.example/k")!, allowPrivate: true))
    }

    // MARK: Issuers, linking, sessions

    func testTrustedIssuerValidationTable() {
        let good = TrustedIssuer(issuer: " https://appleid.apple.com ", keySetURL: "https://appleid.apple.com/auth/keys", audiences: ["com.example.app"])
        XCTAssertEqual(try good.validated().issuer, "https://appleid.apple.com")
        let bad: [(String, TrustedIssuer)] = [
            ("empty issuer", TrustedIssuer(issuer: "", keySetURL: good.keySetURL, audiences: good.audiences)),
            ("relative URL", TrustedIssuer(issuer: good.issuer, keySetURL: "/keys", audiences: good.audiences)),
            ("ftp URL", TrustedIssuer(issuer: good.issuer, keySetURL: "ftp://a.example/keys", audiences: good.audiences)),
            ("credentials", TrustedIssuer(issuer: good.issuer, keySetURL: "https://u:p@a.example/keys", audiences: good.audiences)),
            ("no audience", TrustedIssuer(issuer: good.issuer, keySetURL: good.keySetURL, audiences: [])),
            ("too many audiences", TrustedIssuer(issuer: good.issuer, keySetURL: good.keySetURL, audiences: (0...16).map { "a\($0)" })),
            ("control character", TrustedIssuer(issuer: "a\u{7}b", keySetURL: good.keySetURL, audiences: good.audiences)),
        ]
        for (name, issuer) in bad {
            XCTAssertThrowsError(try issuer.validated(), name) { XCTAssertEqual(($0 as? StratusError)?.code, .badRequest, name) }
        }
    }

    func testAccountLinkingTable() {
        let cases: [(String?, String?, AccountLinking.Decision?)] = [
            (nil, nil, .createUser),
            ("_a", nil, .signIn(userRecordName: "_a")),
            (nil, "_b", .link(userRecordName: "_b")),
            ("_b", "_b", .alreadyLinked(userRecordName: "_b")),
            ("_a", "_b", nil),
        ]
        for (linked, caller, expected) in cases {
            do {
                let decision = try AccountLinking.decide(linkedUser: linked, caller: caller)
                XCTAssertEqual(decision, expected, "\(String(describing: linked)) \(String(describing: caller))")
            } catch {
                XCTAssertNil(expected)
                XCTAssertEqual(error.code, .exists)
            }
        }
        let account = try! IDTokenRules.check(Self.claims(), trusted: Self.issuer, nonce: "raw nonce", now: Self.now)
        XCTAssertEqual(AccountLinking.emailForNewUser(account, takenByAnother: false), "x7@privaterelay.appleid.com")
        XCTAssertNil(AccountLinking.emailForNewUser(account, takenByAnother: true), "an address another user has is never taken over")
    }

    func testASessionTokenIsGoodOnlyWhileItsSessionIs() throws {
        let key = SecretKey.generate()
        let sessionID = Session.generateID()
        XCTAssertEqual(try Session.validateID(sessionID), sessionID)
        for bad in ["", "ABCDEF0123456789abcdef0123456789", String(repeating: "a", count: 33), "g" + String(repeating: "a", count: 31)] {
            XCTAssertThrowsError(try Session.validateID(bad), bad)
        }
        let text = WebAuthToken(userRecordName: "_u", container: "iCloud.a", expiresAt: 2_000, credentialEpoch: 1, sessionID: sessionID).signed(with: key)
        let token = try XCTUnwrap(WebAuthToken.open(text, key: key))
        XCTAssertEqual(token.sessionID, sessionID)
        XCTAssertNoThrow(try token.check(container: "iCloud.a", now: 1_000, directoryEpoch: 1, sessionActive: true))
        for state in [false, nil] as [Bool?] {
            XCTAssertThrowsError(try token.check(container: "iCloud.a", now: 1_000, directoryEpoch: 1, sessionActive: state)) {
                XCTAssertTrue(($0 as! StratusError).reason.contains("session was signed out"))
            }
        }
        // A token without a session keeps its present checks alone.
        let plain = WebAuthToken(userRecordName: "_u", container: "iCloud.a", expiresAt: 2_000, credentialEpoch: 1)
        XCTAssertNoThrow(try plain.check(container: "iCloud.a", now: 1_000, directoryEpoch: 1, sessionActive: nil))
        XCTAssertThrowsError(try plain.check(container: "iCloud.a", now: 1_000, directoryEpoch: 2))
        let session = Session(sessionID: sessionID, container: "iCloud.a", userRecordName: "_u", method: .idToken, issuer: "i", createdAt: 0, expiresAt: 2_000)
        XCTAssertTrue(session.isActive(now: 1_000))
        XCTAssertFalse(session.isActive(now: 2_000))
        var revoked = session
        revoked.revokedAt = 500
        XCTAssertFalse(revoked.isActive(now: 1_000))
    }
}
