import Synchronization

/// In-process locks by name, for tasks that queue for the same zone (or record) without holding
/// anything while they wait: a waiter is a suspended continuation, never a pooled connection.
///
/// Waiters are served first come, first served. The advisory lock each transaction then takes in
/// PostgreSQL still orders writers across processes; this queue only keeps one process's writers of
/// one zone from each parking a connection in `pg_advisory_lock`.
final class KeyedLock: Sendable {
    private let table = Mutex<[String: [CheckedContinuation<Void, Never>]]>([:])

    /// Runs `body` holding every key, taken in sorted order so two callers never wait in a cycle.
    func withLocks<T>(_ keys: [String], _ body: () async throws -> T) async throws -> T {
        let keys = Array(Set(keys)).sorted()
        var held: [String] = []
        defer { for key in held.reversed() { release(key) } }
        for key in keys {
            await acquire(key)
            held.append(key)
        }
        return try await body()
    }

    /// The number of keys held or waited for (for tests).
    var activeKeys: Int { table.withLock { $0.count } }

    private func acquire(_ key: String) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let free = table.withLock { table -> Bool in
                if table[key] == nil {
                    table[key] = []
                    return true
                }
                table[key]!.append(continuation)
                return false
            }
            if free { continuation.resume() }
        }
    }

    private func release(_ key: String) {
        let next = table.withLock { table -> CheckedContinuation<Void, Never>? in
            guard var waiters = table[key] else { return nil }
            guard !waiters.isEmpty else {
                table[key] = nil
                return nil
            }
            let first = waiters.removeFirst()
            table[key] = waiters
            return first
        }
        next?.resume()
    }
}
