import Foundation
import Logging
import StratusCore
import StratusPostgres
import Synchronization

/// The request buckets shared by every API process (`RequestBuckets`, in PostgreSQL), for the
/// containers that set a rate of their own (`ContainerLimits`).
///
/// A process does not ask PostgreSQL for every request: it leases a slice of tokens (a tenth of a
/// second's worth) and spends them on its requests (`RequestLease`, Core). While a lease is on its
/// way, the process's other requests for the same bucket wait for it rather than lease too; once it
/// is back they try again. After a lease that got nothing, requests are refused here until a slice
/// will have flowed in. So a busy process costs a bucket about ten statements a second, whatever
/// its rate, and a refused flood costs none (docs/decisions.md, 12).
///
/// Memory is bounded: at most `capacity` shares; when full, those holding nothing go first, then any
/// that no request waits on (their tokens go unused: the processes admit less, never more).
final class SharedRequestLimiter: Sendable {
    /// A bucket: a container's (`user` nil) or one of its users'.
    struct Key: Hashable, Sendable {
        var container: String
        var user: String?
    }

    private struct Share {
        var lease = RequestLease()
        /// Requests waiting for the lease on its way; nil: none is.
        var waiting: [CheckedContinuation<Step, Never>]?
    }

    private enum Step: Sendable {
        case decided(RateDecision)
        /// Lease: this request asks the bucket.
        case lease
        /// Try again: a lease came back.
        case again
    }

    let buckets: RequestBuckets
    let capacity: Int
    private let shares = Mutex<[Key: Share]>([:])

    init(buckets: RequestBuckets, capacity: Int) {
        self.buckets = buckets
        self.capacity = max(1, capacity)
    }

    /// Takes a token from `key`'s bucket of `perSecond` tokens a second, holding at most `burst`.
    /// A bucket PostgreSQL cannot be asked about admits (as a process's own buckets err toward
    /// admitting): the request then meets the same database and fails or succeeds on its own.
    func take(_ key: Key, perSecond: Double, burst: Double, logger: Logger) async -> RateDecision {
        while true {
            let step = await withCheckedContinuation { (continuation: CheckedContinuation<Step, Never>) in
                shares.withLock { shares in
                    var share = shares[key] ?? Share()
                    if share.waiting != nil {
                        share.waiting?.append(continuation)
                        shares[key] = share
                        return
                    }
                    let now = ContinuousClock.now
                    let step: Step
                    switch share.lease.take(now: now) {
                    case .admit: step = .decided(.allowed)
                    case .refuse(let retryAfter): step = .decided(.limited(retryAfter: retryAfter))
                    case .lease:
                        share.waiting = []
                        step = .lease
                    }
                    if shares[key] == nil, shares.count >= capacity { Self.makeRoom(&shares, capacity: capacity, now: now) }
                    shares[key] = share
                    continuation.resume(returning: step)
                }
            }
            switch step {
            case .decided(let decision):
                return decision
            case .again:
                continue
            case .lease:
                let wanted = RequestLease.slice(perSecond: perSecond)
                var granted = wanted
                var wait = 0.0
                do {
                    (granted, wait) = try await buckets.lease(
                        container: key.container, user: key.user, perSecond: perSecond, burst: burst, wanted: wanted, logger: logger)
                } catch {
                    logger.warning("A shared request bucket could not be leased from; the request is admitted", metadata: ["error": "\(error)"])
                }
                let waiting = shares.withLock { shares -> [CheckedContinuation<Step, Never>] in
                    var share = shares[key] ?? Share()
                    share.lease.leased(granted, wait: wait, now: .now)
                    let waiting = share.waiting ?? []
                    share.waiting = nil
                    shares[key] = share
                    return waiting
                }
                for waiter in waiting { waiter.resume(returning: .again) }
            }
        }
    }

    /// Gives back a token a request took from `key`'s bucket and did not use.
    func giveBack(_ key: Key) {
        shares.withLock { shares in _ = shares[key]?.lease.giveBack(now: .now) }
    }

    /// The number of shares held.
    var count: Int { shares.withLock { $0.count } }

    private static func makeRoom(_ shares: inout [Key: Share], capacity: Int, now: ContinuousClock.Instant) {
        shares = shares.filter { $0.value.waiting != nil || !$0.value.lease.isIdle(now: now) }
        guard shares.count >= capacity else { return }
        let evict = max(1, capacity / 8)
        let spare = shares.filter { $0.value.waiting == nil }.keys.prefix(evict)
        for key in spare { shares.removeValue(forKey: key) }
    }
}
