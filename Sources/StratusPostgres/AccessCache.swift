import Foundation
import Metrics
import Synchronization

/// What API tokens give access to, remembered for a moment so that a busy API process does not
/// ask PostgreSQL the same question for every request.
///
/// An answer is served only while it is younger than `ttl`, counted from before it was read, and
/// only while `AccessChangeListener` hears the changes other processes commit: it empties the
/// cache on every change (`AccessChangeListener.channel`), and when it loses its connection the
/// cache serves nothing until it listens again. So a revoked token, a withdrawn anonymous read or
/// a password change takes effect as soon as the notification arrives, and never later than `ttl`
/// even when a notification is lost with a connection nobody has seen drop yet.
///
/// Only found tokens are remembered (random tokens cannot fill it), at most `capacity` answers:
/// when it is full, expired answers go, and if none had expired everything goes.
public final class AccessCache: Sendable {
    /// The question: an API token, by its digest (the token itself is never kept), the user
    /// whose credential epoch is asked for, and the session whose state is.
    public struct Key: Hashable, Sendable {
        /// `APIToken.digest` of the token.
        public var digest: Data
        /// The user record name of the web auth token, or nil without one.
        public var user: String?
        /// The session of the web auth token, or nil without one.
        public var session: String?

        /// Creates a key.
        public init(digest: Data, user: String?, session: String? = nil) {
            self.digest = digest
            self.user = user
            self.session = session
        }
    }

    private struct Entry {
        var access: ContainerStore.Access
        var readAt: ContinuousClock.Instant
    }

    private enum Lookup {
        case hit(ContainerStore.Access)
        /// Not served; `generation` to keep the answer under, nil: not to keep it.
        case miss(generation: UInt64?)
    }

    private struct State {
        var entries: [Key: Entry] = [:]
        /// Raised whenever everything is forgotten: an answer read across a change is not kept.
        var generation: UInt64 = 0
        /// Whether changes are heard: nothing is served or kept while they are not.
        var hearing = false
    }

    /// How long an answer is served.
    public let ttl: Duration
    /// The most answers kept.
    public let capacity: Int
    private let now: @Sendable () -> ContinuousClock.Instant
    private let state = Mutex(State())

    /// Creates an empty cache that serves nothing until `startServing`. `now` is the monotonic
    /// clock answers age by (tests move it by hand).
    public init(ttl: Duration, capacity: Int = 10_000, now: @escaping @Sendable () -> ContinuousClock.Instant = { ContinuousClock.now }) {
        self.ttl = ttl
        self.capacity = max(1, capacity)
        self.now = now
    }

    /// The answer for `key`: the remembered one while it is young enough, else what `read`
    /// answers, remembered when it is an access and nothing was forgotten while it was read.
    public func access(for key: Key, read: () async throws -> ContainerStore.Access?) async throws -> ContainerStore.Access? {
        let started = now()
        let lookup: Lookup = state.withLock { state in
            guard state.hearing else { return .miss(generation: nil) }
            if let entry = state.entries[key] {
                if started - entry.readAt < ttl { return .hit(entry.access) }
                state.entries[key] = nil
            }
            return .miss(generation: state.generation)
        }
        switch lookup {
        case .hit(let access):
            AccessCacheMetrics.hits.increment()
            return access
        case .miss(let generation):
            AccessCacheMetrics.misses.increment()
            guard let access = try await read() else { return nil }
            guard let generation else { return access }
            state.withLock { state in
                guard state.hearing, state.generation == generation else { return }
                if state.entries[key] == nil, state.entries.count >= capacity { makeRoom(&state, at: started) }
                state.entries[key] = Entry(access: access, readAt: started)
            }
            return access
        }
    }

    /// A change was heard: every answer may be stale.
    public func removeAll() {
        state.withLock { Self.forget(&$0) }
    }

    /// Changes are heard from now on: forgets everything (a change may have gone by unheard before)
    /// and serves again.
    public func startServing() {
        state.withLock { state in
            Self.forget(&state)
            state.hearing = true
        }
    }

    /// Changes are no longer heard: forgets everything and serves nothing until `startServing`.
    /// Returns whether it was serving.
    @discardableResult
    public func stopServing() -> Bool {
        state.withLock { state in
            Self.forget(&state)
            defer { state.hearing = false }
            return state.hearing
        }
    }

    /// How many answers are kept (expired ones included until they are looked up or make room).
    public var count: Int { state.withLock { $0.entries.count } }

    /// Whether answers are served: changes are heard.
    public var isServing: Bool { state.withLock { $0.hearing } }

    private static func forget(_ state: inout State) {
        state.generation &+= 1
        state.entries.removeAll(keepingCapacity: true)
    }

    private func makeRoom(_ state: inout State, at instant: ContinuousClock.Instant) {
        state.entries = state.entries.filter { instant - $0.value.readAt < ttl }
        if state.entries.count >= capacity { state.entries.removeAll(keepingCapacity: true) }
    }
}

enum AccessCacheMetrics {
    static let hits = Counter(label: "stratus_auth_cache_lookups_total", dimensions: [("outcome", "hit")])
    static let misses = Counter(label: "stratus_auth_cache_lookups_total", dimensions: [("outcome", "miss")])
}
