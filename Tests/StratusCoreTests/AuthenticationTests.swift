import Crypto
import Foundation
import StratusCore
import XCTest

final class ServerSignatureTests: XCTestCase {
    /// A fixed vector signed once by an independent ECDSA implementation: the public key, the
    /// request, and the DER signature in base64.
    static let vectorPublicKey = """
        -----BEGIN PUBLIC KEY-----
        MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAESwBCbURW9/nburcgjEnRZE8wvtW+
        uKh0hsle9lDkduh2VjtcUE32I4GrrPMEw+GRWjoyzuX75Iq8Ws0EYsWWaw==
        -----END PUBLIC KEY-----
        """
    static let vectorDate = "2026-11-22T10:00:00Z"
    static let vectorBody = #"{"query":{"recordType":"Note"}}"#
    static let vectorSubpath = "/database/1/iCloud.com.example.notes/development/public/records/query"
    static let vectorSignature = "MEUCIEXuk0jlxG0NgID5Bu0nNC9dpvElfP8FlEzeZWlSFfSPAiEA1/PrgYU/7lgFIWtPwifiAVYTYYm3iYnkH/Nney8QSX0="
    static let vectorNow = ISO8601Time.seconds(vectorDate)!

    func testTheMessageIsDateBodyHashAndSubpath() {
        let message = ServerSignature.message(date: Self.vectorDate, body: Data(Self.vectorBody.utf8), subpath: Self.vectorSubpath)
        XCTAssertEqual(
            String(decoding: message, as: UTF8.self),
            "2026-11-22T10:00:00Z:pHA+lOPYejRxN4Iswc9kV8pFFX5glteEnI4oFVFBk9M=:/database/1/iCloud.com.example.notes/development/public/records/query")
    }

    func testFixedVectorVerifiesAndItsKeyIDIsTheDERDigest() throws {
        let key = try ServerPublicKey(text: Self.vectorPublicKey)
        XCTAssertEqual(key.keyID, "f872b4dd77b58bc59081c4480bd8be78a5f4f0eef2f492cf6ccc1c00988f22db")
        XCTAssertNoThrow(try ServerSignature.verify(
            signature: Self.vectorSignature, date: Self.vectorDate, body: Data(Self.vectorBody.utf8), subpath: Self.vectorSubpath,
            publicKey: key, now: Self.vectorNow + 30))
        // Every part of the message is covered.
        let tampered: [(String, String, String)] = [
            (Self.vectorDate.replacingOccurrences(of: ":00Z", with: ":01Z"), Self.vectorBody, Self.vectorSubpath),
            (Self.vectorDate, Self.vectorBody.replacingOccurrences(of: "Note", with: "Nott"), Self.vectorSubpath),
            (Self.vectorDate, Self.vectorBody, Self.vectorSubpath.replacingOccurrences(of: "public", with: "private")),
        ]
        for (date, body, subpath) in tampered {
            XCTAssertThrowsError(try ServerSignature.verify(
                signature: Self.vectorSignature, date: date, body: Data(body.utf8), subpath: subpath, publicKey: key, now: Self.vectorNow)) { error in
                XCTAssertEqual((error as? StratusError)?.code, .authenticationFailed)
            }
        }
    }

    func testASignatureOverThePathWithItsQueryAsSentVerifies() throws {
        let privateKey = P256.Signing.PrivateKey()
        let key = try ServerPublicKey(text: privateKey.publicKey.pemRepresentation)
        let now: Int64 = 1_800_000_000
        let date = ISO8601Time.text(now)
        let path = "/database/1/iCloud.com.example.notes/development/public/users/caller"
        let query = "ckjsBuildVersion=1&ckjsVersion=2.6.4&clientId=a%2Fb"
        let subpaths = try ServerSignature.subpaths(path: path, query: query)
        XCTAssertEqual(subpaths, [path, "\(path)?\(query)"])
        XCTAssertEqual(try ServerSignature.subpaths(path: path, query: nil), [path])
        for signed in subpaths {
            let signature = try ServerSignature.sign(date: date, body: Data(), subpath: signed, privateKey: privateKey)
            XCTAssertNoThrow(try ServerSignature.verify(signature: signature, date: date, body: Data(), subpaths: subpaths, publicKey: key, now: now), signed)
        }
        // Byte for byte: the decoded query is another message.
        let decoded = try ServerSignature.sign(date: date, body: Data(), subpath: "\(path)?ckjsBuildVersion=1&ckjsVersion=2.6.4&clientId=a/b", privateKey: privateKey)
        XCTAssertThrowsError(try ServerSignature.verify(signature: decoded, date: date, body: Data(), subpaths: subpaths, publicKey: key, now: now))
        // The query is bounded.
        XCTAssertNoThrow(try ServerSignature.subpaths(path: path, query: String(repeating: "a", count: ServerSignature.maxQueryBytes)))
        XCTAssertThrowsError(try ServerSignature.subpaths(path: path, query: String(repeating: "a", count: ServerSignature.maxQueryBytes + 1))) { error in
            XCTAssertEqual((error as? StratusError)?.code, .authenticationFailed)
        }
    }

    func testSignaturesMadeHereVerifyAndStaleOrForeignOnesDoNot() throws {
        let privateKey = P256.Signing.PrivateKey()
        let key = try ServerPublicKey(text: privateKey.publicKey.pemRepresentation)
        let now: Int64 = 1_800_000_000
        let date = ISO8601Time.text(now)
        let body = Data(#"{"operations":[]}"#.utf8)
        let signature = try ServerSignature.sign(date: date, body: body, subpath: "/p", privateKey: privateKey)
        XCTAssertNoThrow(try ServerSignature.verify(signature: signature, date: date, body: body, subpath: "/p", publicKey: key, now: now))
        // Within ten minutes either way is fresh; beyond it is stale.
        XCTAssertNoThrow(try ServerSignature.verify(signature: signature, date: date, body: body, subpath: "/p", publicKey: key, now: now + 600))
        XCTAssertNoThrow(try ServerSignature.verify(signature: signature, date: date, body: body, subpath: "/p", publicKey: key, now: now - 600))
        for skew: Int64 in [601, -601, 86_400] {
            XCTAssertThrowsError(try ServerSignature.verify(signature: signature, date: date, body: body, subpath: "/p", publicKey: key, now: now + skew)) { error in
                XCTAssertTrue((error as? StratusError)?.reason.contains("10 minutes") ?? false, "\(error)")
            }
        }
        // Another key's signature, garbage, and a malformed date all fail cleanly.
        let other = try ServerSignature.sign(date: date, body: body, subpath: "/p", privateKey: P256.Signing.PrivateKey())
        for (text, dateText) in [(other, date), ("not base64!", date), ("", date), (signature, "yesterday"), (signature, "2026-13-01T00:00:00Z")] {
            XCTAssertThrowsError(try ServerSignature.verify(signature: text, date: dateText, body: body, subpath: "/p", publicKey: key, now: now)) { error in
                XCTAssertEqual((error as? StratusError)?.code, .authenticationFailed)
            }
        }
        // The raw 64-byte signature form is accepted too.
        let raw = try privateKey.signature(for: ServerSignature.message(date: date, body: body, subpath: "/p")).rawRepresentation.base64EncodedString()
        XCTAssertNoThrow(try ServerSignature.verify(signature: raw, date: date, body: body, subpath: "/p", publicKey: key, now: now))
    }

    func testPublicKeysParseFromPEMAndDERAndRejectOtherText() throws {
        let privateKey = P256.Signing.PrivateKey()
        let fromPEM = try ServerPublicKey(text: privateKey.publicKey.pemRepresentation)
        let fromDER = try ServerPublicKey(text: privateKey.publicKey.derRepresentation.base64EncodedString())
        XCTAssertEqual(fromPEM, fromDER)
        XCTAssertEqual(fromPEM.keyID.count, 64)
        for text in ["", "hello", P384.Signing.PrivateKey().publicKey.pemRepresentation] {
            XCTAssertThrowsError(try ServerPublicKey(text: text))
        }
    }

    func testISO8601TimesParseStrictlyAndRoundTrip() {
        XCTAssertEqual(ISO8601Time.seconds("1970-01-01T00:00:00Z"), 0)
        XCTAssertEqual(ISO8601Time.seconds("2000-02-29T12:34:56Z"), 951_827_696)
        XCTAssertEqual(ISO8601Time.seconds("2026-11-22T10:00:00.123Z"), ISO8601Time.seconds("2026-11-22T10:00:00Z"))
        for bad in ["2026-11-22 10:00:00Z", "2026-11-22T10:00:00", "2026-02-30T00:00:00Z", "2026-11-22T24:00:00Z", "2026-11-22T10:00:00+01:00",
                    "2026-11-22T10:00:00.Z", "20261122T100000Z", "２026-11-22T10:00:00Z"] {
            XCTAssertNil(ISO8601Time.seconds(bad), bad)
        }
        for seconds: Int64 in [0, 951_827_696, 1_800_000_000, 4_102_444_800] {
            XCTAssertEqual(ISO8601Time.seconds(ISO8601Time.text(seconds)), seconds)
        }
        XCTAssertEqual(ISO8601Time.text(951_827_696), "2000-02-29T12:34:56Z")
    }
}

final class PasswordHashTests: XCTestCase {
    func testHashesVerifyOnlyTheirPasswordAndAreSalted() throws {
        let first = try PasswordHash.make("correct horse", rounds: 1000)
        let second = try PasswordHash.make("correct horse", rounds: 1000)
        XCTAssertNotEqual(first, second, "each hash has its own salt")
        XCTAssertTrue(first.hasPrefix("pbkdf2-sha256$1000$"))
        XCTAssertTrue(PasswordHash.verify("correct horse", against: first))
        XCTAssertTrue(PasswordHash.verify("correct horse", against: second))
        XCTAssertFalse(PasswordHash.verify("correct horsf", against: first))
        XCTAssertFalse(PasswordHash.verify("", against: first))
        for malformed in ["", "pbkdf2-sha256$x$a$b", "md5$1$a$b", "pbkdf2-sha256$0$AAAA$AAAA", PasswordHash.decoy] {
            XCTAssertFalse(PasswordHash.verify("correct horse", against: malformed), malformed)
        }
        XCTAssertThrowsError(try PasswordHash.make("short", rounds: 1000)) { error in
            XCTAssertEqual((error as? StratusError)?.code, .badRequest)
        }
    }

    func testUserRecordNamesAreOpaqueAndUnderscored() {
        let names = Set((0..<100).map { _ in UserRecordName.generate() })
        XCTAssertEqual(names.count, 100)
        XCTAssertTrue(names.allSatisfy { $0.hasPrefix("_") && $0.count == 33 })
    }
}
