/// The calls running on one connection, as pure bookkeeping (`ConnectionWatch` carries it out under
/// a lock): each registers what to do when the connection closes and removes it when it ends; the
/// close calls every handler still registered, once.
///
/// open --add--> open (a key) · open --close--> closed (the handlers, once) ·
/// closed --add--> closed (no key: call the handler at once) · closed --close--> closed (nothing).
public struct WatchState<Handler> {
    /// Whether the connection has closed.
    public private(set) var isClosed = false
    private var next = 0
    private var handlers: [Int: Handler] = [:]

    public init() {}

    /// How many handlers are registered.
    public var count: Int { handlers.count }

    /// Registers `handler`: its key, or nil when the connection has closed already (then the caller
    /// calls it at once).
    public mutating func add(_ handler: Handler) -> Int? {
        guard !isClosed else { return nil }
        next += 1
        handlers[next] = handler
        return next
    }

    /// Removes the handler of `key`: true when it was registered.
    @discardableResult
    public mutating func remove(_ key: Int) -> Bool {
        handlers.removeValue(forKey: key) != nil
    }

    /// The connection closed: the handlers to call, in the order they were added; none after the
    /// first close.
    public mutating func close() -> [Handler] {
        isClosed = true
        let due = handlers.sorted { $0.key < $1.key }.map(\.value)
        handlers = [:]
        return due
    }
}

/// A result delivered at most once to a waiter that may arrive before or after it, as pure
/// bookkeeping (`OneShot` carries it out under a lock).
public struct OneShotState<Waiter, Value> {
    private var waiter: Waiter?
    private var result: Value?
    private var delivered = false

    public init() {}

    /// What to do when the waiter arrives.
    public enum Start {
        /// Keep waiting: the result has not come.
        case wait
        /// Resume the waiter with this result now.
        case deliver(Value)
    }

    /// What to do when a result comes.
    public enum Resume {
        /// A result came before: this one is dropped.
        case ignored
        /// Kept for the waiter, which has not arrived.
        case kept
        /// Resume this waiter with the result now.
        case deliver(Waiter)
    }

    /// Whether a result came (delivered or kept).
    public var hasResult: Bool { result != nil }

    /// The waiter arrives.
    public mutating func start(_ waiter: Waiter) -> Start {
        if let result, !delivered {
            delivered = true
            return .deliver(result)
        }
        self.waiter = waiter
        return .wait
    }

    /// A result comes.
    public mutating func resume(_ value: Value) -> Resume {
        guard result == nil else { return .ignored }
        result = value
        guard let waiter else { return .kept }
        delivered = true
        self.waiter = nil
        return .deliver(waiter)
    }
}

extension WatchState: Sendable where Handler: Sendable {}
extension OneShotState: Sendable where Waiter: Sendable, Value: Sendable {}
