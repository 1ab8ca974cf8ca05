import ArgumentParser
import Foundation
import StratusCore
import StratusRuntime

extension UserCommand {
    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete a user and everything of theirs (docs/operations.md, \"Deleting a user\"); run it again to finish a deletion that stopped.")
        @OptionGroup var options: CommonOptions
        @OptionGroup var named: SessionCommand.ContainerUser

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-user")
            let actor = Admin.cliActor(explicit: options.actor)
            let result = try await Admin.deleteUser(
                container: named.container, user: named.user, requestedBy: actor.name, pauseAfterZones: try Admin.deletionPause(), configuration,
                logger: logger
            ) { progress in
                print("user deletion \(progress.line)")
            }
            print("deleted \(named.user)")
            try await options.audit(
                .userDelete, container: named.container, subject: named.user,
                details: [("zones", "\(result.zonesDeleted)"), ("records", "\(result.recordsDeleted)"), ("sharesLeft", "\(result.sharesLeft)"),
                          ("assets", "\(result.assetsDeleted)"), ("eventsRedacted", "\(result.eventsRedacted)"),
                          ("publicRecordsHandedOver", "\(result.recordsHandedOver)")],
                configuration, logger)
        }
    }

    struct Deletion: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show how far a user's deletion is.")
        @OptionGroup var options: CommonOptions
        @OptionGroup var named: SessionCommand.ContainerUser

        func run() async throws {
            let (configuration, logger) = try options.resolve(label: "stratus-user")
            guard let progress = try await Admin.userDeletion(container: named.container, user: named.user, configuration, logger: logger) else {
                throw ValidationError("no deletion of '\(named.user)' was started in \(named.container)")
            }
            print(progress.line)
        }
    }
}
