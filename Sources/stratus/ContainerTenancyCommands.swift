import ArgumentParser
import Foundation
import StratusCore
import StratusRuntime

/// Containers as tenants: what each holds, and suspending one (its requests refused, its data kept).
extension ContainerCommand {
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: """
            List containers with what each holds (container, state, users, zones, records, record bytes, assets, asset bytes, \
            subscriptions, created), by identifier.
            """)
        @OptionGroup var options: CommonOptions
        @Argument(help: "One container only.")
        var container: String?
        @Option(help: "List those after this identifier (the next page).")
        var after: String?
        @Option(help: "At most this many (1–1000).")
        var limit: Int = 100

        func validate() throws {
            guard (1...1000).contains(limit) else { throw ValidationError("--limit must be 1–1000") }
        }

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-container")
            let found = try await Admin.containerUsage(container, after: after, limit: limit, configuration, logger: logger)
            if let container, found.isEmpty { throw ValidationError("no container '\(container)'") }
            for usage in found {
                let state = usage.suspendedAt.map { "suspended since \(ISO8601Time.text(Int64($0.timeIntervalSince1970)))" } ?? "serving"
                print([usage.container, state, "\(usage.users)", "\(usage.zones)", "\(usage.records)", "\(usage.recordBytes)", "\(usage.assets)",
                       "\(usage.assetBytes)", "\(usage.subscriptions)", ISO8601Time.text(Int64(usage.createdAt.timeIntervalSince1970))]
                    .joined(separator: "\t"))
            }
        }
    }

    struct Suspend: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: """
            Suspend a container: every request for it is refused (ACCESS_DENIED) on every API process until it is resumed. \
            Its data, tokens and keys stay.
            """)
        @OptionGroup var options: CommonOptions
        @Argument(help: "The container identifier.")
        var container: String
        @Option(help: "Why (kept in the audit log).")
        var reason: String = ""

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-container")
            try await Admin.setContainerSuspended(container, true, configuration, logger: logger)
            print("\(container): suspended")
            try await options.audit(.containerSuspend, container: container, details: [("reason", reason)], configuration, logger)
        }
    }

    struct Resume: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Resume a suspended container: its requests are served again.")
        @OptionGroup var options: CommonOptions
        @Argument(help: "The container identifier.")
        var container: String

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-container")
            try await Admin.setContainerSuspended(container, false, configuration, logger: logger)
            print("\(container): serving")
            try await options.audit(.containerResume, container: container, details: [], configuration, logger)
        }
    }
}
