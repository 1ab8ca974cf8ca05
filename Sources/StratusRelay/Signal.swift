import StratusConnections
import StratusPostgres
import Synchronization

/// A wake-up flag one task waits on and others fire; a fire with nobody waiting is remembered once.
final class Signal: Sendable {
    private let state = Mutex<(pending: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))

    /// Wakes the waiter, or makes the next wait return at once.
    func fire() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter
            }
            state.pending = true
            return nil
        }
        waiter?.resume()
    }

    /// Returns when fired, or after `timeout` at the latest.
    func wait(timeout: Duration) async {
        // Only a timeout that ran out fires: the cancelled timer of a wait that was woken must not
        // leave a pending fire behind, or every later wait would return at once. On an event loop's
        // timer, a cancelled one is gone at once (LoopTimer).
        let timer = LoopTimer.schedule(after: timeout) { [self] in fire() }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let resumeNow = state.withLock { state -> Bool in
                if state.pending {
                    state.pending = false
                    return true
                }
                state.waiter = continuation
                return false
            }
            if resumeNow { continuation.resume() }
        }
        timer.cancel()
    }
}
