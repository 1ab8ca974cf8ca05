import Foundation
import StratusCore
import XCTest

/// A database sync token as a position in the database's change history: its size, the window a
/// call answers from it, and the token after a page.
final class DatabasePositionTokenTests: XCTestCase {
    let key = try! SecretKey(bytes: (0..<32).map { UInt8($0) })
    let database = "iCloud.a/development/private/_u1"

    func testTheSizeDoesNotDependOnThePosition() throws {
        let sizes = Set([0, 1, 9_999, 1 << 40, Int64.max].map { position in
            SignedToken.sign(DatabasePositionToken(database: database, position: position), kind: .databaseSync, key: key).count
        })
        XCTAssertEqual(sizes.count, 1, "\(sizes)")
        let paging = Set([1, 1 << 40].map { position in
            SignedToken.sign(DatabasePositionToken(database: database, position: position, upTo: position + 7, first: true), kind: .databaseSync, key: key).count
        })
        XCTAssertEqual(paging.count, 1, "\(paging)")
        for token in [
            DatabasePositionToken(database: database, position: 42),
            DatabasePositionToken(database: database, position: 0, upTo: Int64.max, first: true),
        ] {
            let text = SignedToken.sign(token, kind: .databaseSync, key: key)
            XCTAssertEqual(SignedToken.open(text, as: DatabasePositionToken.self, kind: .databaseSync, key: key), token)
            XCTAssertNil(SignedToken.open(text, as: DatabaseSyncToken.self, kind: .databaseSync, key: key), "a position is no token of the earlier form")
        }
        let earlier = SignedToken.sign(DatabaseSyncToken(database: database, zones: ["Notes": "6f96:5"]), kind: .databaseSync, key: key)
        XCTAssertNil(SignedToken.open(earlier, as: DatabasePositionToken.self, kind: .databaseSync, key: key), "a token of the earlier form is no position")
    }

    /// A position that is not 16 hexadecimal digits does not decode.
    func testAMalformedPositionIsRefused() throws {
        struct Raw: Encodable { var d: String, p: String }
        for position in ["", "2a", "000000000000002g", "8000000000000000", "00000000000000002a"] {
            let text = SignedToken.sign(Raw(d: database, p: position), kind: .databaseSync, key: key)
            XCTAssertNil(SignedToken.open(text, as: DatabasePositionToken.self, kind: .databaseSync, key: key), position)
        }
    }

    /// A window as (after, upTo, leavesOutDeleted).
    func window(_ token: DatabasePositionToken?, reached: Int64) throws -> [String] {
        let window = try DatabasePositionToken.window(from: token, reached: reached)
        return ["\(window.after)", "\(window.upTo)", "\(window.leavesOutDeleted)"]
    }

    func testTheWindowOfACall() throws {
        // A first sync: every live zone up to the position reached.
        XCTAssertEqual(try window(nil, reached: 50), ["0", "50", "true"])
        // A token: what lies past it, deleted zones too.
        XCTAssertEqual(try window(DatabasePositionToken(database: database, position: 20), reached: 50), ["20", "50", "false"])
        // A page with more to come: the rest of its window, whatever has happened since.
        XCTAssertEqual(try window(DatabasePositionToken(database: database, position: 20, upTo: 30, first: true), reached: 50), ["20", "30", "true"])
        // Ahead of the history, or a window upside down: expired.
        for token in [
            DatabasePositionToken(database: database, position: 51),
            DatabasePositionToken(database: database, position: 20, upTo: 51),
            DatabasePositionToken(database: database, position: 30, upTo: 20),
            DatabasePositionToken(database: database, position: -1),
        ] {
            XCTAssertThrowsError(try DatabasePositionToken.window(from: token, reached: 50)) { error in
                XCTAssertEqual((error as? StratusError)?.code, .changeTokenExpired)
            }
        }
    }

    func testTheTokenAfterAPage() throws {
        // A first sync's window (20, 50], paging.
        let first = try DatabasePositionToken.window(from: DatabasePositionToken(database: database, position: 20, upTo: 50, first: true), reached: 60)
        XCTAssertEqual(
            DatabasePositionToken.after(first, database: database, last: 27, moreComing: true),
            DatabasePositionToken(database: database, position: 27, upTo: 50, first: true))
        XCTAssertEqual(DatabasePositionToken.after(first, database: database, last: 27, moreComing: false), DatabasePositionToken(database: database, position: 50))
        XCTAssertEqual(DatabasePositionToken.after(first, database: database, last: nil, moreComing: false), DatabasePositionToken(database: database, position: 50))
        // A later sync's window: its pages carry no first-sync mark.
        let later = try DatabasePositionToken.window(from: DatabasePositionToken(database: database, position: 20), reached: 50)
        XCTAssertEqual(DatabasePositionToken.after(later, database: database, last: 27, moreComing: true), DatabasePositionToken(database: database, position: 27, upTo: 50))
    }
}
