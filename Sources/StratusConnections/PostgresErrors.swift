import Metrics
import PostgresNIO
import StratusCore

/// Recognises PostgreSQL errors by SQLSTATE without leaking their text upwards.
package enum PostgresErrors {
    package static func sqlState(_ error: any Error) -> String? {
        if let error = error as? PSQLError { return error.serverInfo?[.sqlState] }
        // COMMIT goes through the API that reports the command tag, which wraps errors the older way.
        if case .server(let message)? = error as? PostgresError { return message.fields[.sqlState] }
        return nil
    }

    package static func isSerializationFailure(_ error: any Error) -> Bool {
        switch sqlState(error) {
        case "40001", "40P01": true
        default: false
        }
    }

    /// Whether an error says the connection's session is over or in doubt: the server ends it
    /// (shutdown, `pg_terminate_backend`, SQLSTATE 57P01–57P03), the connection failed (class 08), or
    /// it closed. Such a connection is not used again, even before its close is seen.
    package static func isSessionEnding(_ error: any Error) -> Bool {
        if isConnectionLost(error) { return true }
        if let error = error as? StratusError, error.code == .tryAgainLater, error.reason == unavailableReason { return true }
        guard let state = sqlState(error) else { return false }
        return ["57P01", "57P02", "57P03"].contains(state) || state.hasPrefix("08")
    }

    /// A connection that went away, whoever noticed first (the server's FATAL may arrive as the
    /// reason the client closed it).
    private static func isConnectionLost(_ error: any Error) -> Bool {
        guard let error = error as? PSQLError else { return false }
        return [.connectionError, .serverClosedConnection, .clientClosedConnection, .uncleanShutdown].contains(error.code)
    }

    /// The client's view of a server-side limit that stopped a statement: a statement that ran past
    /// `statement_timeout`, or a lock (a zone's, held by another process) not granted within
    /// `lock_timeout`. Both are passing conditions: the client may try again.
    ///
    /// A database that cannot be reached or is going away (no connection, a connection lost, the
    /// server shutting down or refusing more connections) is one too: the request did not complete
    /// and may be sent again.
    package static func limit(_ error: any Error, retryAfter: Int) -> StratusError? {
        if isConnectionLost(error) { return unavailable(retryAfter) }
        guard let state = sqlState(error) else { return nil }
        switch state {
        case "57014": return StratusError(.tryAgainLater, "The request ran past the server's time limit; retry it later or ask for less", retryAfter: retryAfter)
        case "55P03": return StratusError(.tryAgainLater, "The zone is busy; retry the request", retryAfter: retryAfter)
        case "57P01", "57P02", "57P03", "53300": return unavailable(retryAfter)
        default: return state.hasPrefix("08") ? unavailable(retryAfter) : nil
        }
    }

    /// What a request is told when the database cannot be reached or its connection went away.
    package static let unavailableReason = "The database is unavailable for the moment; retry the request"

    package static func unavailable(_ retryAfter: Int) -> StratusError {
        StratusError(.tryAgainLater, unavailableReason, retryAfter: retryAfter)
    }

    /// A short description of an error for logs and dead letters: its SQLSTATE and message for a
    /// database error (never the statement or its values).
    package static func describe(_ error: any Error) -> String {
        if let error = error as? PSQLError, let state = error.serverInfo?[.sqlState] {
            return "SQLSTATE \(state): \(error.serverInfo?[.message] ?? "")"
        }
        if let error = error as? PSQLError {
            // No statement is involved (a connection that failed or closed): the code and its cause.
            return "\(error.code)" + (error.underlying.map { ": \($0)" } ?? "")
        }
        return "\(error)"
    }
}

/// The connection runtime's counters.
package enum ConnectionMetrics {
    package static let leaseTimeouts = Counter(label: "stratus_database_lease_timeouts_total")
    package static let abandonedStatements = Counter(label: "stratus_database_abandoned_statements_total")
}
