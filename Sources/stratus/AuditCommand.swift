import ArgumentParser
import Foundation
import StratusCore
import StratusPostgres
import StratusRuntime

/// `stratus audit`: reads and verifies the audit log of administrative actions.
struct AuditCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "audit", abstract: "Read and verify the audit log of administrative actions (the CLI's and the console's).",
        subcommands: [List.self, Verify.self])

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print audit entries, newest first, one a line: sequence, time, channel, actor, origin, request id, action, container, subject, details (tab-separated).")
        @OptionGroup var options: CommonOptions
        @Option(help: "Only entries of this container.")
        var container: String?
        @Option(name: .customLong("by"), help: "Only entries of this actor.")
        var byActor: String?
        @Option(help: "Only entries of this action (e.g. key.revoke).")
        var action: String?
        @Option(help: "Only entries before this sequence number (the next page).")
        var before: Int64?
        @Option(help: "The most entries to print (1 to \(AuditLog.maxPage)).")
        var limit: Int = 100

        func validate() throws {
            guard (1...AuditLog.maxPage).contains(limit) else { throw ValidationError("--limit is 1 to \(AuditLog.maxPage)") }
            if let action, AuditAction(rawValue: action) == nil {
                throw ValidationError("no action '\(ClientText.excerpt(action))'; the actions: \(AuditAction.allCases.map(\.rawValue).joined(separator: ", "))")
            }
        }

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-audit")
            let filter = AuditLog.Filter(container: container, actor: byActor, action: action, before: before)
            let formatter = ISO8601DateFormatter()
            formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
            for entry in try await Admin.auditEntries(filter, limit: limit, configuration, logger: logger) {
                let fields = [
                    "\(entry.sequence)", formatter.string(from: entry.recordedAt), entry.channel, entry.actor, entry.origin, entry.requestID,
                    entry.action, entry.container, entry.subject, entry.details,
                ]
                print(fields.map { $0.replacingOccurrences(of: "\t", with: " ").replacingOccurrences(of: "\n", with: " ") }.joined(separator: "\t"))
            }
        }
    }

    struct Verify: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Check every entry's hash and its link to the entry before; exits 1 naming the first entry that was changed, removed or reordered.")
        @OptionGroup var options: CommonOptions

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-audit")
            let verification = try await Admin.verifyAudit(configuration, logger: logger)
            if let problem = verification.problem {
                print("audit log broken at entry \(problem.sequence): \(problem.reason) (\(verification.verified) entries before it verified)")
                throw ExitCode(1)
            }
            print("audit log verified: \(verification.verified) entries, head \(AuditEntry.hex(verification.headHash))")
        }
    }
}
