import Foundation
import Logging
import Synchronization
import StratusAPI
import StratusCore
import StratusKafka
import StratusPostgres
import StratusWorkers

/// `stratus reindex` and `stratus replay` as recorded runs (`MaintenanceRunStore`): the CLI runs one
/// in place; the console starts one off its request, in the API process, with the same code.
public enum Maintenance {
    /// Where a replay finds the broker: without Kafka configuration a replay leaves the worker's
    /// consumer group alone.
    public struct Broker: Sendable {
        public var kafka: KafkaClientConfiguration?
        public var topic: String
        public var consumerGroupSuffix: String?

        public init(kafka: KafkaClientConfiguration?, topic: String, consumerGroupSuffix: String? = nil) {
            self.kafka = kafka
            self.topic = topic
            self.consumerGroupSuffix = consumerGroupSuffix
        }
    }

    /// How often a run says it is alive between pages (a page of a large zone may take a while).
    static let heartbeat: Duration = .seconds(15)

    /// The replay of `worker`: what `stratus replay <worker>` runs. Returns the events read.
    static func replay(
        worker: String, store: PostgresStore, broker: Broker, logger: Logger, progress: @escaping @Sendable (Rebuild.Progress) -> Void
    ) async throws -> Int {
        let definition = try definition(worker)
        if broker.kafka != nil { try StratusProcess.verifyKafkaLibrary() }
        let source = ReplaySource(store: store, kafka: broker.kafka, topic: broker.topic, consumerGroupSuffix: broker.consumerGroupSuffix)
        return try await definition.replay(from: source, logger: logger, progress: progress)
    }

    /// The definition of the worker `stratus replay` names, or an operator-readable refusal.
    static func definition(_ worker: String) throws -> WorkerDefinition {
        guard let definition = WorkerDefinition.named(worker) else {
            throw ConfigurationProblem("unknown worker '\(worker)'; one of \(StratusProcess.workerNames.joined(separator: ", "))")
        }
        return definition
    }

    /// The work of a job (a reindex keeps the live generation's language). Returns the events read.
    static func work(
        _ job: MaintenanceJob, store: PostgresStore, broker: Broker, logger: Logger, progress: @escaping @Sendable (Rebuild.Progress) -> Void
    ) async throws -> Int {
        switch job {
        case .reindex: try await Reindex(store: store).run(logger: logger, progress: progress).events
        case .replay(let worker): try await replay(worker: worker, store: store, broker: broker, logger: logger, progress: progress)
        }
    }

    /// Runs `work` as the claimed run `id`, recording its progress, a heartbeat, and how it ended.
    /// The progress callback only hands the latest value to one writer (a child task, which keeps
    /// only the newest while it writes), so the work never waits for the record and the records
    /// arrive in order.
    static func perform<T: Sendable>(
        _ id: Int64, store: PostgresStore, logger: Logger, progress: @escaping @Sendable (Rebuild.Progress) -> Void,
        _ work: (@escaping @Sendable (Rebuild.Progress) -> Void) async throws -> T
    ) async throws -> T {
        let runs = MaintenanceRunStore(store: store)
        let (updates, continuation) = AsyncStream.makeStream(of: Rebuild.Progress.self, bufferingPolicy: .bufferingNewest(1))
        // The newest progress: what a writer cancelled with the run may have left unrecorded.
        let latest = Mutex<Rebuild.Progress?>(nil)
        let result = await withTaskGroup(of: Void.self, returning: Result<T, any Error>.self) { writing in
            writing.addTask {
                for await update in updates { await report(update, id, runs, logger) }
            }
            defer { continuation.finish() }
            return await withTaskGroup(of: Void.self, returning: Result<T, any Error>.self) { beating in
                beating.addTask {
                    while (try? await Task.sleep(for: heartbeat)) != nil { try? await runs.heartbeat(id, logger: logger) }
                }
                defer { beating.cancelAll() }
                do {
                    return .success(try await work { update in
                        latest.withLock { $0 = update }
                        continuation.yield(update)
                        progress(update)
                    })
                } catch {
                    return .failure(error)
                }
            }
        }
        let failure: String? = if case .failure(let error) = result { describe(error) } else { nil }
        if case .failure(let error) = result {
            logger.error("maintenance run failed", metadata: ["run": "\(id)", "error": "\(String(reflecting: error))"])
        }
        // The writer drained every progress before it ended, unless the run was cancelled. The last
        // progress and the end are recorded even then: the record is not this task's to cancel.
        let unrecorded = Task.isCancelled ? latest.withLock { $0 } : nil
        await withoutCancellation {
            if let unrecorded { await report(unrecorded, id, runs, logger) }
            do { try await runs.finish(id, error: failure, logger: logger) } catch {
                logger.error("could not record the end of a maintenance run", metadata: ["run": "\(id)", "error": "\(error)"])
            }
        }
        return try result.get()
    }

    static func report(_ update: Rebuild.Progress, _ id: Int64, _ runs: MaintenanceRunStore, _ logger: Logger) async {
        do {
            try await runs.report(id, events: Int64(update.events), position: update.position, target: update.target, logger: logger)
        } catch {
            logger.warning("could not record a maintenance run's progress", metadata: ["run": "\(id)", "error": "\(error)"])
        }
    }

    /// What a failed run's record says: the reason of an error meant for people; for anything else
    /// only its kind (the process's log has the rest), so no SQL or secret reaches the page.
    static func describe(_ error: any Error) -> String {
        switch error {
        case let error as StratusError: error.reason
        case let error as ConfigurationProblem: error.description
        case is CancellationError: "it was cancelled (its process stopped)"
        default: "it failed (\(type(of: error))); the log of the process that ran it has the details"
        }
    }

    /// Claims a run of `job` and runs it to its end here (the CLI); `progress` hears every page.
    static func run<T: Sendable>(
        _ job: MaintenanceJob, startedBy: String, store: PostgresStore, logger: Logger, progress: @escaping @Sendable (Rebuild.Progress) -> Void,
        _ work: (@escaping @Sendable (Rebuild.Progress) -> Void) async throws -> T
    ) async throws -> T {
        let id = try await MaintenanceRunStore(store: store).claim(job, startedBy: startedBy, logger: logger)
        return try await perform(id, store: store, logger: logger, progress: progress, work)
    }

    /// What the console starts runs with: claims the run (refused while one of the same kind runs)
    /// and returns its id at once; the work goes on as a job of `owner`, a service of the process,
    /// so it outlives the request and graceful shutdown waits for it (until the owner's deadline,
    /// when it is cancelled and recorded as such). Once shutdown has begun a run is refused.
    public static func launcher(store: PostgresStore, broker: Broker, owner: TaskOwner) -> MaintenanceLauncher {
        MaintenanceLauncher { job, startedBy, logger in
            guard owner.isAccepting else { throw shuttingDown }
            let id = try await MaintenanceRunStore(store: store).claim(job, startedBy: startedBy, logger: logger)
            var logger = logger
            logger[metadataKey: "run"] = "\(id)"
            let accepted = owner.submit { [logger] in
                logger.notice("maintenance run started", metadata: ["job": "\(job.label)", "by": "\(startedBy)"])
                _ = try? await perform(id, store: store, logger: logger, progress: { _ in }) { progress in
                    try await work(job, store: store, broker: broker, logger: logger, progress: progress)
                }
                logger.notice("maintenance run ended", metadata: ["job": "\(job.label)"])
            }
            guard accepted else {
                // Shutdown began between the check and the claim: the claimed run ends at once.
                try? await MaintenanceRunStore(store: store).finish(id, error: describe(shuttingDown), logger: logger)
                throw shuttingDown
            }
            return id
        }
    }

    /// Why a run is refused while its process shuts down.
    static let shuttingDown = StratusError(.tryAgainLater, "The server is shutting down; start the run again once it is back")
}
