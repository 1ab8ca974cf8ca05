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

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: """
            Show one container: its state, what it holds (its usage), its own limits and the heir of its public records, one `name: value` a line. \
            A limit of `default` is the process's setting (STRATUS_RATE_*, STRATUS_USER_QUOTA_BYTES); 0 is none.
            """)
        @OptionGroup var options: CommonOptions
        @Argument(help: "The container identifier.")
        var container: String

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-container")
            guard let details = try await Admin.containerDetails(container, configuration, logger: logger) else {
                throw ValidationError("no container '\(container)'")
            }
            let (usage, limits) = details
            let state = usage.suspendedAt.map { "suspended since \(ISO8601Time.text(Int64($0.timeIntervalSince1970)))" } ?? "serving"
            let lines: [(String, String)] = [
                ("container", usage.container), ("state", state), ("created", ISO8601Time.text(Int64(usage.createdAt.timeIntervalSince1970))),
                ("users", "\(usage.users)"), ("zones", "\(usage.zones)"), ("records", "\(usage.records)"), ("record-bytes", "\(usage.recordBytes)"),
                ("assets", "\(usage.assets)"), ("asset-bytes", "\(usage.assetBytes)"), ("subscriptions", "\(usage.subscriptions)"),
            ] + ContainerLimits.Setting.allCases.map { ($0.rawValue, limits.text(of: $0)) }
            let heir = try await Admin.publicRecordsHeir(container, configuration, logger: logger)
            for (name, value) in lines + [("public-records-heir", heir ?? "none")] { print("\(name): \(value)") }
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

/// The options of `stratus container set` that change a container's own limits.
struct ContainerLimitOptions: ParsableArguments {
    @Option(help: "Requests per second to the container from all its callers, shared by every API process (0: none; default: STRATUS_RATE_CONTAINER_*).")
    var requestRate: String?
    @Option(help: "The most requests the container may receive at once after a quiet spell (default: one second's worth).")
    var requestBurst: String?
    @Option(help: "Requests per second from each user of the container, shared by every API process (0: none; default: STRATUS_RATE_USER_*).")
    var userRequestRate: String?
    @Option(help: "The most requests a user may send at once after a quiet spell (default: one second's worth).")
    var userRequestBurst: String?
    @Option(help: "Bytes of records and assets each user may keep per environment (0: none; default: STRATUS_USER_QUOTA_BYTES).")
    var userQuotaBytes: String?
    @Option(help: "Subscriptions each user may keep per database (0: none; default: 1000).")
    var maxSubscriptionsPerUser: String?
    @Option(help: "Records the whole container may hold, every user, database and environment (0 or default: no container-wide limit).")
    var maxRecords: String?
    @Option(help: "Custom zones the whole container may hold (0 or default: no container-wide limit).")
    var maxZones: String?
    @Option(help: "Bytes of records and assets the whole container may hold (0 or default: no container-wide limit).")
    var quotaBytes: String?
    @Option(help: "Bytes of assets the whole container may hold (0 or default: no container-wide limit).")
    var assetQuotaBytes: String?

    /// The limits given, by name, with their text.
    var changes: [(ContainerLimits.Setting, String)] {
        [(.requestRate, requestRate), (.requestBurst, requestBurst), (.userRequestRate, userRequestRate), (.userRequestBurst, userRequestBurst),
         (.userQuotaBytes, userQuotaBytes), (.maxSubscriptionsPerUser, maxSubscriptionsPerUser), (.maxRecords, maxRecords), (.maxZones, maxZones),
         (.quotaBytes, quotaBytes), (.assetQuotaBytes, assetQuotaBytes)]
            .compactMap { setting, text in text.map { (setting, $0) } }
    }

    func validate() throws {
        var limits = ContainerLimits()
        for (setting, text) in changes {
            do throws(StratusError) {
                try limits.set(setting, text)
            } catch {
                throw ValidationError(error.reason)
            }
        }
    }
}

/// Deleting a container: every request refused from the start, then all its data, and last the
/// container itself (docs/operations.md, "Deleting a container").
extension ContainerCommand {
    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: """
            Delete a container and everything of it (docs/operations.md, "Deleting a container"): its requests are refused on every API \
            process from the start; run it again to finish a deletion that stopped. Asks to type the identifier unless --yes is given.
            """)
        @OptionGroup var options: CommonOptions
        @Argument(help: "The container identifier.")
        var container: String
        @Flag(help: "Do not ask for confirmation (scripts; without a terminal the command refuses to run unless it is given).")
        var yes = false

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-container")
            if !yes {
                guard isatty(STDIN_FILENO) == 1 else { throw ValidationError("not confirmed: no terminal to ask on; pass --yes to delete '\(container)'") }
                FileHandle.standardOutput.write(Data("This deletes container '\(container)' and all its data for good. Type its identifier to confirm: ".utf8))
                guard await Self.line()?.trimmingCharacters(in: .whitespacesAndNewlines) == container else {
                    throw ValidationError("not confirmed: nothing was deleted")
                }
            }
            let actor = Admin.cliActor(explicit: options.actor)
            let result = try await Admin.deleteContainer(
                container, requestedBy: actor.name, pauseAfterUsers: try Admin.containerDeletionPause(), configuration, logger: logger
            ) { progress in
                print("container deletion \(progress.line)")
            }
            print("deleted \(container)")
            try await options.audit(
                .containerDelete, container: container,
                details: [("users", "\(result.usersDeleted)"), ("rows", "\(result.rowsDeleted)"), ("assets", "\(result.assetsDeleted)")],
                configuration, logger)
        }

        /// A line typed on the terminal, read as it becomes readable (no thread waits on it).
        static func line() async -> String? {
            let stream = AsyncStream<Data> { continuation in
                FileHandle.standardInput.readabilityHandler = { handle in
                    let data = handle.availableData
                    continuation.yield(data)
                    if data.isEmpty || data.contains(UInt8(ascii: "\n")) { continuation.finish() }
                }
            }
            var typed = Data()
            for await data in stream {
                typed.append(data)
                if typed.count > 1024 { break }
            }
            FileHandle.standardInput.readabilityHandler = nil
            return typed.isEmpty ? nil : String(decoding: typed, as: UTF8.self)
        }
    }

    struct Deletion: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show how far a container's deletion is.")
        @OptionGroup var options: CommonOptions
        @Argument(help: "The container identifier.")
        var container: String

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-container")
            guard let progress = try await Admin.containerDeletion(container, configuration, logger: logger) else {
                throw ValidationError("no deletion of '\(container)' was started")
            }
            print(progress.line)
        }
    }
}
