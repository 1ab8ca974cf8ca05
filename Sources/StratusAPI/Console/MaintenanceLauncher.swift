import Logging
import StratusPostgres

/// Starts a maintenance run (a reindex, or a replay of one worker) off the caller: it claims the run,
/// refused (CONFLICT) while a run of the same kind runs, and returns the run's id at once; the run
/// records its progress in `maintenance_runs` (`MaintenanceRunStore`). The runtime provides it with
/// the code `stratus reindex` and `stratus replay` run.
public struct MaintenanceLauncher: Sendable {
    /// Starts `job` for `startedBy` (e.g. `console:<login>`); returns the run's id.
    public var start: @Sendable (_ job: MaintenanceJob, _ startedBy: String, _ logger: Logger) async throws -> Int64

    /// Creates a launcher.
    public init(start: @escaping @Sendable (_ job: MaintenanceJob, _ startedBy: String, _ logger: Logger) async throws -> Int64) {
        self.start = start
    }
}
