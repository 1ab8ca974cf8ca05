import Foundation
import StratusCore
import StratusPostgres
import StratusTesting
import XCTest

/// `stratus container auth add|list|remove` and `stratus session list|revoke|revoke-all`, run as an
/// operator runs them (the built executable, configured by environment variables).
final class IdentityCLITests: XCTestCase {
    static let container = PushAdminCLITests.container

    func testTrustedIssuersAreAddedListedAndRemoved() async throws {
        try await PushAdminCLITests.withContainerDatabase { store, settings in
            let add = ["container", "auth", "add", Self.container, "--issuer", "https://appleid.apple.com",
                       "--jwks-url", "https://appleid.apple.com/auth/keys", "--audience", "com.example.notes", "--audience", "web.example"]
            let added = try await PushAdminCLITests.cli(add, settings)
            XCTAssertEqual(added.status, 0, added.output)
            let list = try await PushAdminCLITests.cli(["container", "auth", "list", Self.container], settings)
            XCTAssertEqual(list.status, 0, list.output)
            XCTAssertEqual(list.output.split(separator: "\n").filter { $0.contains("\t") },
                           ["https://appleid.apple.com\thttps://appleid.apple.com/auth/keys\tcom.example.notes,web.example\t-\t-\t-\t-\t-"])
            // The hosted sign-in page's settings: the web client id must be one of the audiences.
            let web = add + ["--web-client-id", "web.example", "--authorization-url", "https://appleid.apple.com/auth/authorize"]
            let webAdded = try await PushAdminCLITests.cli(web, settings)
            XCTAssertEqual(webAdded.status, 0, webAdded.output)
            let webList = try await PushAdminCLITests.cli(["container", "auth", "list", Self.container], settings)
            XCTAssertEqual(webList.output.split(separator: "\n").filter { $0.contains("\t") }, [
                "https://appleid.apple.com\thttps://appleid.apple.com/auth/keys\tcom.example.notes,web.example\tweb.example\thttps://appleid.apple.com/auth/authorize\t-\t-\t-",
            ])
            // The authorization-code flow: a token URL, and the client secret from a file; the
            // secret is kept but never listed nor audited.
            let secretFile = FileManager.default.temporaryDirectory.appendingPathComponent("stratus-client-secret-\(UUID().uuidString.prefix(8))").path
            _ = FileManager.default.createFile(atPath: secretFile, contents: Data("a client secret\n".utf8))
            defer { try? FileManager.default.removeItem(atPath: secretFile) }
            let key = SecretKey.generate()
            let code = try await PushAdminCLITests.cli(
                web + ["--token-url", "https://appleid.apple.com/auth/token", "--client-secret-file", secretFile], settings.merging(["STRATUS_SECRET_KEY": key.hex]) { $1 })
            XCTAssertEqual(code.status, 0, code.output)
            XCTAssertTrue(code.output.contains("authorization-code flow with PKCE and a client secret"), code.output)
            let codeList = try await PushAdminCLITests.cli(["container", "auth", "list", Self.container], settings)
            XCTAssertEqual(codeList.output.split(separator: "\n").filter { $0.contains("\t") }, [
                "https://appleid.apple.com\thttps://appleid.apple.com/auth/keys\tcom.example.notes,web.example\tweb.example\thttps://appleid.apple.com/auth/authorize\t-"
                    + "\thttps://appleid.apple.com/auth/token\tsecret set",
            ])
            let kept = try await IdentityStore(store: store).trustedIssuer(container: Self.container, issuer: "https://appleid.apple.com", logger: TestSupport.logger)
            XCTAssertNil(kept?.clientSecret, "kept only sealed")
            XCTAssertEqual(try kept?.openClientSecret(container: Self.container, key: key), "a client secret", "the file's line end is not part of the secret")
            let plain = try await TestSupport.count(
                store, "SELECT count(*)::bigint FROM trusted_issuers WHERE client_secret IS NOT NULL OR position('a client secret'::bytea IN client_secret_sealed) > 0")
            XCTAssertEqual(plain, 0, "the row does not hold the secret")
            let audited = try await TestSupport.count(store, "SELECT count(*)::bigint FROM audit_log WHERE details::text LIKE '%a client secret%'")
            XCTAssertEqual(audited, 0, "the secret is not in the audit log")
            let secretSet = try await TestSupport.count(store, "SELECT count(*)::bigint FROM audit_log WHERE details::text LIKE '%clientSecret%'")
            XCTAssertEqual(secretSet, 1, "the audit log says a secret was set")

            // Refused: no audience, a URL that is not one, a container that does not exist.
            for (arguments, complaint) in [
                (Array(add.prefix(8)), "1 to 16 audiences"),
                (["container", "auth", "add", Self.container, "--issuer", "i", "--jwks-url", "/keys", "--audience", "a"], "absolute https URL"),
                (["container", "auth", "add", "iCloud.nowhere", "--issuer", "i", "--jwks-url", "https://a.example/k", "--audience", "a"], "no container"),
                (add + ["--web-client-id", "com.other"], "one of the issuer's audiences"),
                (add + ["--token-url", "https://appleid.apple.com/auth/token"], "needs a web client id"),
                (web + ["--client-secret-file", "/no/such/secret"], "cannot read a client secret"),
                (["container", "set", Self.container, "--allowed-origin", "https://a.example/path"], "not a web origin"),
            ] {
                let refused = try await PushAdminCLITests.cli(arguments, settings)
                XCTAssertNotEqual(refused.status, 0, refused.output)
                XCTAssertTrue(refused.output.contains(complaint), "\(arguments): \(refused.output)")
            }
            let trusted = try await IdentityStore(store: store).trustedIssuers(container: Self.container, logger: TestSupport.logger)
            XCTAssertEqual(trusted.map(\.issuer), ["https://appleid.apple.com"])

            // The origins whose pages may call the container (CORS): a list, then any again.
            let origins = try await PushAdminCLITests.cli(
                ["container", "set", Self.container, "--allowed-origin", "https://Notes.example.com", "--allowed-origin", "http://localhost:3000"], settings)
            XCTAssertEqual(origins.status, 0, origins.output)
            let listed = try await ContainerStore(store: store).allowedOrigins(container: Self.container, logger: TestSupport.logger)
            XCTAssertEqual(listed, .some(["https://notes.example.com", "http://localhost:3000"]))
            let any = try await PushAdminCLITests.cli(["container", "set", Self.container, "--allowed-origin", "*"], settings)
            XCTAssertEqual(any.status, 0, any.output)
            let anyOrigin = try await ContainerStore(store: store).allowedOrigins(container: Self.container, logger: TestSupport.logger)
            XCTAssertEqual(anyOrigin, .some(nil))

            let removed = try await PushAdminCLITests.cli(["container", "auth", "remove", Self.container, "--issuer", "https://appleid.apple.com"], settings)
            XCTAssertEqual(removed.status, 0, removed.output)
            let again = try await PushAdminCLITests.cli(["container", "auth", "remove", Self.container, "--issuer", "https://appleid.apple.com"], settings)
            XCTAssertNotEqual(again.status, 0, again.output)
            let left = try await IdentityStore(store: store).trustedIssuers(container: Self.container, logger: TestSupport.logger)
            XCTAssertEqual(left, [])
        }
    }

    func testAnOperatorListsAndRevokesAUsersSessions() async throws {
        try await PushAdminCLITests.withContainerDatabase { store, settings in
            let user = try await UserStore(store: store, rounds: 1000).create(
                container: Self.container, login: "ada", password: "ada's password", logger: TestSupport.logger)
            let sessions = SessionStore(store: store)
            let expiresAt = Int64(Date().timeIntervalSince1970) + 3600
            var ids: [String] = []
            for _ in 0..<3 {
                ids.append(try await sessions.create(container: Self.container, userRecordName: user, method: .password, expiresAt: expiresAt, logger: TestSupport.logger))
            }
            let list = try await PushAdminCLITests.cli(["session", "list", Self.container, "--user", user], settings)
            XCTAssertEqual(list.status, 0, list.output)
            let rows = list.output.split(separator: "\n").filter { $0.contains("\t") }.map { $0.split(separator: "\t").map(String.init) }
            XCTAssertEqual(Set(rows.map { $0[0] }), Set(ids))
            XCTAssertTrue(rows.allSatisfy { $0[1] == "password" && $0.last == "active" }, "\(rows)")

            let revoked = try await PushAdminCLITests.cli(["session", "revoke", Self.container, ids[0]], settings)
            XCTAssertEqual(revoked.status, 0, revoked.output)
            for (arguments, complaint) in [
                (["session", "revoke", Self.container, String(repeating: "0", count: 32)], "has no session"),
                (["session", "revoke", Self.container, "not-an-id"], "32 lowercase hex"),
                (["session", "revoke-all", Self.container, "--user", "_nobody"], "no such user"),
            ] {
                let refused = try await PushAdminCLITests.cli(arguments, settings)
                XCTAssertNotEqual(refused.status, 0, refused.output)
                XCTAssertTrue(refused.output.contains(complaint), "\(arguments): \(refused.output)")
            }
            let one = try await sessions.list(container: Self.container, userRecordName: user, logger: TestSupport.logger)
            XCTAssertEqual(one.filter { $0.revokedAt != nil }.map(\.sessionID), [ids[0]])

            let all = try await PushAdminCLITests.cli(["session", "revoke-all", Self.container, "--user", user], settings)
            XCTAssertEqual(all.status, 0, all.output)
            XCTAssertTrue(all.output.contains("revoked 2 sessions"), all.output)
            let after = try await sessions.list(container: Self.container, userRecordName: user, logger: TestSupport.logger)
            XCTAssertTrue(after.allSatisfy { $0.revokedAt != nil })
            let epoch = try await UserStore(store: store).credentialEpoch(container: Self.container, userRecordName: user, logger: TestSupport.logger)
            XCTAssertEqual(epoch, 2, "tokens without a session end too")
        }
    }
}
