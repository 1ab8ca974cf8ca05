import Foundation
import PostgresNIO
import StratusCore
@testable import StratusPostgres
import StratusTesting
import XCTest

/// The database URL (`PostgresURL`): a server over TCP, or on the same machine over its
/// Unix-domain socket; anything else is refused with a reason that holds no secret.
final class PostgresURLTests: XCTestCase {
    func testATCPServerAndASocketDirectoryAreRead() throws {
        let tcp = try PostgresURL.parse("postgres://app:s%40cret@db.example:6543/stratus?sslmode=disable")
        XCTAssertEqual(tcp.host, "db.example")
        XCTAssertEqual(tcp.port, 6543)
        XCTAssertNil(tcp.unixSocketPath)
        XCTAssertEqual(tcp.username, "app")
        XCTAssertEqual(tcp.password, "s@cret")
        XCTAssertEqual(tcp.database, "stratus")

        let socket = try PostgresURL.parse("postgres://app@/stratus?host=/run/postgresql")
        XCTAssertEqual(socket.unixSocketPath, "/run/postgresql/.s.PGSQL.5432")
        XCTAssertNil(socket.host)
        XCTAssertEqual(socket.username, "app")
        XCTAssertEqual(socket.database, "stratus")
        XCTAssertEqual(try PostgresURL.parse("postgresql:///stratus?host=/tmp/pg/&port=6001").unixSocketPath, "/tmp/pg/.s.PGSQL.6001")

        for (text, reason) in [
            ("postgres://app@/stratus?host=run/postgresql", "socket directory"),
            ("postgres://app@db.example/stratus?host=/run/postgresql", "socket directory"),
            ("postgres://app@/stratus?host=/run/postgresql&port=0", "port"),
            ("postgres://app@/stratus?host=/run/postgresql&port=x", "port"),
            ("postgres://app@/stratus?host=/run/postgresql&sslmode=require", "sslmode"),
            ("postgres://app:hunter2@/stratus", "postgres://user@host:port/database"),
            ("mysql://app@db/stratus", "postgres://user@host:port/database"),
        ] {
            XCTAssertThrowsError(try PostgresURL.parse(text), text) { error in
                let description = String(describing: error)
                XCTAssertTrue(description.contains(reason), "\(text): \(description)")
                XCTAssertFalse(description.contains("hunter2"), "\(text): \(description)")
            }
        }
    }

    /// A store over the test server's own socket answers as one over TCP.
    func testAStoreOverTheServersSocketAnswers() async throws {
        let url = try await TestSupport.createDatabase()
        let (directory, port, database) = try await TestSupport.withStore(url: url) { store in
            try await store.withConnection { connection in
                var answer: (String, String, String)?
                for try await row in try await connection.query(
                    "SELECT split_part(current_setting('unix_socket_directories'), ',', 1), current_setting('port'), current_database()",
                    logger: TestSupport.logger
                ).decode((String, String, String).self) { answer = row }
                return try XCTUnwrap(answer)
            }
        }
        // scripts/lib.sh gives the server no socket when its directory's path is too long for one.
        try XCTSkipIf(directory.isEmpty, "the test server listens on no Unix-domain socket")
        let user = try XCTUnwrap(URLComponents(string: url)?.user)
        let socketURL = "postgres://\(user)@/\(database)?host=\(directory.trimmingCharacters(in: .whitespaces))&port=\(port)"
        let (name, overSocket) = try await TestSupport.withStore(url: socketURL) { store in
            try await store.withConnection { connection in
                var answer: (String, Bool)?
                for try await row in try await connection.query(
                    "SELECT current_database(), inet_client_addr() IS NULL", logger: TestSupport.logger
                ).decode((String, Bool).self) { answer = row }
                return try XCTUnwrap(answer)
            }
        }
        XCTAssertEqual(name, database)
        XCTAssertTrue(overSocket, "no client address: the session came over the socket")
    }
}
