import Foundation

/// A PostgreSQL cluster of the test's own, so a test can stop and restart it without disturbing the
/// others; made with scripts/lib.sh's helpers (the cluster runs as user postgres, trust auth, user
/// `stratus`).
public final class ThrowawayPostgres: Sendable {
    public let directory: String
    public let port: Int

    public init() async throws {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("stratus-test-pg-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        directory = base
        port = try Broker.freePort()
        try await shell("pg_init \"$1/data\"", directory)
    }

    public var url: String { "postgres://stratus@127.0.0.1:\(port)/postgres" }

    /// Runs `body` with a new cluster (not started), removed afterwards, also on failure.
    public static func with(_ body: (ThrowawayPostgres) async throws -> Void) async throws {
        let server = try await ThrowawayPostgres()
        do {
            try await body(server)
        } catch {
            await server.remove()
            throw error
        }
        await server.remove()
    }

    public func start() async throws {
        try await shell("pg_start \"$1/data\" \"$2\" \"$1/postgres.log\" -c fsync=off", directory, String(port))
    }

    /// A fast shutdown and start, as a minor upgrade or a failover does.
    public func restart() async throws {
        try await shell("as_pg_owner \"$(pg_bin_dir)/pg_ctl\" -D \"$1/data\" -m fast -w -t 60 restart >/dev/null", directory)
    }

    public func stop() async throws {
        try await shell("as_pg_owner \"$(pg_bin_dir)/pg_ctl\" -D \"$1/data\" -m fast -w -t 60 stop >/dev/null", directory)
    }

    /// Sessions on the server other than the tests' own (the one asking, and those of an earlier
    /// look, which may still be ending).
    public func sessions() async throws -> Int {
        Int(try await TestSupport.count(url: url, """
            SELECT count(*) FROM pg_stat_activity
            WHERE datname = 'postgres' AND pid <> pg_backend_pid() AND application_name <> \(TestSupport.observerApplicationName)
            """))
    }

    /// Stops the server if it runs and removes the cluster.
    public func remove() async {
        try? await shell("pg_running \"$1/data\" && as_pg_owner \"$(pg_bin_dir)/pg_ctl\" -D \"$1/data\" -m immediate -w stop >/dev/null; true", directory)
        try? FileManager.default.removeItem(atPath: directory)
    }

    private func shell(_ script: String, _ arguments: String...) async throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/bash")
        let library = TestSupport.repositoryRoot.appendingPathComponent("scripts/lib.sh").path
        // A file, not a pipe: the server pg_ctl starts would hold a pipe open for ever.
        let outputPath = "\(directory)/shell.log"
        FileManager.default.createFile(atPath: outputPath, contents: nil)
        let output = try FileHandle(forWritingTo: URL(fileURLWithPath: outputPath))
        defer { try? output.close() }
        process.standardOutput = output
        process.standardError = output
        process.standardInput = FileHandle.nullDevice
        // The script writes its exit status to a file as it ends, and the test watches for that file:
        // the process's own termination is not always reported here while many connections churn.
        let statusPath = "\(directory)/shell.status"
        try? FileManager.default.removeItem(atPath: statusPath)
        process.arguments = ["-c", "trap 'echo $? > \"\(statusPath)\"' EXIT; set -euo pipefail; source \"\(library)\"; \(script)", "stratus-test"] + arguments
        try process.run()
        let deadline = ContinuousClock.now + .seconds(120)
        var status: Int32?
        while status == nil {
            if let text = try? String(contentsOfFile: statusPath, encoding: .utf8), let value = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)) {
                status = value
            } else if ContinuousClock.now > deadline {
                throw TestSupport.MissingServer(description: "\(script) did not end within 120 s")
            } else {
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        guard status == 0 else {
            throw TestSupport.MissingServer(description: "\(script) failed (\(status ?? -1)): \(text.suffix(2000))")
        }
    }
}
