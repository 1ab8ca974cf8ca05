import Foundation
import StratusPush
import XCTest

/// The SMTP sender's TLS settings: which hosts are sent as the TLS server name, and the CA file.
final class SMTPSettingsTests: XCTestCase {
    func testOnlyADNSNameIsSentAsTheServerName() {
        XCTAssertEqual(SMTPSettings.serverName(of: "smtp.example.com"), "smtp.example.com")
        XCTAssertEqual(SMTPSettings.serverName(of: "localhost"), "localhost")
        for address in ["127.0.0.1", "10.1.2.3", "::1", "[::1]", "fe80::1", "2001:db8::5"] {
            XCTAssertNil(SMTPSettings.serverName(of: address), "\(address) is an IP address: SNI carries none")
        }
    }

    func testACAFileMustHoldAPEMCertificateAndIsBounded() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("stratus-ca-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        func refusal(_ contents: Data?, _ says: String) {
            let path = folder.appendingPathComponent(UUID().uuidString).path
            if let contents { _ = FileManager.default.createFile(atPath: path, contents: contents) }
            XCTAssertThrowsError(try SMTPSettings.authorities(fromPEMFile: path)) { error in
                XCTAssertTrue("\(error)".contains(says), "\(error)")
            }
        }
        refusal(nil, "cannot read the CA file")
        refusal(Data("not a certificate".utf8), "holds no PEM certificate")
        refusal(Data(count: SMTPSettings.maxAuthorityFileBytes + 1), "larger than")
    }

    func testTheDescriptionNamesNoPassword() {
        var settings = SMTPSettings(host: "smtp.example.com", from: "a@example.com")
        settings.username = "relay-user"
        settings.password = "relay password"
        XCTAssertFalse(settings.description.contains("relay password"), settings.description)
        XCTAssertTrue(settings.description.contains("the system's"), settings.description)
    }
}
