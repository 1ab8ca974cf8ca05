import Foundation
import StratusCore
import XCTest

/// Email sign-up's rules without a server: who may sign up in which mode, addresses, email tokens
/// (shape, single use, expiry, purpose) and their lifetimes, and the hosted sign-in page's request.
final class EmailSignUpRulesTests: XCTestCase {
    func testWhoMaySignUpInEachMode() throws {
        XCTAssertEqual(try SignUpRules.decide(mode: .open, invited: false, addressTaken: false), .send)
        XCTAssertEqual(try SignUpRules.decide(mode: .open, invited: true, addressTaken: false), .send)
        XCTAssertEqual(try SignUpRules.decide(mode: .inviteOnly, invited: true, addressTaken: false), .send)
        guard case .skip = try SignUpRules.decide(mode: .inviteOnly, invited: false, addressTaken: false) else { return XCTFail("uninvited") }
        guard case .skip = try SignUpRules.decide(mode: .open, invited: false, addressTaken: true) else { return XCTFail("taken, open") }
        guard case .skip = try SignUpRules.decide(mode: .inviteOnly, invited: true, addressTaken: true) else { return XCTFail("taken, invited") }
        for (invited, taken) in [(false, false), (true, false), (true, true)] {
            XCTAssertThrowsError(try SignUpRules.decide(mode: .off, invited: invited, addressTaken: taken)) { error in
                XCTAssertEqual((error as? StratusError)?.code, .accessDenied)
            }
        }
        XCTAssertEqual(SignUpRules.decideReset(userFound: true), .send)
        XCTAssertNotEqual(SignUpRules.decideReset(userFound: false), .send)
    }

    func testModesParse() throws {
        XCTAssertEqual(try SignUpMode.parse("invite-only"), .inviteOnly)
        XCTAssertEqual(try SignUpMode.parse("open"), .open)
        XCTAssertEqual(try SignUpMode.parse("off"), .off)
        for bad in ["", "Open", "invite_only", String(repeating: "x", count: 10_000)] {
            XCTAssertThrowsError(try SignUpMode.parse(bad)) { error in
                let error = error as? StratusError
                XCTAssertEqual(error?.code, .badRequest)
                XCTAssertLessThan(error?.reason.utf8.count ?? .max, 400)
            }
        }
    }

    func testAddresses() throws {
        XCTAssertEqual(try EmailAddress.validate("  ada@example.com\n"), "ada@example.com")
        XCTAssertEqual(try EmailAddress.validate("Ada.L+notes@Example.co.uk"), "Ada.L+notes@Example.co.uk")
        let bad = [
            "", "ada", "ada@", "@example.com", "ada@example", "ada@@example.com", "a b@example.com", "ada@exa mple.com",
            "ada@.example.com", "ada@example.com.", "ada\u{0}@example.com", "<ada@example.com>",
            String(repeating: "a", count: 65) + "@example.com", "ada@" + String(repeating: "e", count: 250) + ".com",
        ]
        for text in bad {
            XCTAssertThrowsError(try EmailAddress.validate(text), text.debugDescription) { error in
                XCTAssertEqual((error as? StratusError)?.code, .badRequest)
            }
        }
    }

    func testTokensAreRandomHexAndStoredAsDigests() throws {
        let one = EmailToken.generate(), two = EmailToken.generate()
        XCTAssertNotEqual(one, two)
        XCTAssertEqual(try EmailToken.validate(one), one)
        XCTAssertEqual(EmailToken.digest(one).count, 32)
        XCTAssertNotEqual(EmailToken.digest(one), EmailToken.digest(two))
        for bad in ["", String(one.dropLast()), one + "0", one.uppercased(), String(repeating: "g", count: 64), String(repeating: "0", count: 100_000)] {
            XCTAssertThrowsError(try EmailToken.validate(bad)) { error in XCTAssertEqual((error as? StratusError)?.code, .badRequest) }
        }
    }

    func testATokenIsRedeemedOnceBeforeItExpiresForItsPurposeOnly() throws {
        let now: Int64 = 1_800_000_000
        let good = EmailToken.Stored(purpose: .verify, expiresAt: now + 1, usedAt: nil)
        XCTAssertNoThrow(try EmailToken.redeem(good, for: .verify, now: now))
        let cases: [(String, EmailToken.Stored?, EmailTokenPurpose, String)] = [
            ("unknown", nil, .verify, "not valid"),
            ("another purpose", good, .reset, "not valid"),
            ("used", EmailToken.Stored(purpose: .verify, expiresAt: now + 100, usedAt: now - 1), .verify, "used already"),
            ("expired at the second", EmailToken.Stored(purpose: .verify, expiresAt: now, usedAt: nil), .verify, "expired"),
            ("expired", EmailToken.Stored(purpose: .reset, expiresAt: now - 10, usedAt: nil), .reset, "expired"),
        ]
        for (name, stored, purpose, reason) in cases {
            XCTAssertThrowsError(try EmailToken.redeem(stored, for: purpose, now: now), name) { error in
                let error = error as? StratusError
                XCTAssertEqual(error?.code, .authenticationFailed, name)
                XCTAssertTrue(error?.reason.contains(reason) == true, "\(name): \(error?.reason ?? "")")
            }
        }
    }

    func testLifetimes() throws {
        let defaults = EmailTokenLifetimes()
        XCTAssertEqual(defaults.seconds(.verify), 86_400)
        XCTAssertEqual(defaults.seconds(.reset), 3_600)
        let short = try EmailTokenLifetimes(verify: 2, reset: 3)
        XCTAssertEqual(short.seconds(.verify), 2)
        XCTAssertEqual(short.seconds(.reset), 3)
        for (verify, reset) in [(0, 10), (10, -1), (EmailTokenLifetimes.maximum + 1, 10)] as [(Int64, Int64)] {
            XCTAssertThrowsError(try EmailTokenLifetimes(verify: verify, reset: reset))
        }
    }

    func testSignInRequestCarriesContainerOriginAndExpiry() throws {
        let key = try SecretKey(bytes: Array(repeating: 7, count: 32))
        let now: Int64 = 1_800_000_000
        let request = SignInPageRequest(container: "iCloud.a", origin: "https://app.example:8443", expiresAt: now + 60)
        let text = request.signed(with: key)
        XCTAssertFalse(text.contains("+") || text.contains("/") || text.contains("="), "it travels in a URL")
        XCTAssertEqual(try SignInPageRequest.verify(text, key: key, container: "iCloud.a", now: now), request)
        for (name, check) in [
            ("other container", { try SignInPageRequest.verify(text, key: key, container: "iCloud.b", now: now) }),
            ("expired", { try SignInPageRequest.verify(text, key: key, container: "iCloud.a", now: now + 60) }),
            ("tampered", { try SignInPageRequest.verify(text + "x", key: key, container: "iCloud.a", now: now) }),
            ("other key", { try SignInPageRequest.verify(text, key: try SecretKey(bytes: Array(repeating: 8, count: 32)), container: "iCloud.a", now: now) }),
            ("web auth token", {
                try SignInPageRequest.verify(
                    WebAuthToken(userRecordName: "_a", container: "iCloud.a", expiresAt: now + 60).signed(with: key), key: key, container: "iCloud.a", now: now)
            }),
        ] as [(String, () throws -> SignInPageRequest)] {
            XCTAssertThrowsError(try check(), name) { error in XCTAssertEqual((error as? StratusError)?.code, .authenticationFailed, name) }
        }
        XCTAssertEqual(SignInPageRequest.origin("https://App.Example"), "https://app.example")
        XCTAssertEqual(SignInPageRequest.origin("http://127.0.0.1:8080"), "http://127.0.0.1:8080")
        for bad in [nil, "", "null", "file://x", "javascript:alert(1)", "https://a.example/path", "https://u@a.example", String(repeating: "h", count: 300)] {
            XCTAssertNil(SignInPageRequest.origin(bad), bad ?? "nil")
        }
    }
}
