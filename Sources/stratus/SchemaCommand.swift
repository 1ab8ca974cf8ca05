import ArgumentParser
import Foundation
import StratusCore
import Logging
import StratusPostgres
import StratusRuntime

/// `stratus schema`: a container's schemas in CloudKit's schema language, and their promotion.
struct SchemaCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "schema", abstract: "Manage a container's schemas (CloudKit's schema language, .ckdb).",
        subcommands: [Export.self, Import.self, Deploy.self, Reset.self, BuildIndexes.self, AssignRole.self])

    struct Export: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print an environment's schema in CloudKit's schema language.")
        @OptionGroup var options: CommonOptions
        @Argument(help: "The container identifier.")
        var container: String
        @Option(help: "development or production.")
        var environment: String = "development"
        @Option(help: "Write the schema to this file instead of standard output.")
        var output: String?

        func run() async throws {
            guard let environment = Environment(rawValue: environment) else { throw ValidationError("the environment is development or production") }
            let (configuration, logger) = try options.resolve(label: "stratus-schema")
            let text = try await Admin.exportSchema(container: container, environment: environment, configuration, logger: logger)
            if let output {
                guard FileManager.default.createFile(atPath: output, contents: Data(text.utf8)) else { throw ValidationError("cannot write \(output)") }
            } else {
                print(text, terminator: "")
            }
        }
    }

    struct Import: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make a schema file development's schema; refused if it would delete or retype what production has.")
        @OptionGroup var options: CommonOptions
        @Argument(help: "The container identifier.")
        var container: String
        @Argument(help: "The schema file (.ckdb), or '-' for standard input.")
        var file: String

        func run() async throws {
            let data = file == "-" ? FileHandle.standardInput.readDataToEndOfFile() : FileManager.default.contents(atPath: file)
            guard let data else { throw ValidationError("cannot read \(file)") }
            let (configuration, logger) = try options.resolve(label: "stratus-schema")
            let schema = try await Admin.importSchema(
                container: container, text: String(decoding: data, as: UTF8.self), source: file, configuration, logger: logger)
            print("imported \(schema.recordTypes.count) record types into development")
            try await options.audit(.schemaImport, container: container, details: [("recordTypes", "\(schema.recordTypes.count)")], configuration, logger)
            try await reportFieldIndexes(container: container, environment: .development, configuration, logger: logger)
        }
    }

    struct Deploy: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Copy development's schema to production (additive only); production is enforced from then on.")
        @OptionGroup var options: CommonOptions
        @Argument(help: "The container identifier.")
        var container: String

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-schema")
            let schema = try await Admin.deploySchema(container: container, configuration, logger: logger)
            print("deployed \(schema.recordTypes.count) record types to production")
            try await options.audit(.schemaDeploy, container: container, details: [("recordTypes", "\(schema.recordTypes.count)")], configuration, logger)
            try await reportFieldIndexes(container: container, environment: .production, configuration, logger: logger)
        }
    }

    struct Reset: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Make development's schema production's again and delete all of development's data (its zones and records, in every database); production is not touched.")
        @OptionGroup var options: CommonOptions
        @Argument(help: "The container identifier.")
        var container: String

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-schema")
            let report = try await Admin.resetDevelopment(container: container, configuration, logger: logger)
            var recordTypes = 0
            if case .applied(let schema) = report.schema {
                print("development reset to production's \(schema.recordTypes.count) record types")
                recordTypes = schema.recordTypes.count
            }
            for line in report.summary { print(line) }
            try await options.audit(
                .schemaReset, container: container, details: [("recordTypes", "\(recordTypes)"), ("deleted", report.summary.joined(separator: " / "))],
                configuration, logger)
            try await reportFieldIndexes(container: container, environment: .development, configuration, logger: logger)
        }
    }

    struct BuildIndexes: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "build-indexes",
            abstract: "Build the query index's field indexes an environment's schema asks for (QUERYABLE or SORTABLE fields), and drop the ones it no longer does.",
            discussion: "import, deploy and reset run this themselves; run it again after one was interrupted, or for the fields development's saves added.")
        @OptionGroup var options: CommonOptions
        @Argument(help: "The container identifier.")
        var container: String
        @Option(help: "development or production.")
        var environment: String = "production"

        func run() async throws {
            guard let environment = Environment(rawValue: environment) else { throw ValidationError("the environment is development or production") }
            let (configuration, logger) = try options.resolve(label: "stratus-schema")
            let changes = try await reportFieldIndexes(container: container, environment: environment, configuration, logger: logger)
            try await options.audit(
                .schemaBuildIndexes, container: container,
                details: [("environment", environment.rawValue), ("built", "\(changes.built.count)"), ("dropped", "\(changes.dropped.count)")],
                configuration, logger)
        }
    }

    struct AssignRole: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "assign-role",
            abstract: "Give a user (a user record name; a server key acts as its own) a custom security role of the public database, or take it away.")
        @OptionGroup var options: CommonOptions
        @Argument(help: "The container identifier.")
        var container: String
        @Argument(help: "The role, as the schema creates it (CREATE ROLE).")
        var role: String
        @Argument(help: "The user record name.")
        var user: String
        @Option(help: "development or production.")
        var environment: String = "production"
        @Flag(help: "Take the role away instead.")
        var remove = false

        func run() async throws {
            guard let environment = Environment(rawValue: environment) else { throw ValidationError("the environment is development or production") }
            let (configuration, logger) = try options.resolve(label: "stratus-schema")
            try await Admin.assignRole(role, to: user, remove: remove, container: container, environment: environment, configuration, logger: logger)
            print("\(user) \(remove ? "no longer holds" : "holds") \(role) in \(environment.rawValue)")
            try await options.audit(
                remove ? .roleRemove : .roleAssign, container: container, subject: user,
                details: [("role", role), ("environment", environment.rawValue)], configuration, logger)
        }
    }
}

/// Builds an environment's field indexes and says what changed, one line per index.
@discardableResult
func reportFieldIndexes(
    container: String, environment: Environment, _ configuration: StratusConfiguration, logger: Logger
) async throws -> QueryFieldIndexes.Changes {
    let changes = try await Admin.buildFieldIndexes(container: container, environment: environment, configuration, logger: logger)
    for index in changes.built { print("built the field index of \(index) in \(environment.rawValue)") }
    for index in changes.dropped { print("dropped the field index of \(index) in \(environment.rawValue)") }
    print("\(environment.rawValue) has \(changes.built.count + changes.kept.count) field indexes")
    return changes
}
