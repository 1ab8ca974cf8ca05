import AsyncHTTPClient
import Foundation
import StratusCore
import Synchronization

/// A built Stratus executable run as a child process of the test, configured by environment
/// variables as an operator would. Its output goes to a log file the test shows when it fails.
// Unchecked: `process` is set once in `init` and only read afterwards; what changes is behind `exit`'s mutex.
public final class StratusExecutable: @unchecked Sendable {
    public let name: String
    public let log: URL
    private let process: Process
    private let exit = Exit()

    /// The exit status once the process has ended, and who waits for it.
    private final class Exit: Sendable {
        let state = Mutex<(status: Int32?, waiters: [CheckedContinuation<Int32, Never>])>((nil, []))
        func withLock<R: Sendable>(_ body: (inout (status: Int32?, waiters: [CheckedContinuation<Int32, Never>])) -> R) -> R { state.withLock { body(&$0) } }
    }

    /// Where the executables are: `STRATUS_BIN_DIR`, else next to the test bundle (`swift build`
    /// and `swift test` put both in the same folder).
    public static func binary(_ name: String) throws -> URL {
        var folders: [URL] = []
        if let configured = ProcessInfo.processInfo.environment["STRATUS_BIN_DIR"] { folders.append(URL(fileURLWithPath: configured)) }
        let bundle = Bundle.main.bundleURL
        folders += [bundle, bundle.deletingLastPathComponent()]
        for folder in folders {
            let candidate = folder.appendingPathComponent(name)
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
        }
        throw TestSupport.MissingServer(description: "no \(name) executable in \(folders.map(\.path)); build it with swift build (or set STRATUS_BIN_DIR)")
    }

    /// The environment of a Stratus process for the test: this process's, without any Stratus
    /// setting of the developer's shell (the test run's own `STRATUS_TEST_*` kept, so
    /// scripts/test.sh can stop a child a crashed test left) nor any `OTEL_*` one (tracing is on
    /// only where a test turns it on), plus `settings`.
    public static func environment(_ settings: [String: String]) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment.filter {
            (!$0.key.hasPrefix("STRATUS_") || $0.key.hasPrefix("STRATUS_TEST_")) && !$0.key.hasPrefix("OTEL_")
        }
        environment["STRATUS_MIGRATIONS_DIR"] = TestSupport.repositoryRoot.appendingPathComponent("migrations").path
        environment["STRATUS_LOG_LEVEL"] = "info"
        environment["STRATUS_SECRET_KEY"] = SecretKey.generate().hex
        environment.merge(settings) { _, new in new }
        return environment
    }

    private init(name: String, arguments: [String], settings: [String: String]) throws {
        self.name = name
        log = FileManager.default.temporaryDirectory.appendingPathComponent("stratus-test-\(name)-\(UUID().uuidString.prefix(8)).log")
        FileManager.default.createFile(atPath: log.path, contents: nil)
        let output = try FileHandle(forWritingTo: log)
        let process = Process()
        process.executableURL = try Self.binary(name)
        process.arguments = arguments
        process.environment = Self.environment(settings)
        process.currentDirectoryURL = FileManager.default.temporaryDirectory
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = output
        process.standardError = output
        self.process = process
        process.terminationHandler = { [exit] process in
            try? output.close()
            let waiters = exit.withLock { state in
                state.status = process.terminationStatus
                defer { state.waiters = [] }
                return state.waiters
            }
            for waiter in waiters { waiter.resume(returning: process.terminationStatus) }
        }
        try process.run()
    }

    /// Runs `name` with `body`, and kills it (SIGKILL) when `body` ends, whether it succeeded or not;
    /// its log is printed and kept when `body` fails, else removed.
    public static func with<T: Sendable>(
        _ name: String, _ arguments: [String] = [], settings: [String: String], _ body: (StratusExecutable) async throws -> T
    ) async throws -> T {
        let child = try StratusExecutable(name: name, arguments: arguments, settings: settings)
        do {
            let result = try await body(child)
            await child.stop(signal: SIGKILL)
            try? FileManager.default.removeItem(at: child.log)
            return result
        } catch {
            await child.stop(signal: SIGKILL)
            print("--- \(name) log (\(child.log.path)) ---\n\(child.output().suffix(6000))")
            throw error
        }
    }

    /// Runs `name` to its end; returns its exit status and everything it wrote.
    public static func run(_ name: String, _ arguments: [String], settings: [String: String]) async throws -> (status: Int32, output: String) {
        let child = try StratusExecutable(name: name, arguments: arguments, settings: settings)
        let status = await child.exited()
        defer { try? FileManager.default.removeItem(at: child.log) }
        return (status, child.output())
    }

    /// Sends `signal` unless the process has ended, and waits until it has.
    @discardableResult
    public func stop(signal: Int32) async -> Int32 {
        if exit.withLock({ $0.status == nil }) { Glibc.kill(process.processIdentifier, signal) }
        return await exited()
    }

    /// The process id (for reading its /proc entries).
    public var processIdentifier: Int32 { process.processIdentifier }

    /// Whether the process is still running.
    public var isRunning: Bool { exit.withLock { $0.status == nil } }

    /// Throws when the process has ended (it should not have).
    public func requireRunning() throws {
        guard let status = exit.withLock({ $0.status }) else { return }
        throw TestSupport.MissingServer(description: "\(name) exited with status \(status)")
    }

    /// Waits until the server at `base` (`http://127.0.0.1:<port>`) answers `/health` with 200, at
    /// most a minute; throws if the process ends first.
    public func answersHealth(at base: String) async throws {
        try await TestSupport.eventually(timeout: .seconds(60), "\(name) answers /health") {
            try requireRunning()
            return (try? await HTTPClient.shared.execute(HTTPClientRequest(url: base + "/health"), timeout: .seconds(2)).status == .ok) ?? false
        }
    }

    /// Waits for the process to end (without holding a thread); returns its status.
    public func exited() async -> Int32 {
        await withCheckedContinuation { continuation in
            let status = exit.withLock { state -> Int32? in
                if state.status == nil { state.waiters.append(continuation) }
                return state.status
            }
            if let status { continuation.resume(returning: status) }
        }
    }

    /// What the process wrote so far.
    public func output() -> String {
        (try? String(contentsOf: log, encoding: .utf8)) ?? ""
    }
}
