import Dispatch
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A process of the stack whose CPU the suite measures, e.g. `stratus-api` or `postgres`. Its
/// children count as part of it (PostgreSQL's backends belong to the postmaster).
public struct WatchedProcess: Codable, Sendable, Hashable {
    /// The name the report shows.
    public var name: String
    /// The process id.
    public var pid: Int32

    /// Creates an entry.
    public init(name: String, pid: Int32) {
        self.name = name
        self.pid = pid
    }

    /// Parses `NAME=PID`.
    public init?(argument: String) {
        let parts = argument.split(separator: "=", maxSplits: 1)
        guard parts.count == 2, !parts[0].isEmpty, let pid = Int32(parts[1]), pid > 0 else { return nil }
        self.init(name: String(parts[0]), pid: pid)
    }
}

/// CPU one process (with its children) used over an interval.
public struct ProcessCPU: Codable, Sendable {
    /// The watched process's name.
    public var name: String
    /// Its process id.
    public var pid: Int32
    /// CPU seconds (user + system) used over the interval.
    public var cpuSeconds: Double
    /// The same as a share of one core over the interval, in percent.
    public var percentOfCore: Double
    /// The part of it that librdkafka's own threads used (the Kafka client: a worker's consumer, the
    /// relay's producer inside `stratus-api`), in percent of one core; nil when it has none.
    public var kafkaClientPercent: Double?
    /// Processes counted (the process and its living children at the end of the interval).
    public var processes: Int
}

/// The most memory one process (alone, not its children) held resident: `VmHWM` of `/proc/PID/status`.
public struct ProcessMemory: Codable, Sendable {
    /// The watched process's name.
    public var name: String
    /// Its process id.
    public var pid: Int32
    /// Peak resident set size, in bytes.
    public var peakResidentBytes: Int64
}

/// What the stack used while nobody sent it anything.
public struct IdleMeasurement: Codable, Sendable {
    /// Seconds measured.
    public var seconds: Double
    /// Per watched process.
    public var processes: [ProcessCPU]
    /// The sum over the watched processes, in percent of one core.
    public var totalPercentOfCore: Double
}

/// Samples `/proc` for the watched processes: CPU ticks of each process tree, and of its librdkafka
/// threads. A process that is gone contributes nothing (and the interval still reports it, at 0).
struct ProcessWatch: Sendable {
    let processes: [WatchedProcess]

    /// The watch a closed loop samples around its load, set for the duration of a suite run.
    @TaskLocal static var current: ProcessWatch?

    struct Ticks: Sendable {
        var total: Int64 = 0
        var kafkaClient: Int64 = 0
        var hasKafkaClient = false
        var processes = 0
    }

    struct Snapshot: Sendable {
        var at: ContinuousClock.Instant
        var ticks: [Ticks]
    }

    /// Reads the counters now (off the cooperative threads: it reads a few hundred `/proc` files).
    func snapshot() async -> Snapshot {
        let processes = processes
        return await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                let table = ProcTable.read()
                continuation.resume(returning: Snapshot(at: .now, ticks: processes.map { table.ticks(of: $0.pid) }))
            }
        }
    }

    /// Each watched process's peak resident memory so far (read off the cooperative threads); a
    /// process that is gone is left out.
    func peakMemory() async -> [ProcessMemory] {
        let processes = processes
        return await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(returning: processes.compactMap { process in
                    guard let data = FileManager.default.contents(atPath: "/proc/\(process.pid)/status") else { return nil }
                    // `VmHWM:\t  123456 kB`
                    let line = String(decoding: data, as: UTF8.self).split(separator: "\n").first { $0.hasPrefix("VmHWM:") }
                    guard let kilobytes = line?.split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first.flatMap({ Int64($0) }) else { return nil }
                    return ProcessMemory(name: process.name, pid: process.pid, peakResidentBytes: kilobytes * 1024)
                })
            }
        }
    }

    /// The CPU used between two snapshots.
    func usage(from start: Snapshot, to end: Snapshot) -> [ProcessCPU] {
        let seconds = (end.at - start.at).seconds
        let hertz = Double(ProcTable.ticksPerSecond)
        return processes.indices.map { index in
            let before = start.ticks[index], after = end.ticks[index]
            let used = Double(max(0, after.total - before.total)) / hertz
            let kafka = Double(max(0, after.kafkaClient - before.kafkaClient)) / hertz
            return ProcessCPU(
                name: processes[index].name, pid: processes[index].pid, cpuSeconds: used,
                percentOfCore: seconds > 0 ? used / seconds * 100 : 0,
                kafkaClientPercent: after.hasKafkaClient && seconds > 0 ? kafka / seconds * 100 : nil,
                processes: after.processes)
        }
    }
}

/// One reading of `/proc`: every process's parent and CPU ticks.
struct ProcTable {
    struct Entry {
        var parent: Int32
        /// utime + stime of the process itself.
        var own: Int64
        /// cutime + cstime: children it has waited for (exited backends end up here).
        var reaped: Int64
    }

    var entries: [Int32: Entry] = [:]
    var children: [Int32: [Int32]] = [:]

    static let ticksPerSecond: Int = {
        let value = sysconf(Int32(_SC_CLK_TCK))
        return value > 0 ? value : 100
    }()

    static func read() -> ProcTable {
        var table = ProcTable()
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        for name in names {
            guard let pid = Int32(name), let stat = Stat(path: "/proc/\(name)/stat") else { continue }
            table.entries[pid] = Entry(parent: stat.parent, own: stat.utime + stat.stime, reaped: stat.cutime + stat.cstime)
            table.children[stat.parent, default: []].append(pid)
        }
        return table
    }

    /// The ticks of `pid` and every living descendant, plus those of the children they reaped; and
    /// of `pid`'s librdkafka threads (named `rdk:…`).
    func ticks(of pid: Int32) -> ProcessWatch.Ticks {
        var ticks = ProcessWatch.Ticks()
        guard entries[pid] != nil else { return ticks }
        var pending = [pid]
        while let next = pending.popLast() {
            guard let entry = entries[next] else { continue }
            ticks.total += entry.own + entry.reaped
            ticks.processes += 1
            pending += children[next] ?? []
        }
        let threads = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        for thread in threads {
            guard let stat = Stat(path: "/proc/\(pid)/task/\(thread)/stat"), stat.command.hasPrefix("rdk:") else { continue }
            ticks.kafkaClient += stat.utime + stat.stime
            ticks.hasKafkaClient = true
        }
        return ticks
    }

    /// The fields of a `/proc/…/stat` line the watch needs.
    struct Stat {
        var command: String
        var parent: Int32
        var utime: Int64
        var stime: Int64
        var cutime: Int64
        var cstime: Int64

        init?(path: String) {
            guard let data = FileManager.default.contents(atPath: path) else { return nil }
            self.init(line: String(decoding: data, as: UTF8.self))
        }

        /// `pid (comm) state ppid … utime stime cutime cstime …`; the command may hold spaces and
        /// parentheses, so fields are counted from its last `)`.
        init?(line: String) {
            guard let open = line.firstIndex(of: "("), let close = line.lastIndex(of: ")") else { return nil }
            command = String(line[line.index(after: open)..<close])
            let fields = line[line.index(after: close)...].split(separator: " ")
            // fields[0] is the state (field 3 of the line); utime is field 14.
            guard fields.count > 14, let parent = Int32(fields[1]), let utime = Int64(fields[11]), let stime = Int64(fields[12]),
                  let cutime = Int64(fields[13]), let cstime = Int64(fields[14])
            else { return nil }
            self.parent = parent
            self.utime = utime
            self.stime = stime
            self.cutime = cutime
            self.cstime = cstime
        }
    }
}
