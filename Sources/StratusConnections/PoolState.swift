/// The bookkeeping of one pool of database connections, as a pure state machine: it performs no I/O
/// and reads no clock. Its driver (`ConnectionPool`) tells it what happened — a
/// lease asked for, a connection opened, failed to open, given back or closed, a retry's time come,
/// the pool shutting down — and carries out the `Actions` each event returns: hand a connection to
/// a waiter, fail waiters, open or close connections, schedule a retry.
///
/// What it keeps true, whatever the order of events (`PoolStateTests` drives it with random
/// sequences and checks each after every event):
/// - no more than `maxConnections` connections are open or opening;
/// - a connection is idle, leased or opening, never two of these;
/// - nobody waits while a connection is idle;
/// - it never stops itself: an event it does not expect (a connection it does not know, given back
///   twice, closed after it was given back) is ignored, not trapped on.
///
/// Connections are opened when a lease finds none idle, and up to `minConnections` are kept open:
/// opened at the start and again whenever one closes. When an attempt to open one fails the pool
/// backs off: it opens nothing until `retryDue()` (the driver's timer, `Actions.retryAfter`), and
/// then one connection at a time until one opens. While it backs off with no connection open, a
/// lease fails at once (`Failure.unavailable`) instead of waiting for a database that is not there,
/// and so do the leases that were waiting.
public struct PoolState: Sendable {
    /// How large the pool may grow and how it backs off.
    public struct Settings: Sendable, Equatable {
        /// The most connections open or opening at once (at least one).
        public var maxConnections: Int
        /// The connections kept open (0 up to `maxConnections`).
        public var minConnections: Int
        /// The wait before the first retry after a failed attempt; it doubles with every failure in a
        /// row up to `maxBackoff`.
        public var backoff: Duration
        /// The longest wait between two attempts.
        public var maxBackoff: Duration
        /// How long a connection beyond the kept ones may stay idle before `closeIdle(now:)` closes it.
        public var idleTimeout: Duration

        /// Settings clamped to what can serve: at least one connection, at most `maxConnections` kept.
        public init(
            maxConnections: Int, minConnections: Int = 0, backoff: Duration = .milliseconds(50), maxBackoff: Duration = .seconds(1),
            idleTimeout: Duration = .seconds(60)
        ) {
            self.maxConnections = max(1, maxConnections)
            self.minConnections = min(max(0, minConnections), self.maxConnections)
            self.backoff = max(.zero, backoff)
            self.maxBackoff = max(self.backoff, maxBackoff)
            self.idleTimeout = max(.zero, idleTimeout)
        }
    }

    /// Why a lease was refused.
    public enum Failure: Sendable, Equatable {
        /// No connection could be opened and none is open: the database cannot be reached for now.
        case unavailable
        /// The pool is shutting down.
        case shutDown
    }

    /// A connection handed to a waiting lease.
    public struct Handoff: Sendable, Equatable {
        public var waiter: Int
        public var connection: Int

        public init(waiter: Int, connection: Int) {
            self.waiter = waiter
            self.connection = connection
        }
    }

    /// What the driver must do after an event, in this order: hand over, fail, close, open, schedule.
    public struct Actions: Sendable, Equatable {
        /// Connections to hand to waiting leases.
        public var handoffs: [Handoff] = []
        /// Waiting leases to fail, and why.
        public var failed: [Int] = []
        public var failure: Failure?
        /// Connections to close (their `closed` or `released` event may follow; both are fine).
        public var close: [Int] = []
        /// Connections to open, by the ids the pool gave them.
        public var connect: [Int] = []
        /// When set, call `retryDue()` after this long.
        public var retryAfter: Duration?

        public init() {}

        /// Whether there is nothing to do.
        public var isEmpty: Bool { self == Actions() }
    }

    /// What a lease gets at once.
    public enum Lease: Sendable, Equatable {
        /// An idle connection, leased now.
        case use(Int)
        /// Nothing idle: the lease waits; carry out the actions (which may open a connection for it).
        case wait(Actions)
        /// Refused at once.
        case fail(Failure)
    }

    public let settings: Settings
    /// Idle connections, the most recently given back last, with when it was given back.
    public private(set) var idle: [(connection: Int, since: ContinuousClock.Instant)] = []
    /// Leased connections.
    public private(set) var leased: Set<Int> = []
    /// Connections being opened.
    public private(set) var connecting: Set<Int> = []
    /// Waiting leases, the oldest first (from `waitersHead` on).
    private var waiterQueue: [Int] = []
    private var waitersHead = 0
    /// Failed attempts to open a connection since one last opened.
    public private(set) var failures = 0
    /// Whether the pool backs off: no connection is opened until the scheduled retry is due.
    public private(set) var backingOff = false
    /// Whether a retry is scheduled (its `retryDue()` is still to come); it may outlive the backing
    /// off that scheduled it, when a connection opened meanwhile.
    public private(set) var retryScheduled = false
    /// Whether `shutdown()` was called.
    public private(set) var shuttingDown = false
    private var nextConnection = 0

    public init(settings: Settings) {
        self.settings = settings
    }

    /// The waiting leases, the oldest first.
    public var waiters: ArraySlice<Int> { waiterQueue[waitersHead...] }
    /// Connections open or opening.
    public var count: Int { idle.count + leased.count + connecting.count }
    /// Whether every connection is closed after `shutdown()`.
    public var isDrained: Bool { shuttingDown && count == 0 }

    // MARK: Events

    /// The pool starts: open the connections to keep.
    public mutating func start() -> Actions {
        var actions = Actions()
        fill(&actions)
        return actions
    }

    /// A lease asks for an idle connection and does not wait: the connection, or nil when none is idle
    /// (then `lease(_:)`, which waits).
    public mutating func leaseIdle() -> Int? {
        guard !shuttingDown, let last = idle.popLast() else { return nil }
        leased.insert(last.connection)
        return last.connection
    }

    /// A lease asks for a connection, `waiter` naming it should it have to wait.
    public mutating func lease(_ waiter: Int) -> Lease {
        if shuttingDown { return .fail(.shutDown) }
        if let last = idle.popLast() {
            leased.insert(last.connection)
            return .use(last.connection)
        }
        if backingOff && leased.isEmpty && connecting.isEmpty { return .fail(.unavailable) }
        waiterQueue.append(waiter)
        var actions = Actions()
        fill(&actions)
        return .wait(actions)
    }

    /// A waiting lease gave up (its deadline, or its task was cancelled). True when it was still
    /// waiting; false when it was handed a connection or failed already.
    public mutating func cancel(_ waiter: Int) -> Bool {
        guard let index = waiterQueue[waitersHead...].firstIndex(of: waiter) else { return false }
        waiterQueue.remove(at: index)
        compactWaiters()
        return true
    }

    /// A leased connection is given back at `now`; `reusable` is false when it closed or its state is
    /// unknown (a statement abandoned on it), and then it is closed.
    public mutating func release(_ connection: Int, reusable: Bool, now: ContinuousClock.Instant) -> Actions {
        var actions = Actions()
        guard leased.remove(connection) != nil else {
            // Not leased: given back twice, or unknown. Close it when it claims to be usable, since
            // the pool does not count it.
            if reusable && !isIdle(connection) { actions.close.append(connection) }
            return actions
        }
        if !reusable || shuttingDown {
            actions.close.append(connection)
        } else {
            use(connection, now: now, &actions)
        }
        fill(&actions)
        failIfUnreachable(&actions)
        return actions
    }

    /// A connection the pool asked for opened at `now`.
    public mutating func connected(_ connection: Int, now: ContinuousClock.Instant) -> Actions {
        var actions = Actions()
        guard connecting.remove(connection) != nil else {
            actions.close.append(connection)
            return actions
        }
        // The database answers again: no more waiting for the scheduled retry.
        failures = 0
        backingOff = false
        if shuttingDown {
            actions.close.append(connection)
            return actions
        }
        use(connection, now: now, &actions)
        fill(&actions)
        return actions
    }

    /// A connection the pool asked for could not be opened.
    public mutating func connectFailed(_ connection: Int) -> Actions {
        var actions = Actions()
        guard connecting.remove(connection) != nil else { return actions }
        if shuttingDown { return actions }
        failures += 1
        backingOff = true
        if !retryScheduled {
            retryScheduled = true
            actions.retryAfter = delay(afterFailures: failures)
        }
        failIfUnreachable(&actions)
        return actions
    }

    /// A connection closed by itself (the server went away, the network dropped it). A leased one
    /// stays leased until it is given back; an idle one is forgotten and, when needed, replaced.
    public mutating func closed(_ connection: Int) -> Actions {
        var actions = Actions()
        guard let index = idle.firstIndex(where: { $0.connection == connection }) else { return actions }
        idle.remove(at: index)
        fill(&actions)
        return actions
    }

    /// The retry scheduled by an earlier `Actions.retryAfter` is due.
    public mutating func retryDue() -> Actions {
        var actions = Actions()
        retryScheduled = false
        guard backingOff else { return actions }
        backingOff = false
        fill(&actions)
        return actions
    }

    /// Connections beyond the kept ones idle since before `now - idleTimeout`: closed now.
    public mutating func closeIdle(now: ContinuousClock.Instant) -> Actions {
        var actions = Actions()
        // The oldest are first; the most recently used stay.
        while count > settings.minConnections, let oldest = idle.first, now - oldest.since >= settings.idleTimeout {
            idle.removeFirst()
            actions.close.append(oldest.connection)
        }
        return actions
    }

    /// The pool shuts down: waiting leases fail, idle connections close, leased ones close when given
    /// back and opening ones when they open.
    public mutating func shutdown() -> Actions {
        var actions = Actions()
        guard !shuttingDown else { return actions }
        shuttingDown = true
        backingOff = false
        actions.failed = Array(waiters)
        actions.failure = actions.failed.isEmpty ? nil : .shutDown
        waiterQueue = []
        waitersHead = 0
        actions.close = idle.map(\.connection)
        idle = []
        return actions
    }

    // MARK: Rules

    /// The wait before the retry after `failures` failed attempts in a row.
    public func delay(afterFailures failures: Int) -> Duration {
        var delay = settings.backoff
        for _ in 1..<max(1, min(failures, 32)) where delay < settings.maxBackoff {
            delay = delay * 2
        }
        return min(delay, settings.maxBackoff)
    }

    /// Hands `connection` to the oldest waiter, or keeps it idle.
    private mutating func use(_ connection: Int, now: ContinuousClock.Instant, _ actions: inout Actions) {
        if waitersHead < waiterQueue.count {
            let waiter = waiterQueue[waitersHead]
            waitersHead += 1
            compactWaiters()
            leased.insert(connection)
            actions.handoffs.append(Handoff(waiter: waiter, connection: connection))
        } else {
            idle.append((connection, now))
        }
    }

    /// Opens what the waiters and the kept connections need, within the limit; while attempts fail,
    /// one at a time, and none while a retry is scheduled.
    private mutating func fill(_ actions: inout Actions) {
        guard !shuttingDown, !backingOff else { return }
        let wanted = max(settings.minConnections - count, waiters.count - connecting.count, 0)
        var room = min(wanted, settings.maxConnections - count)
        if failures > 0 { room = min(room, 1 - connecting.count) }
        guard room > 0 else { return }
        for _ in 0..<room {
            nextConnection += 1
            connecting.insert(nextConnection)
            actions.connect.append(nextConnection)
        }
    }

    /// While the pool backs off with no connection open or opening, nothing will serve the waiters:
    /// they fail now rather than at their deadlines.
    private mutating func failIfUnreachable(_ actions: inout Actions) {
        guard backingOff, leased.isEmpty, connecting.isEmpty, idle.isEmpty, !waiters.isEmpty else { return }
        actions.failed += waiters
        actions.failure = .unavailable
        waiterQueue = []
        waitersHead = 0
    }

    private func isIdle(_ connection: Int) -> Bool { idle.contains { $0.connection == connection } }

    private mutating func compactWaiters() {
        if waitersHead == waiterQueue.count {
            waiterQueue.removeAll(keepingCapacity: true)
            waitersHead = 0
        } else if waitersHead > 64 && waitersHead * 2 > waiterQueue.count {
            waiterQueue.removeFirst(waitersHead)
            waitersHead = 0
        }
    }
}
