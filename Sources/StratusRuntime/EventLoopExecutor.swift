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
    /// configuration problem does. `STRATUS_EVENT_LOOPS` sets how many event loops there are, for
    /// the tasks and the connections alike; when unset, `defaultEventLoops`, or one per core when
    /// that is nil. A worker applies one batch at a time: on one loop its tasks, its PostgreSQL
    /// connections' bytes and its statements' answers all stay on one thread (docs/benchmarks.md,
    /// "The workers' tasks on one event loop").
    public static func runTasksOnEventLoops(
        label: String, defaultEventLoops: Int? = nil, environment: [String: String] = ProcessInfo.processInfo.environment
    ) {
        do {
            // Before anything uses the shared loops: their number is fixed when they are made.
            if let count = try eventLoops(environment) ?? defaultEventLoops { NIOSingletons.groupLoopCountSuggestion = count }
            guard try tasksOnEventLoops(environment) else { return }
        } catch {
            FileHandle.standardError.write(Data("\(label): \(error)\n".utf8))
            exit(2)
        }
        _ = NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
    }

    /// How many event loops `STRATUS_EVENT_LOOPS` asks for: nil when unset (one per core). A request
    /// whose HTTP connection and leased PostgreSQL connection sit on different loops crosses
    /// between their threads twice; on a machine whose cores PostgreSQL shares, fewer loops than
    /// cores can cost less per request (docs/benchmarks.md, "Fewer event loops than cores").
    public static func eventLoops(_ environment: [String: String]) throws -> Int? {
        guard let text = environment["STRATUS_EVENT_LOOPS"] else { return nil }
        guard let count = Int(text), (1...maxEventLoops).contains(count) else {
            throw ConfigurationProblem("STRATUS_EVENT_LOOPS must be a whole number from 1 to \(maxEventLoops), got '\(text.prefix(64))'")
        }
        return count
    }

    /// The most event loops `STRATUS_EVENT_LOOPS` may ask for.
    public static let maxEventLoops = 256

    /// Whether `STRATUS_TASKS_ON_EVENT_LOOPS` asks for tasks on the event loops (the default).
    public static func tasksOnEventLoops(_ environment: [String: String]) throws -> Bool {
        switch environment["STRATUS_TASKS_ON_EVENT_LOOPS"] {
        case nil, "true", "1", "on": true
        case "false", "0", "off": false
        case let text?: throw ConfigurationProblem("STRATUS_TASKS_ON_EVENT_LOOPS must be true or false, got '\(text.prefix(64))'")
        }
    }
}
