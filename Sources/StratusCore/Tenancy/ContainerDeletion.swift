/// Deleting a container (`stratus container delete`, the console) as a job of steps, restartable
/// like a user's deletion (`UserDeletion`): from the moment it starts every request for the
/// container is refused; the job deletes each user of its directory through the user-deletion
/// machinery, then every row the container still has anywhere (its public database, assets, events,
/// usage, request buckets, tokens, schema), and last the container's own row, so the name may be
/// created again. Each step is idempotent: a job killed part-way is taken up where it stopped.
public enum ContainerDeletion {
    /// A step of the job, in order.
    public enum Step: String, Sendable, CaseIterable {
        /// Each user of the directory, deleted as `stratus user delete` deletes them.
        case users
        /// Every row left that names the container (or a zone of it), and the assets' bytes.
        case rest
        /// The container's row.
        case container
        /// Nothing left.
        case done

        /// The step after this one.
        public var next: Step {
            let all = Self.allCases
            return all[min(all.firstIndex(of: self)! + 1, all.count - 1)]
        }
    }

    /// How far a deletion is.
    public struct Progress: Sendable, Equatable {
        /// The step reached.
        public var step: Step
        /// Users deleted so far.
        public var usersDeleted: Int64
        /// Rows the sweep of what no user owns deleted.
        public var rowsDeleted: Int64
        /// Assets the job deleted itself (users' assets count in their own deletions).
        public var assetsDeleted: Int64

        /// Creates progress.
        public init(step: Step, usersDeleted: Int64 = 0, rowsDeleted: Int64 = 0, assetsDeleted: Int64 = 0) {
            self.step = step
            self.usersDeleted = usersDeleted
            self.rowsDeleted = rowsDeleted
            self.assetsDeleted = assetsDeleted
        }

        /// Whether the job is done.
        public var finished: Bool { step == .done }

        /// One line for the CLI.
        public var line: String { "step \(step.rawValue), users \(usersDeleted), rows \(rowsDeleted), assets \(assetsDeleted)" }
    }

    /// Tables whose rows naming the container outlive it: the audit log (its chain is never cut)
    /// and the job's own row, which says the deletion finished.
    public static let keptTables: Set<String> = ["audit_log", "audit_head", "container_deletions"]

    /// The request id the job's writes carry (its events and their deletions are found by it).
    public static func requestID(container: String) -> String { "container-deletion:\(container)" }

    /// The refusal of every request for a container being deleted.
    public static func refusal(container: String) -> StratusError {
        StratusError(.accessDenied, "Container '\(ClientText.excerpt(container))' is being deleted by its operator; its requests are refused")
    }

    /// The refusal of creating a container (or a token of it) whose deletion has not finished.
    public static func busy(container: String) -> StratusError {
        StratusError(.exists, "Container '\(ClientText.excerpt(container))' is being deleted; run `stratus container delete` again to finish, then create it")
    }

    /// Whether a job that deleted `usersDeleted` users waits there (a test setting: it is killed
    /// while it waits).
    public static func pauses(usersDeleted: Int64, pauseAfterUsers: Int?) -> Bool {
        guard let pauseAfterUsers else { return false }
        return usersDeleted >= Int64(pauseAfterUsers)
    }
}
