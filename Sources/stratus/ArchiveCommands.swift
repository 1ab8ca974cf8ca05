import ArgumentParser
import Foundation
import StratusCore
import StratusRuntime

/// `stratus export` and `stratus import` (docs/operations.md, "Exporting and importing").
struct ExportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Export a container, or one user's data in it, into a tar archive with a manifest of checksums.",
        discussion: "The file appears only once complete; an export that stops leaves none, and run again it starts over.")
    @OptionGroup var options: CommonOptions
    @Argument(help: "The container identifier.")
    var container: String
    @Option(help: "Only this user's data: their private database, the public records they created, their subscriptions.")
    var user: String?
    @Option(name: .shortAndLong, help: "The archive file to write.")
    var output: String

    func run() async throws {
        let (configuration, logger) = try options.resolve(label: "stratus-export")
        let summary = try await Admin.exportArchive(container: container, user: user, file: output, configuration, logger: logger)
        print("exported \(summary.line) to \(output)")
        try await options.audit(
            .archiveExport, container: container, subject: user ?? "",
            details: [("zones", "\(summary.zones)"), ("records", "\(summary.records)"), ("assets", "\(summary.assets)")], configuration, logger)
    }
}

struct ImportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Check an export archive whole, then load it into a container through the write path.",
        discussion: "A damaged archive is refused and nothing is loaded. A load that stops is run again: each step is idempotent.")
    @OptionGroup var options: CommonOptions
    @Argument(help: "The archive file.")
    var file: String
    @Option(help: "The container to load into (it must exist); default: the one the archive was exported from.")
    var container: String?
    @Option(name: .customLong("map-user"), help: "old=new: load the archived user 'old' as the user record name 'new' (repeatable).")
    var mapUser: [String] = []

    func run() async throws {
        let (configuration, logger) = try options.resolve(label: "stratus-import")
        let summary = try await Admin.importArchive(file: file, container: container, mappings: mapUser, configuration, logger: logger) { line in
            print("import \(line)")
        }
        print("imported \(summary.line)")
        try await options.audit(
            .archiveImport, container: summary.container, subject: file,
            details: [("zones", "\(summary.zones)"), ("records", "\(summary.records)"), ("assets", "\(summary.assets)")], configuration, logger)
    }
}
