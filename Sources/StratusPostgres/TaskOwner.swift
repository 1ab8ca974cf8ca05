import Logging
import ServiceLifecycle
import Synchronization

/// A service that owns work started off a caller's own task — a sync page read ahead, a maintenance
/// run the console started — so that graceful shutdown sees it: each job submitted runs as a child
/// of the service's task group. Once graceful shutdown begins it refuses new jobs, lets those
/// running (and those already submitted) finish for at most `deadline`, then cancels what remains
/// and returns when every job has ended. Cancelling the service cancels its jobs at once.
///
/// A job submitted before the service runs waits for it; a caller that must not wait on a job that
/// may never run checks `submit`'s answer and does the work itself, or not at all, when refused.
public final class TaskOwner: Service, Sendable {
    /// Work to own: it should end soon after it is cancelled.
    public typealias Job = @Sendable () async -> Void

    private struct State {
        var pending: [Job] = []
        /// The service's loop, waiting for the next job.
        var waiter: CheckedContinuation<Job?, Never>?
        var open = true
        var running = 0
        /// The service, waiting for the running jobs to end after it stopped taking them.
        var drained: CheckedContinuation<Void, Never>?
    }

    /// What the owner's log lines name it.
    public let name: String
    /// How long graceful shutdown waits for the jobs before it cancels them.
    public let deadline: Duration
    let logger: Logger
    private let state = Mutex(State())

    /// How long graceful shutdown waits for the jobs unless told otherwise
    /// (`STRATUS_SHUTDOWN_DEADLINE_SECONDS`).
    public static let defaultDeadline: Duration = .seconds(10)

    /// Creates an owner; `deadline` bounds how long graceful shutdown waits for its jobs.
    public init(name: String, deadline: Duration = TaskOwner.defaultDeadline, logger: Logger) {
        self.name = name
        self.deadline = deadline
        self.logger = logger
    }

    /// Submits `job`; false (and `job` never runs) once graceful shutdown has begun.
    @discardableResult
    public func submit(_ job: @escaping Job) -> Bool {
        let (accepted, waiter): (Bool, CheckedContinuation<Job?, Never>?) = state.withLock { state in
            guard state.open else { return (false, nil) }
            guard let waiter = state.waiter else {
                state.pending.append(job)
                return (true, nil)
            }
            state.waiter = nil
            state.running += 1
            return (true, waiter)
        }
        waiter?.resume(returning: job)
        return accepted
    }

    /// Whether it still takes jobs (graceful shutdown has not begun).
    public var isAccepting: Bool { state.withLock { $0.open } }

    /// Jobs running now.
    public var running: Int { state.withLock { $0.running } }

    public func run() async {
        await withDiscardingTaskGroup { group in
            await withGracefulShutdownHandler {
                while let job = await next() {
                    group.addTask { [self] in
                        await job()
                        ended()
                    }
                }
            } onGracefulShutdown: { [self] in
                close()
            }
            // No job comes any more: the running ones get until the deadline.
            let inTime = await withTaskGroup(of: Bool.self) { race in
                race.addTask { [self] in
                    await drained()
                    return true
                }
                race.addTask { [deadline] in
                    try? await Task.sleep(for: deadline)
                    return false
                }
                defer { race.cancelAll() }
                return await race.next() ?? true
            }
            if !inTime {
                logger.warning("cancelling work still running at the shutdown deadline", metadata: [
                    "owner": "\(name)", "jobs": "\(running)", "deadline": "\(deadline)",
                ])
                group.cancelAll()
            }
        }
    }

    /// The next job, counted as running; nil once closed and none is left.
    private func next() async -> Job? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Job?, Never>) in
                let now: Job?? = state.withLock { state in
                    if !state.pending.isEmpty {
                        state.running += 1
                        return .some(state.pending.removeFirst())
                    }
                    if !state.open || Task.isCancelled { return .some(nil) }
                    state.waiter = continuation
                    return nil
                }
                if let now { continuation.resume(returning: now) }
            }
        } onCancel: {
            close()
        }
    }

    /// Refuses new jobs from now on; the loop takes what is pending, then ends.
    private func close() {
        let waiter: CheckedContinuation<Job?, Never>? = state.withLock { state in
            state.open = false
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: nil)
    }

    private func ended() {
        let drained: CheckedContinuation<Void, Never>? = state.withLock { state in
            state.running -= 1
            guard state.running == 0 else { return nil }
            defer { state.drained = nil }
            return state.drained
        }
        drained?.resume()
    }

    /// Returns when no job runs (or when cancelled).
    private func drained() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let done = state.withLock { state in
                    if state.running == 0 || Task.isCancelled { return true }
                    state.drained = continuation
                    return false
                }
                if done { continuation.resume() }
            }
        } onCancel: {
            let drained: CheckedContinuation<Void, Never>? = state.withLock { state in
                defer { state.drained = nil }
                return state.drained
            }
            drained?.resume()
        }
    }
}

/// Runs `body` to its end even when the calling task is cancelled, and returns its result: for
/// the few steps that must finish whatever stopped their caller (recording the end of a
/// maintenance run, dropping a half-built index generation, leaving a consumer group). The one
/// task Stratus starts outside a task group; it never outlives its caller, who awaits it at once.
public func withoutCancellation<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await Task { try await body() }.value
}

/// `withoutCancellation` for a body that cannot fail.
public func withoutCancellation<T: Sendable>(_ body: @escaping @Sendable () async -> T) async -> T {
    await Task { await body() }.value
}
