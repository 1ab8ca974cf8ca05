import Foundation
import Histogram
import Synchronization

/// Latencies of one kind of operation, in microseconds.
struct Latencies: Sendable {
    private(set) var histogram = Histogram<UInt64>(highestTrackableValue: 600_000_000, numberOfSignificantValueDigits: .three)

    mutating func record(_ duration: Duration) {
        // Whole microseconds, at least 1 (and at most what the histogram could ever hold).
        _ = histogram.record(UInt64(min(max(1, duration / .microseconds(1)), 1e18)))
    }

    mutating func add(_ other: Latencies) { histogram.add(other.histogram) }

    var count: Int { Int(histogram.totalCount) }

    /// The latency at `percentile` (0–100), in milliseconds.
    func milliseconds(at percentile: Double) -> Double {
        count == 0 ? 0 : Double(histogram.valueAtPercentile(percentile)) / 1000
    }

    var maxMilliseconds: Double { count == 0 ? 0 : Double(histogram.max) / 1000 }
}

/// What a closed-loop run measured.
struct LoadOutcome: Sendable {
    var operations = 0
    var errors = 0
    var seconds = 0.0
    var latencies = Latencies()
    /// The first few failures, to say why a run had errors.
    var failures: [String] = []
    /// Per-run counters a scenario keeps (e.g. conflicts).
    var counters: [String: Int] = [:]
    /// CPU of the watched processes while the load ran (when the suite watches any).
    var cpu: [ProcessCPU]?

    /// One sample of a lag scenario: from `start` until `arrival` (a lag below zero counts as
    /// none), or, when nothing arrived, an error counted at `timeout`.
    mutating func record(lag arrival: ContinuousClock.Instant?, since start: ContinuousClock.Instant, timeout: Duration, missing: @autoclosure () -> String) {
        operations += 1
        guard let arrival else {
            errors += 1
            latencies.record(timeout)
            if failures.count < 5 { failures.append(missing()) }
            return
        }
        latencies.record(max(.zero, arrival - start))
    }

    mutating func merge(_ other: LoadOutcome) {
        operations += other.operations
        errors += other.errors
        latencies.add(other.latencies)
        if failures.count < 5 { failures += other.failures.prefix(5 - failures.count) }
        counters.merge(other.counters, uniquingKeysWith: +)
    }
}

/// What one operation of a closed loop reports.
enum Step {
    /// Done and counted; `counter` names a per-run counter to increment.
    case done(counter: String? = nil)
    /// The operation failed (it still counts as an operation; its latency is recorded).
    case failed(String)
}

/// Closed-loop load: `concurrency` clients each issue one operation after another until `duration`
/// has passed (or `limit` operations have been issued in all). Each client owns its `State`. The
/// CPU of the suite's watched processes (`ProcessWatch.current`) is measured around the load.
func closedLoop<State: Sendable>(
    concurrency: Int, duration: Duration, limit: Int? = nil,
    state makeState: @Sendable (Int) -> State,
    _ operation: @escaping @Sendable (inout State, Int) async throws -> Step
) async -> LoadOutcome {
    let watch = ProcessWatch.current
    let before = await watch?.snapshot()
    let clock = ContinuousClock()
    let start = clock.now
    let deadline = start + duration
    let issued = IssuedCounter(limit: limit)
    var total = await withTaskGroup(of: LoadOutcome.self) { group in
        for client in 0..<concurrency {
            let initial = makeState(client)
            group.addTask {
                var state = initial
                var outcome = LoadOutcome()
                var iteration = 0
                while clock.now < deadline, issued.take() {
                    let began = clock.now
                    let step: Step
                    do {
                        step = try await operation(&state, iteration)
                    } catch {
                        step = .failed(String(describing: error))
                    }
                    outcome.latencies.record(clock.now - began)
                    outcome.operations += 1
                    iteration += 1
                    switch step {
                    case .done(let counter):
                        if let counter { outcome.counters[counter, default: 0] += 1 }
                    case .failed(let reason):
                        outcome.errors += 1
                        if outcome.failures.count < 5 { outcome.failures.append(reason) }
                    }
                }
                return outcome
            }
        }
        var total = LoadOutcome()
        for await outcome in group { total.merge(outcome) }
        return total
    }
    let elapsed = clock.now - start
    total.seconds = elapsed.seconds
    if let watch, let before { total.cpu = watch.usage(from: before, to: await watch.snapshot()) }
    return total
}

/// Hands out at most `limit` operations across clients; and numbers, one after another.
final class IssuedCounter: Sendable {
    private let remaining: Mutex<Int?>
    private let issued = Mutex(0)

    init(limit: Int?) { remaining = Mutex(limit) }

    /// 0, 1, 2, … across callers.
    func next() -> Int { issued.withLock { count in defer { count += 1 }; return count } }

    func take() -> Bool {
        remaining.withLock { remaining in
            guard let left = remaining else { return true }
            guard left > 0 else { return false }
            remaining = left - 1
            return true
        }
    }
}

extension Duration {
    var seconds: Double { self / .seconds(1) }

    init(seconds: Double) {
        // Checked: a NaN or a huge setting would trap in Int64(_:).
        let nanoseconds = (seconds * 1e9).rounded(.towardZero)
        self = .nanoseconds(Int64(exactly: nanoseconds) ?? (nanoseconds > 0 ? .max : 0))
    }
}

/// A small seeded generator, so every run loads the same data.
struct SplitMix: RandomNumberGenerator {
    var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
