import Foundation
import NIOCore
import NIOPosix

extension StratusProcess {
    /// Runs the process's Swift tasks on SwiftNIO's shared event loops, the threads that already
    /// carry its HTTP and PostgreSQL traffic, instead of Swift's separate pool of threads: a handler
    /// resumes on the thread its connection's bytes arrived on rather than being handed to another
    /// thread at every await and back (docs/benchmarks.md, "Tasks on the event loops"). Nothing in
    /// Stratus blocks a task's thread (blocking calls run on queues of their own), which this needs
    /// even more than Swift's pool does.
    ///
    /// Call it first in `main`, before any task starts. `STRATUS_TASKS_ON_EVENT_LOOPS=false` keeps
    /// Swift's own pool; any value but true or false stops the process with exit status 2, as every
    /// configuration problem does.
    public static func runTasksOnEventLoops(label: String, environment: [String: String] = ProcessInfo.processInfo.environment) {
        do {
            guard try tasksOnEventLoops(environment) else { return }
        } catch {
            FileHandle.standardError.write(Data("\(label): \(error)\n".utf8))
            exit(2)
        }
        _ = NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
    }

    /// Whether `STRATUS_TASKS_ON_EVENT_LOOPS` asks for tasks on the event loops (the default).
    public static func tasksOnEventLoops(_ environment: [String: String]) throws -> Bool {
        switch environment["STRATUS_TASKS_ON_EVENT_LOOPS"] {
        case nil, "true", "1", "on": true
        case "false", "0", "off": false
        case let text?: throw ConfigurationProblem("STRATUS_TASKS_ON_EVENT_LOOPS must be true or false, got '\(text.prefix(64))'")
        }
    }
}
