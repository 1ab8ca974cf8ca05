import PostgresNIO

/// Timers on an event loop, for deadlines that are almost always cancelled before they run out (a
/// request's wait for a pooled connection, the relay's wait for the next commit).
///
/// `Task.sleep` arms a timer the process's event loops do not own: cancelling the sleep answers the
/// task at once but leaves the timer armed, and when it runs out (seconds after the request ended)
/// it wakes a thread for nothing — one wake per request, thousands a second under load, and still
/// hundreds a second for as long as the deadline after the load stops. An event loop's scheduled
/// task is taken off the loop's queue when cancelled: a deadline that never runs out costs nothing.
public enum LoopTimer {
    /// A scheduled call, which `cancel` takes off its loop.
    public struct Handle: Sendable {
        let scheduled: Scheduled<Void>

        /// Takes the call off its loop unless it has run.
        public func cancel() { scheduled.cancel() }
    }

    /// Calls `body` on an event loop after `duration`, unless cancelled first.
    public static func schedule(
        after duration: Duration, on loop: any EventLoop = PostgresConnection.defaultEventLoopGroup.any(), _ body: @escaping @Sendable () -> Void
    ) -> Handle {
        Handle(scheduled: loop.scheduleTask(in: timeAmount(duration), body))
    }

    /// Returns after `duration`; throws `CancellationError` when the task is cancelled first.
    package static func sleep(for duration: Duration, on loop: any EventLoop = PostgresConnection.defaultEventLoopGroup.any()) async throws {
        let scheduled = loop.scheduleTask(in: timeAmount(duration)) {}
        try await withTaskCancellationHandler {
            do {
                try await scheduled.futureResult.get()
            } catch EventLoopError.cancelled {
                throw CancellationError()
            }
        } onCancel: {
            scheduled.cancel()
        }
    }

    /// `duration` as a `TimeAmount` (`TimerPlan.nanoseconds`: whole nanoseconds, clamped to what it
    /// holds; a negative one is none).
    package static func timeAmount(_ duration: Duration) -> TimeAmount {
        .nanoseconds(TimerPlan.nanoseconds(duration))
    }

    /// `duration` in nanoseconds, as `timeAmount(_:)` has it.
    package static func nanoseconds(_ duration: Duration) -> Int64 {
        timeAmount(duration).nanoseconds
    }
}
