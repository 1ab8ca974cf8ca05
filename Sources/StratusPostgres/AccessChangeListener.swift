import Logging
import PostgresNIO
import ServiceLifecycle

/// Keeps an API process's `AccessCache` true: listens on `channel` (migration 0026 notifies it
/// when a token, a container's anonymous reads or a user's credential epoch changes) and empties
/// the cache on every notification. The cache serves only while the listening is in effect; after
/// a lost connection it listens again, backing off while the database stays away. Idle, it is one
/// connection of its own (never one of the requests' pool) waiting for a notification.
public struct AccessChangeListener: Service {
    /// The channel every change to what an API token gives access to is notified on.
    public static let channel = "stratus_access"

    let store: PostgresStore
    let cache: AccessCache
    let logger: Logger
    let backoff: ClosedRange<Duration>

    /// Creates the listener of `cache` (one listener per cache). After a failure it waits the lower
    /// bound of `backoff`, doubling up to the upper bound while failures follow each other.
    public init(store: PostgresStore, cache: AccessCache, logger: Logger, backoff: ClosedRange<Duration> = .milliseconds(100) ... .seconds(5)) {
        self.store = store
        self.cache = cache
        self.logger = logger
        self.backoff = backoff
    }

    /// Listens until graceful shutdown or cancellation.
    public func run() async throws {
        try await cancelWhenGracefulShutdown {
            var delay = backoff.lowerBound
            while !Task.isCancelled {
                do {
                    try await store.withDedicatedConnection { [cache] connection in
                        try await connection.listen(on: Self.channel) { notifications in
                            // The LISTEN is in effect: anything changed from now on is heard.
                            cache.startServing()
                            for try await _ in notifications { cache.removeAll() }
                        }
                    }
                } catch {
                    if !Task.isCancelled {
                        logger.warning("access change listener lost its connection; listening again", metadata: ["error": "\(error)"])
                    }
                }
                // A listening that took effect starts the backoff over; failures in a row double it.
                if cache.stopServing() { delay = backoff.lowerBound }
                guard !Task.isCancelled else { break }
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, backoff.upperBound)
            }
            cache.stopServing()
        }
    }
}
