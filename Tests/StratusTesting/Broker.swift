import Foundation

/// A broker of the test's own, so a test can kill and restart it without disturbing the others.
public final class Broker: @unchecked Sendable {
    public let port: Int
    private var process: Process?
    private let binary: String
    private let log: URL

    public var address: String { "127.0.0.1:\(port)" }

    public init() throws {
        guard let binary = ProcessInfo.processInfo.environment["STRATUS_TANSU_BIN"] else {
            throw TestSupport.MissingServer(description: "STRATUS_TANSU_BIN is not set: run the tests with scripts/test.sh")
        }
        self.binary = binary
        self.port = try Broker.freePort()
        self.log = FileManager.default.temporaryDirectory.appendingPathComponent("stratus-test-broker-\(port).log")
    }

    /// Starts the broker and waits until it accepts connections.
    public func start() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["broker", "--listener-url", "tcp://127.0.0.1:\(port)", "--advertised-listener-url", "tcp://127.0.0.1:\(port)"]
        FileManager.default.createFile(atPath: log.path, contents: nil)
        let handle = try FileHandle(forWritingTo: log)
        handle.seekToEndOfFile()
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        self.process = process
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            if Broker.accepts(port: port) { return }
            usleep(100_000)
        }
        throw TestSupport.MissingServer(description: "broker did not start on port \(port)")
    }

    /// Stops the broker's process (SIGSTOP) without ending it: its connections stay open and
    /// nothing it receives is answered. Returns once the process is stopped.
    public func freeze() throws {
        guard let process else { throw TestSupport.MissingServer(description: "the broker is not running") }
        let pid = process.processIdentifier
        guard Glibc.kill(pid, SIGSTOP) == 0 else { throw TestSupport.MissingServer(description: "could not stop the broker") }
        // The state field of /proc/<pid>/stat turns to T once the stop has taken effect.
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
               let state = stat.split(separator: ")").last?.split(separator: " ").first, state == "T" { return }
            usleep(10_000)
        }
        throw TestSupport.MissingServer(description: "the broker did not stop")
    }

    /// Kills the broker at once (SIGKILL: it does not stop on SIGTERM); everything it held is gone.
    public func kill() {
        guard let process else { return }
        Glibc.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        self.process = nil
    }

    deinit { kill() }

    public static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else { throw TestSupport.MissingServer(description: "no free port") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    public static func accepts(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }
}
