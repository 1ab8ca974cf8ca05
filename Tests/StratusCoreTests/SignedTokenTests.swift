import Crypto
import Foundation
import StratusCore
import XCTest

/// Every token kind has its own key, tokens carry their format version, and web auth tokens carry
/// the user's credential epoch.
final class SignedTokenTests: XCTestCase {
    /// A value with the members of every kind at once: its shape decodes as any of them, so only the
    /// key decides which kind it is.
    struct Chameleon: Codable, Equatable {
        var u = "_u1", c = "iCloud.a", e: Int64 = 2_000
        var z = "iCloud.a/development/private/_u1/Notes", i = UUID(uuidString: "6F9619FF-8B86-D011-B42D-00C04FC964FF")!, v: Int64 = 7
        var d = "iCloud.a/development/private/_u1", q = "fingerprint", a: [Int] = []
    }

    struct Marker: Codable {
        var q: String
        var a: [Int]
    }

    let key = try! SecretKey(bytes: (0..<32).map { UInt8($0) })

    /// A token in the first format: `base64url(json).base64url(hmac)` with the secret key itself.
    func legacy(_ json: String) -> String {
        let body = Data(json.utf8)
        let mac = HMAC<SHA256>.authenticationCode(for: body, using: SymmetricKey(data: (0..<32).map { UInt8($0) }))
        return Base64URL.encode(body) + "." + Base64URL.encode(Data(mac))
    }

    func testATokenOfOneKindIsNeverAcceptedAsAnother() throws {
        for signedAs in TokenKind.allCases {
            let token = SignedToken.sign(Chameleon(), kind: signedAs, key: key)
            if [.webAuth, .assetUpload, .assetDownload, .signInRequest, .providerState].contains(signedAs) {
                XCTAssertTrue(token.hasPrefix("2."), "a \(signedAs) token travels in URLs: URL-safe text led by its format version: \(token)")
            } else {
                XCTAssertEqual(Data(base64Encoded: token)?.first, 3, "a body token is standard base64 of bytes led by its format version: \(token)")
            }
            for openedAs in TokenKind.allCases {
                let opened = SignedToken.open(token, as: Chameleon.self, kind: openedAs, key: key)
                if openedAs == signedAs {
                    XCTAssertEqual(opened, Chameleon(), "\(signedAs) opens as itself")
                } else {
                    XCTAssertNil(opened, "a \(signedAs) token is refused as \(openedAs)")
                }
            }
        }
        // The real types: a sync token is no web auth token, a web auth token is no sync token or marker.
        let zone = ZoneSyncToken(zoneKey: "iCloud.a/development/private/_u1/Notes", incarnation: UUID(), version: 3)
        let syncToken = SignedToken.sign(zone, kind: .zoneSync, key: key)
        XCTAssertEqual(SignedToken.open(syncToken, as: ZoneSyncToken.self, kind: .zoneSync, key: key), zone)
        XCTAssertNil(WebAuthToken.open(syncToken, key: key))
        XCTAssertThrowsError(try WebAuthToken.verify(syncToken, key: key, container: "iCloud.a", now: 1_000, directoryEpoch: nil)) { error in
            XCTAssertEqual((error as? StratusError)?.code, .authenticationFailed)
        }
        let webToken = WebAuthToken(userRecordName: "_u1", container: "iCloud.a", expiresAt: 2_000).signed(with: key)
        XCTAssertNotNil(WebAuthToken.open(webToken, key: key))
        XCTAssertNil(SignedToken.open(webToken, as: WebAuthToken.self, kind: .zoneSync, key: key))
        XCTAssertNil(SignedToken.open(webToken, as: WebAuthToken.self, kind: .databaseSync, key: key))
        XCTAssertNil(SignedToken.open(webToken, as: WebAuthToken.self, kind: .continuationMarker, key: key))
        // Another server's key, an altered MAC, another version and extra parts are refused.
        XCTAssertNil(WebAuthToken.open(webToken, key: SecretKey.generate()))
        let parts = webToken.split(separator: ".").map(String.init)
        XCTAssertNil(WebAuthToken.open(["3", parts[1], parts[2]].joined(separator: "."), key: key))
        XCTAssertNil(WebAuthToken.open(webToken + ".x", key: key))
        XCTAssertNil(WebAuthToken.open([parts[0], parts[1], String(parts[2].reversed())].joined(separator: "."), key: key))
    }

    /// The key of `kind`, derived here as the format prescribes (not by the code under test), so a
    /// changed derivation fails these tests: tokens already issued must keep verifying.
    func kindKey(_ kind: TokenKind) -> SymmetricKey {
        HKDF<SHA256>.deriveKey(
            inputKeyMaterial: SymmetricKey(data: (0..<32).map { UInt8($0) }), info: Data("stratus/v2/token/\(kind.rawValue)".utf8), outputByteCount: 32)
    }

    /// The second format, signed as this release still reads it.
    func formatTwo<T: Encodable>(_ value: T, kind: TokenKind) -> String {
        let signed = "2." + Base64URL.encode(EventCoding.encode(value))
        return signed + "." + Base64URL.encode(Data(HMAC<SHA256>.authenticationCode(for: Data(signed.utf8), using: kindKey(kind))))
    }

    func testBodyTokensAreStandardBase64OfSignedBytes() throws {
        let zone = ZoneSyncToken(zoneKey: "iCloud.a/development/private/_u1/Notes", incarnation: UUID(), version: 3)
        let token = SignedToken.sign(zone, kind: .zoneSync, key: key)
        // Apple's markers are padded standard base64 of bytes: a client may decode them to check.
        XCTAssertEqual(token.count % 4, 0, token)
        XCTAssertTrue(token.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "+/=".contains($0)) }, token)
        let bytes = try XCTUnwrap(Data(base64Encoded: token))
        XCTAssertEqual(bytes.first, 3)
        XCTAssertEqual(SignedToken.open(token, as: ZoneSyncToken.self, kind: .zoneSync, key: key), zone)
        // Every flipped byte (version, body or MAC) and every truncation is refused.
        for index in bytes.indices {
            var altered = bytes
            altered[index] ^= 0x01
            XCTAssertNil(SignedToken.open(altered.base64EncodedString(), as: ZoneSyncToken.self, kind: .zoneSync, key: key), "byte \(index)")
        }
        XCTAssertNil(SignedToken.open(bytes.dropLast().base64EncodedString(), as: ZoneSyncToken.self, kind: .zoneSync, key: key))
        XCTAssertNil(SignedToken.open(Data([3]).base64EncodedString(), as: ZoneSyncToken.self, kind: .zoneSync, key: key))
        XCTAssertNil(SignedToken.open("not base64!", as: ZoneSyncToken.self, kind: .zoneSync, key: key))
        // The second format of every body kind is still read, for this release.
        XCTAssertEqual(SignedToken.open(formatTwo(zone, kind: .zoneSync), as: ZoneSyncToken.self, kind: .zoneSync, key: key), zone)
        let database = DatabaseSyncToken(database: "iCloud.a/development/private/_u1", zones: ["Notes": "6f96:5"])
        XCTAssertEqual(SignedToken.open(formatTwo(database, kind: .databaseSync), as: DatabaseSyncToken.self, kind: .databaseSync, key: key), database)
        XCTAssertEqual(SignedToken.open(formatTwo(Marker(q: "f", a: [1]), kind: .continuationMarker), as: Marker.self, kind: .continuationMarker, key: key)?.a, [1])
        // A web auth token is never read in the body format.
        let web = WebAuthToken(userRecordName: "_u1", container: "iCloud.a", expiresAt: 2_000)
        var webBytes = Data([3])
        webBytes.append(EventCoding.encode(web))
        webBytes.append(contentsOf: HMAC<SHA256>.authenticationCode(for: webBytes, using: kindKey(.webAuth)))
        XCTAssertNil(WebAuthToken.open(webBytes.base64EncodedString(), key: key))
    }

    func testTheFirstFormatIsStillReadForSyncTokensOnly() throws {
        let incarnation = "6F9619FF-8B86-D011-B42D-00C04FC964FF"
        // A zone sync token and a database sync token of the first format keep working.
        let zone = legacy(#"{"z":"iCloud.a/development/private/_u1/Notes","i":"\#(incarnation)","v":5}"#)
        XCTAssertEqual(SignedToken.open(zone, as: ZoneSyncToken.self, kind: .zoneSync, key: key)?.version, 5)
        let reverse = legacy(#"{"z":"k","i":"\#(incarnation)","v":5,"u":9,"b":7}"#)
        XCTAssertEqual(SignedToken.open(reverse, as: ZoneSyncToken.self, kind: .zoneSync, key: key)?.reverseBelow, 7)
        let database = legacy(#"{"d":"iCloud.a/development/private/_u1","z":{"Notes":"6f96:5"}}"#)
        XCTAssertEqual(SignedToken.open(database, as: DatabaseSyncToken.self, kind: .databaseSync, key: key)?.zones, ["Notes": "6f96:5"])
        // Each only as its own kind.
        XCTAssertNil(SignedToken.open(zone, as: DatabaseSyncToken.self, kind: .databaseSync, key: key))
        XCTAssertNil(SignedToken.open(database, as: ZoneSyncToken.self, kind: .zoneSync, key: key))
        XCTAssertNil(WebAuthToken.open(zone, key: key))
        // Web auth tokens and continuation markers of the first format are refused, even with a valid MAC.
        let web = legacy(#"{"u":"_u1","c":"iCloud.a","e":2000}"#)
        XCTAssertNil(WebAuthToken.open(web, key: key))
        XCTAssertNil(SignedToken.open(legacy(#"{"q":"fingerprint","a":[]}"#), as: Marker.self, kind: .continuationMarker, key: key))
        // A first-format token with members of another kind beside a sync token's is refused.
        let mixed = legacy(#"{"z":"k","i":"\#(incarnation)","v":5,"u":"_u1","c":"iCloud.a","e":2000}"#)
        XCTAssertNil(SignedToken.open(mixed, as: ZoneSyncToken.self, kind: .zoneSync, key: key))
        XCTAssertNil(SignedToken.open(legacy(#"{"z":"k","i":"\#(incarnation)"}"#), as: ZoneSyncToken.self, kind: .zoneSync, key: key))
        // And the first format's MAC still has to be right.
        XCTAssertNil(SignedToken.open(zone.replacingOccurrences(of: ".", with: ".A"), as: ZoneSyncToken.self, kind: .zoneSync, key: key))
        XCTAssertNil(SignedToken.open(zone, as: ZoneSyncToken.self, kind: .zoneSync, key: SecretKey.generate()))
    }

    func testAWebAuthTokenHoldsOnlyWhileItsCredentialEpochIsTheUsersOwn() throws {
        let issued = WebAuthToken(userRecordName: "_u1", container: "iCloud.a", expiresAt: 2_000, credentialEpoch: 3).signed(with: key)
        XCTAssertEqual(try WebAuthToken.verify(issued, key: key, container: "iCloud.a", now: 1_000, directoryEpoch: 3).credentialEpoch, 3)
        // The password changed (epoch 4), or the user left the directory: refused.
        for current: Int64? in [4, nil] {
            XCTAssertThrowsError(try WebAuthToken.verify(issued, key: key, container: "iCloud.a", now: 1_000, directoryEpoch: current)) { error in
                XCTAssertEqual((error as? StratusError)?.code, .authenticationFailed)
                XCTAssertTrue((error as? StratusError)?.reason.contains("sign in again") == true, "\(error)")
            }
        }
        // A token without an epoch names a user outside the directory; once the directory has the user it is refused.
        let minted = WebAuthToken(userRecordName: "_u1", container: "iCloud.a", expiresAt: 2_000).signed(with: key)
        XCTAssertNoThrow(try WebAuthToken.verify(minted, key: key, container: "iCloud.a", now: 1_000, directoryEpoch: nil))
        XCTAssertThrowsError(try WebAuthToken.verify(minted, key: key, container: "iCloud.a", now: 1_000, directoryEpoch: 1))
        // The epoch is signed: changing it breaks the token.
        let parts = issued.split(separator: ".").map(String.init)
        let body = String(decoding: Base64URL.decode(parts[1])!, as: UTF8.self).replacingOccurrences(of: "\"p\":3", with: "\"p\":4")
        XCTAssertNil(WebAuthToken.open([parts[0], Base64URL.encode(Data(body.utf8)), parts[2]].joined(separator: "."), key: key))
    }

    func testOpenedWebAuthTokensKeepWhatOpenedAndNothingElse() throws {
        let tokens = OpenedWebAuthTokens(key: key, capacity: 2)
        let first = WebAuthToken(userRecordName: "_u1", container: "iCloud.a", expiresAt: 2_000, credentialEpoch: 3)
        for _ in 0..<3 { XCTAssertEqual(tokens.open(first.signed(with: key)), first) }
        XCTAssertEqual(tokens.count, 1, "one token, kept once")
        // Not kept: a token of another key, another kind, a changed one, and no token at all.
        let other = try SecretKey(bytes: (0..<32).map { UInt8(31 - $0) })
        let issued = first.signed(with: key)
        let parts = issued.split(separator: ".").map(String.init)
        let changed = String(decoding: Base64URL.decode(parts[1])!, as: UTF8.self).replacingOccurrences(of: "\"p\":3", with: "\"p\":4")
        for refused in [
            first.signed(with: other), SignedToken.sign(first, kind: .assetDownload, key: key),
            [parts[0], Base64URL.encode(Data(changed.utf8)), parts[2]].joined(separator: "."), "", "2.e30.AAAA",
        ] {
            XCTAssertNil(tokens.open(refused), refused)
        }
        XCTAssertEqual(tokens.count, 1, "refused tokens are not kept")
        // Bounded: a third token empties the cache first; every token still opens to its value.
        let second = WebAuthToken(userRecordName: "_u2", container: "iCloud.a", expiresAt: 2_000)
        let third = WebAuthToken(userRecordName: "_u3", container: "iCloud.a", expiresAt: 2_000)
        XCTAssertEqual(tokens.open(second.signed(with: key)), second)
        XCTAssertEqual(tokens.count, 2)
        XCTAssertEqual(tokens.open(third.signed(with: key)), third)
        XCTAssertEqual(tokens.count, 1, "full: emptied, then the new token kept")
        XCTAssertEqual(tokens.open(issued), first)
        XCTAssertEqual(tokens.count, 2)
    }

    func testKindKeysAreDerivedFromTheSecretKey() throws {
        // The same secret key (e.g. on every replica) makes the same tokens verify; another does not.
        let copy = try SecretKey(text: key.hex)
        for kind in TokenKind.allCases {
            let token = SignedToken.sign(Chameleon(), kind: kind, key: key)
            XCTAssertEqual(SignedToken.open(token, as: Chameleon.self, kind: kind, key: copy), Chameleon())
        }
    }
}
