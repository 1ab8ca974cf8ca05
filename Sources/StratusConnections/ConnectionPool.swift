import Logging
import NIOCore
import PostgresNIO
import StratusCore
import Synchronization

/// One event loop's pool of PostgreSQL connections: the rules of `PoolState` and `LeaseWaiters`,
/// carried out with connections that all live on `loop`.
///
/// Stratus runs its own pool rather than the database client's, whose state machine stops the
/// process (a failed precondition) when a lease arrives after a PostgreSQL restart while it keeps
/// connections open (docs/reliability.md, "PostgreSQL restart"). Here every event — a lease, a
/// release, a connection opened, failed or closed, a retry due — goes through the pure state machine
/// under one lock, and what it returns is carried out after the lock: waiters resumed, connections
/// opened and closed, a retry scheduled on the loop.
///
/// A lease that finds an idle connection takes it under the lock and allocates nothing else; one
/// that waits is resumed by a release or a new connection, or fails at its deadline (a timer on the
/// loop, cancelled when it is served), when its task is cancelled, or at once when the database
/// cannot be reached.
package final class ConnectionPool: Sendable {
    package let loop: any EventLoop
    private let configuration: PostgresConnection.Configuration
    private let logger: Logger
    private let retryAfterSeconds: Int
    private let state: Mutex<Driver>
    private let waiterIDs = Atomic<Int>(0)
    /// Connection ids unique in the process (they key `ConnectionWatches` and prepared statements).
    private static let connectionIDs = Atomic<Int>(0)

    /// A new connection id, unique in the process.
    package static func nextConnectionID() -> Int { connectionIDs.wrappingAdd(1, ordering: .relaxed).newValue }

    package init(settings: PoolState.Settings, configuration: PostgresConnection.Configuration, loop: any EventLoop, retryAfterSeconds: Int, logger: Logger) {
        self.loop = loop
        self.configuration = configuration
        self.logger = logger
        self.retryAfterSeconds = retryAfterSeconds
        self.state = Mutex(Driver(pool: PoolState(settings: settings)))
    }

    package var settings: PoolState.Settings { state.withLock { $0.pool.settings } }

    // MARK: Leases

    /// A connection of the pool, waiting at most `timeout` for one; then `TRY_AGAIN_LATER`. Give it
    /// back with `release(_:)`.
    package func lease(timeout: Duration) async throws -> PostgresConnection {
        // An idle connection, unless it closed a moment ago (its close not yet seen by the pool).
        while let connection = state.withLock({ driver in driver.pool.leaseIdle().flatMap { driver.open[$0] } }) {
            if !connection.isClosed { return connection }
            release(connection, reusable: false)
        }
        let waiter = waiterIDs.wrappingAdd(1, ordering: .relaxed).newValue
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<PostgresConnection, any Error>) in
                let work: Work = state.withLock { driver in
                    guard driver.waiters.begin(waiter) else {
                        return Work(resume: [(continuation, .failure(CancellationError()))])
                    }
                    switch driver.pool.lease(waiter) {
                    case .use(let id):
                        guard let connection = driver.open[id] else {
                            return Work(resume: [(continuation, .failure(PostgresErrors.unavailable(retryAfterSeconds)))])
                        }
                        return Work(resume: [(continuation, .success(connection))])
                    case .fail(let failure):
                        return Work(resume: [(continuation, .failure(error(failure)))])
                    case .wait(let actions):
                        driver.waiters.wait(waiter, continuation)
                        return driver.work(actions, pool: self)
                    }
                }
                perform(work)
                guard work.resume.isEmpty else { return }
                // Waiting: the deadline, unless it was served meanwhile.
                let deadline = LoopTimer.schedule(after: timeout, on: loop) { [self] in
                    giveUp(waiter, with: StratusError(
                        .tryAgainLater, "The server is busy: no database connection came free in time; retry the request", retryAfter: retryAfterSeconds),
                        timedOut: true)
                }
                let armed = state.withLock { $0.waiters.arm(waiter, deadline) }
                if !armed { deadline.cancel() }
            }
        } onCancel: {
            giveUp(waiter, with: CancellationError(), timedOut: false)
        }
    }

    /// Gives a leased connection back: to be used again unless it closed or `reusable` is false (it is
    /// then closed, and replaced when needed).
    package func release(_ connection: PostgresConnection, reusable: Bool = true) {
        let now = ContinuousClock.now
        let work: Work = state.withLock { driver in
            guard let id = driver.local[connection.id] else { return Work() }
            return driver.work(driver.pool.release(id, reusable: reusable && !connection.isClosed, now: now), pool: self)
        }
        if !work.isEmpty { perform(work) }
    }

    /// Runs `body` on a leased connection, given back afterwards. A connection whose work failed
    /// because the server is ending its session (a restart, `pg_terminate_backend`) is not used again:
    /// the server's message arrives before the connection closes.
    package func withConnection<T>(timeout: Duration, _ body: (PostgresConnection) async throws -> T) async throws -> T {
        let connection = try await lease(timeout: timeout)
        do {
            let value = try await body(connection)
            release(connection)
            return value
        } catch {
            release(connection, reusable: !PostgresErrors.isSessionEnding(error))
            throw error
        }
    }

    /// A waiting lease gives up: its deadline passed, or its task was cancelled.
    private func giveUp(_ waiter: Int, with failure: any Error, timedOut: Bool) {
        let continuation: CheckedContinuation<PostgresConnection, any Error>? = state.withLock { driver in
            guard driver.pool.cancel(waiter) else {
                // Not waiting (yet): a cancellation before the lease registered is remembered.
                if !timedOut { driver.waiters.cancelledEarly(waiter) }
                return nil
            }
            let removed = driver.waiters.take(waiter)
            removed?.deadline?.cancel()
            return removed?.waiter
        }
        guard let continuation else { return }
        if timedOut { ConnectionMetrics.leaseTimeouts.increment() }
        continuation.resume(throwing: failure)
    }

    // MARK: Running

    /// Opens the connections to keep, closes idle ones past their time, and on cancellation closes
    /// every connection (leased ones when they are given back), waiting a few seconds at most.
    package func run() async {
        perform(state.withLock { $0.work($0.pool.start(), pool: self) })
        let sweep: RepeatedTask? = TimerPlan.idleSweep(settings).map { plan in
            loop.scheduleRepeatedTask(
                initialDelay: LoopTimer.timeAmount(plan.initialDelay), delay: LoopTimer.timeAmount(plan.interval)
            ) { [self] _ in
                let now = ContinuousClock.now
                perform(state.withLock { $0.work($0.pool.closeIdle(now: now), pool: self) })
            }
        }
        let (stopped, stop) = AsyncStream<Void>.makeStream()
        await withTaskCancellationHandler {
            for await _ in stopped {}
        } onCancel: {
            stop.finish()
        }
        sweep?.cancel()
        let (work, open) = state.withLock { driver in
            (driver.work(driver.pool.shutdown(), pool: self), Array(driver.open.values))
        }
        perform(work)
        // Wait for the connections to close (a leased one closes when given back), a few seconds at most.
        let closed = OneShot<Void>()
        let limit = loop.scheduleTask(in: .seconds(5)) { closed.resume(with: .success(())) }
        EventLoopFuture.andAllComplete(open.map(\.closeFuture), on: loop).whenComplete { _ in closed.resume(with: .success(())) }
        try? await withCheckedThrowingContinuation { closed.start($0) }
        limit.cancel()
    }

    // MARK: Carrying out

    private func perform(_ work: Work) {
        for deadline in work.deadlines { deadline.cancel() }
        for (continuation, result) in work.resume { continuation.resume(with: result) }
        for connection in work.close {
            // Held until it has closed: a connection may not go away open.
            let closing: EventLoopFuture<Void> = connection.close()
            closing.whenComplete { _ in withExtendedLifetime(connection) {} }
        }
        for id in work.connect { connect(id) }
        if let delay = work.retryAfter {
            _ = LoopTimer.schedule(after: delay, on: loop) { [self] in
                perform(state.withLock { $0.work($0.pool.retryDue(), pool: self) })
            }
        }
    }

    private func connect(_ id: Int) {
        let connectionID = Self.nextConnectionID()
        let opening: EventLoopFuture<PostgresConnection> = PostgresConnection.connect(
            on: loop, configuration: configuration, id: connectionID, logger: logger)
        opening.whenComplete { [self] result in
            let now = ContinuousClock.now
            switch result {
            case .success(let connection):
                perform(state.withLock { driver in
                    driver.open[id] = connection
                    driver.local[connection.id] = id
                    return driver.work(driver.pool.connected(id, now: now), pool: self)
                })
                connection.closeFuture.whenComplete { [self] _ in
                    perform(state.withLock { driver in
                        let work = driver.work(driver.pool.closed(id), pool: self)
                        // Forgotten unless it is leased: its holder gives it back, closed.
                        if !driver.pool.leased.contains(id), let connection = driver.open.removeValue(forKey: id) {
                            driver.local[connection.id] = nil
                        }
                        return work
                    })
                }
            case .failure(let failure):
                let work = state.withLock { driver in driver.work(driver.pool.connectFailed(id), pool: self) }
                if let delay = work.retryAfter {
                    logger.warning("could not connect to PostgreSQL; retrying", metadata: [
                        "error": "\(PostgresErrors.describe(failure))", "retry_in": "\(delay)",
                    ])
                }
                perform(work)
            }
        }
    }

    package func error(_ failure: PoolState.Failure) -> any Error {
        switch failure {
        case .unavailable: PostgresErrors.unavailable(retryAfterSeconds)
        case .shutDown: StratusError(.tryAgainLater, "The server is shutting down; retry the request", retryAfter: retryAfterSeconds)
        }
    }

}

/// What to carry out after the lock.
private struct Work {
    var resume: [(CheckedContinuation<PostgresConnection, any Error>, Result<PostgresConnection, any Error>)] = []
    var deadlines: [LoopTimer.Handle] = []
    var close: [PostgresConnection] = []
    var connect: [Int] = []
    var retryAfter: Duration?

    var isEmpty: Bool { resume.isEmpty && deadlines.isEmpty && close.isEmpty && connect.isEmpty && retryAfter == nil }
}

/// The pool's state and what it refers to: the open connections and the waiting leases.
private struct Driver {
    var pool: PoolState
    /// Open connections by the pool's ids.
    var open: [Int: PostgresConnection] = [:]
    /// The pool's id of each open connection, by the connection's own id.
    var local: [PostgresConnection.ID: Int] = [:]
    /// The waiting leases and their deadlines.
    var waiters = LeaseWaiters<CheckedContinuation<PostgresConnection, any Error>, LoopTimer.Handle>()

    /// Turns the state machine's actions into work on connections and waiters.
    mutating func work(_ actions: PoolState.Actions, pool owner: ConnectionPool) -> Work {
        var work = Work()
        var pending = actions
        while true {
            var more = PoolState.Actions()
            for handoff in pending.handoffs {
                guard let connection = open[handoff.connection], let waiter = waiters.take(handoff.waiter) else {
                    // Never expected: both are registered under the same lock. Give the connection back.
                    let next = pool.release(handoff.connection, reusable: open[handoff.connection] != nil, now: .now)
                    more.handoffs += next.handoffs
                    more.close += next.close
                    more.connect += next.connect
                    continue
                }
                if let deadline = waiter.deadline { work.deadlines.append(deadline) }
                work.resume.append((waiter.waiter, .success(connection)))
            }
            if let failure = pending.failure {
                for id in pending.failed {
                    guard let waiter = waiters.take(id) else { continue }
                    if let deadline = waiter.deadline { work.deadlines.append(deadline) }
                    work.resume.append((waiter.waiter, .failure(owner.error(failure))))
                }
            }
            for id in pending.close {
                guard let connection = open.removeValue(forKey: id) else { continue }
                local[connection.id] = nil
                work.close.append(connection)
            }
            work.connect += pending.connect
            if let delay = pending.retryAfter { work.retryAfter = delay }
            guard !more.isEmpty else { return work }
            pending = more
        }
    }
}
