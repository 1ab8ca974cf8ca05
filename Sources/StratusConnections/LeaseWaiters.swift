/// The leases of one pool that wait for a connection, with their deadlines, as pure bookkeeping
/// (`ConnectionPool` keeps it beside its `PoolState`, under the same lock). `Waiter` is what resumes
/// a lease, `Deadline` the timer that ends its wait.
///
/// A lease's life: `begin` (refused when its task was cancelled before it could wait), `wait`,
/// `arm` its deadline once the timer is scheduled (refused when it was served meanwhile: the caller
/// cancels the timer), then exactly one `take`: served, failed, timed out or cancelled. A
/// cancellation that comes before the lease waits is remembered (`cancelledEarly`) so that `begin`
/// refuses it; at most `maxRemembered` are kept (a lease served before its cancellation leaves one
/// behind, and ids are never reused).
public struct LeaseWaiters<Waiter, Deadline> {
    private var waiting: [Int: (waiter: Waiter, deadline: Deadline?)] = [:]
    private var cancelled = Set<Int>()
    /// The most early cancellations remembered; when full they are forgotten at once.
    public let maxRemembered: Int

    public init(maxRemembered: Int = 1024) {
        self.maxRemembered = max(1, maxRemembered)
    }

    /// How many leases wait.
    public var count: Int { waiting.count }
    /// How many early cancellations are remembered.
    public var remembered: Int { cancelled.count }

    /// Whether `id` waits.
    public func isWaiting(_ id: Int) -> Bool { waiting[id] != nil }

    /// The lease `id` asks for a connection: false when its task was cancelled already (it fails
    /// with a cancellation, without asking the pool).
    public mutating func begin(_ id: Int) -> Bool {
        cancelled.remove(id) == nil
    }

    /// The lease waits, resumed through `waiter`.
    public mutating func wait(_ id: Int, _ waiter: Waiter) {
        waiting[id] = (waiter, nil)
    }

    /// The lease's deadline is scheduled: kept when it still waits (true); false when it was served
    /// or failed meanwhile, and the caller cancels the deadline.
    public mutating func arm(_ id: Int, _ deadline: Deadline) -> Bool {
        guard waiting[id] != nil else { return false }
        waiting[id]?.deadline = deadline
        return true
    }

    /// The lease stops waiting (served, failed, timed out or cancelled): its waiter to resume and
    /// its deadline to cancel, or nil when it was not waiting.
    public mutating func take(_ id: Int) -> (waiter: Waiter, deadline: Deadline?)? {
        waiting.removeValue(forKey: id)
    }

    /// The lease's task was cancelled while the lease was not waiting (before it began, or after
    /// it was served): remembered, so that a `begin` still to come refuses it.
    public mutating func cancelledEarly(_ id: Int) {
        guard waiting[id] == nil else { return }
        if cancelled.count >= maxRemembered { cancelled.removeAll() }
        cancelled.insert(id)
    }
}

extension LeaseWaiters: Sendable where Waiter: Sendable, Deadline: Sendable {}
