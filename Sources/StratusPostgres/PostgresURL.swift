import Foundation
import PostgresNIO

/// Parses `postgres://user:password@host:port/database?sslmode=disable|prefer|require` into a connection's configuration.
enum PostgresURL {
    static func parse(_ text: String) throws -> PostgresConnection.Configuration {
        guard let components = URLComponents(string: text),
              let scheme = components.scheme, ["postgres", "postgresql"].contains(scheme),
              let host = components.host, !host.isEmpty
        else {
            throw ConfigurationError("database URL must look like postgres://user@host:port/database")
        }
        let username = components.user.map { $0.removingPercentEncoding ?? $0 } ?? "postgres"
        let password = components.password.map { $0.removingPercentEncoding ?? $0 }
        let database = components.path.isEmpty ? nil : String(components.path.dropFirst())
        let sslmode = components.queryItems?.first(where: { $0.name == "sslmode" })?.value ?? "disable"
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
