import Logging
import ServiceLifecycle

/// Runs `pass` now and then every `interval` until the service group shuts down; a pass that fails
/// is logged (`what` names it) and tried again at the next interval. The collectors of stratus-gc run so.
/// Graceful shutdown ends the loop wherever it waits — the service's end, not a failure (a service
/// that throws makes the process exit 1).
public func repeatPass(every interval: Duration, what: String, logger: Logger, _ pass: @escaping @Sendable () async throws -> Void) async throws {
    try await cancelWhenGracefulShutdown {
        while !Task.isCancelled {
            do {
                try await pass()
            } catch where Task.isCancelled {
                break
            } catch {
                logger.warning("\(what) failed; trying again later", metadata: ["error": "\(error)"])
            }
            try? await Task.sleep(for: interval)
        }
    }
}
