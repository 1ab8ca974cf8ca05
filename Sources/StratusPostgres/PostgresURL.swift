import Foundation
import PostgresNIO

/// Parses `postgres://user:password@host:port/database?sslmode=disable|prefer|require` into a
/// connection's configuration; or, for a server on the same machine, its Unix-domain socket:
/// `postgres://user@/database?host=/run/postgresql[&port=5432]` (the directory of the socket
/// `.s.PGSQL.<port>`, as the server's own clients name it). Over the socket a statement's rows do
/// not pass through the loopback's TCP, which cost PostgreSQL about a tenth of a 200-record sync
/// page's CPU (docs/benchmarks.md).
enum PostgresURL {
    static func parse(_ text: String) throws -> PostgresConnection.Configuration {
        guard let components = URLComponents(string: text),
              let scheme = components.scheme, ["postgres", "postgresql"].contains(scheme)
        else {
            throw ConfigurationError("database URL must look like postgres://user@host:port/database")
        }
        let username = components.user.map { $0.removingPercentEncoding ?? $0 } ?? "postgres"
        let password = components.password.map { $0.removingPercentEncoding ?? $0 }
        let database = components.path.isEmpty ? nil : String(components.path.dropFirst())
        let item = { (name: String) in components.queryItems?.first(where: { $0.name == name })?.value }
        if let directory = item("host") {
            guard directory.hasPrefix("/"), components.host?.isEmpty ?? true else {
                throw ConfigurationError("database URL host=… must be the absolute path of the server's socket directory, with no host before the database")
            }
            let port = try item("port").map { text in
                guard let port = Int(text), (1...65535).contains(port) else { throw ConfigurationError("database URL port=… must be a port number") }
                return port
            } ?? components.port ?? 5432
            guard item("sslmode") ?? "disable" == "disable" else {
                throw ConfigurationError("database URL sslmode must be disable over a Unix-domain socket")
            }
            let path = (directory.hasSuffix("/") ? String(directory.dropLast()) : directory) + "/.s.PGSQL.\(port)"
            return PostgresConnection.Configuration(unixSocketPath: path, username: username, password: password, database: database)
        }
        guard let host = components.host, !host.isEmpty else {
            throw ConfigurationError("database URL must look like postgres://user@host:port/database")
        }
        let sslmode = item("sslmode") ?? "disable"
        let tls: PostgresConnection.Configuration.TLS
        do {
            switch sslmode {
            case "disable": tls = .disable
            case "prefer": tls = .prefer(try NIOSSLContext(configuration: .makeClientConfiguration()))
            case "require": tls = .require(try NIOSSLContext(configuration: .makeClientConfiguration()))
            default: throw ConfigurationError("database URL sslmode must be disable, prefer or require")
            }
        } catch let error as ConfigurationError {
            throw error
        } catch {
            throw ConfigurationError("database URL sslmode=\(sslmode): the TLS context could not be made")
        }
        return PostgresConnection.Configuration(
            host: host, port: components.port ?? 5432, username: username, password: password, database: database, tls: tls
        )
    }
}

/// A configuration value that cannot be used. Its text never includes secrets.
public struct ConfigurationError: Error, Sendable, CustomStringConvertible {
    /// What is wrong.
    public var description: String
    /// Creates the error.
    public init(_ description: String) { self.description = description }
}
