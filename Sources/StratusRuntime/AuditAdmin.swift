import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Logging
import StratusCore
import StratusPostgres

/// The admin CLI's side of the audit log: who runs a command, appending its entry, and reading and
/// verifying the log (`stratus audit`).
extension Admin {
    /// The operator running the CLI: `explicit` (`--actor`) when given, else the OS user; from
    /// this host; with a new request id per invocation.
    public static func cliActor(explicit: String?, requestID: String = "cli-" + UUID().uuidString.lowercased()) -> AuditActor {
        let name = explicit.flatMap { $0.isEmpty ? nil : $0 } ?? osUser()
        return AuditActor(channel: .cli, name: name, origin: ProcessInfo.processInfo.hostName, requestID: requestID)
    }

    /// The name of the process's OS user (its passwd entry), or `uid N` without one.
    static func osUser() -> String {
        let uid = getuid()
        if let entry = getpwuid(uid), let name = entry.pointee.pw_name { return String(cString: name) }
        return "uid \(uid)"
    }

    /// Appends an action's entry to the audit log.
    @discardableResult
    public static func audit(_ draft: AuditDraft, _ configuration: StratusConfiguration, logger: Logger) async throws -> AuditEntry {
        try await withMigratedStore(configuration, logger: logger) { store in
            try await AuditLog(store: store).append(draft, logger: logger)
        }
    }

    /// The audit log's entries that match `filter`, newest first.
    public static func auditEntries(
        _ filter: AuditLog.Filter, limit: Int, _ configuration: StratusConfiguration, logger: Logger
    ) async throws -> [AuditEntry] {
        try await withMigratedStore(configuration, logger: logger) { store in
            try await AuditLog(store: store).entries(filter, limit: limit, logger: logger)
        }
    }

    /// Verifies the audit log's whole hash chain.
    public static func verifyAudit(_ configuration: StratusConfiguration, logger: Logger) async throws -> AuditLog.Verification {
        try await withMigratedStore(configuration, logger: logger) { store in
            try await AuditLog(store: store).verify(logger: logger)
        }
    }
}
