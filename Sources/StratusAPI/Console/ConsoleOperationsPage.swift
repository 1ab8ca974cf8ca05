import Foundation
import Hummingbird
import StratusCore
import StratusPostgres
import Synchronization

/// The samples the operations page charts: each worker's lag and applied count, as read at each
/// view of the page (at most one sample a second, the last `capacity` kept), in this process.
final class OperationsHistory: Sendable {
    struct Sample: Sendable {
        var at: Date
        var workers: [String: (lag: Int64, applied: Int64)]
    }

    static let capacity = 120
    private let samples = Mutex<[Sample]>([])

    /// Adds a sample (unless the last is under a second old) and returns them all, oldest first.
    func record(_ sample: Sample) -> [Sample] {
        samples.withLock { samples in
            if let last = samples.last, sample.at.timeIntervalSince(last.at) < 1 { return samples }
            samples.append(sample)
            if samples.count > Self.capacity { samples.removeFirst(samples.count - Self.capacity) }
            return samples
        }
    }
}

/// The operations page: relay backlog, each worker's lag and applied rate with charts of both, and
/// the dead letters (view, retry, discard). Only an operator who reaches every container sees it:
/// dead letters and lag span every tenant.
struct ConsoleOperationsPage<Context: StratusRequestContext>: Sendable {
    let routes: ConsoleRoutes<Context>
    var operations: ConsoleOperations { ConsoleOperations(store: routes.data.store) }

    /// Dead letters a page lists.
    static var pageSize: Int { 50 }

    func register(on router: Router<Context>) {
        router.get("/console/operations") { request, context in await routes.page(request, context) { try await page(request, context) } }
        router.post("/console/operations/dead-letters/retry") { request, context in
            await routes.page(request, context) { try await deadLetter(request, context, retry: true) }
        }
        router.post("/console/operations/dead-letters/discard") { request, context in
            await routes.page(request, context) { try await deadLetter(request, context, retry: false) }
        }
        router.post("/console/operations/runs") { request, context in await routes.page(request, context) { try await startRun(request, context) } }
        router.get("/console/operations/runs/:id") { request, context in await routes.page(request, context) { try await run(request, context) } }
    }

    static func requireEveryContainer(_ session: ConsoleSession) throws(StratusError) {
        guard session.operator.containers == nil else {
            throw StratusError(.accessDenied, "The operations page spans every container; your account is limited to some")
        }
    }

    func page(_ request: Request, _ context: Context) async throws -> Response {
        let session = try await routes.session(request, context)
        try Self.requireEveryContainer(session)
        let items = ConsoleDataPages<Context>.items(request)
        let backlog = try await EventLog(store: routes.data.store).backlog(logger: context.logger)
        let progress = try await operations.progress(workers: routes.settings.workers, logger: context.logger)
        let now = Date()
        let samples = routes.history.record(.init(at: now, workers: Dictionary(progress.map { ($0.worker, ($0.lagEvents, $0.appliedEvents)) }) { a, _ in a }))
        let before = items["before"].flatMap { Int64($0) }
        let letters = try await operations.deadLetters(limit: Self.pageSize, before: before, logger: context.logger)
        let workers = progress.map { worker -> [String: Any] in
            ["worker": worker.worker, "lag": worker.lagEvents, "zonesBehind": worker.zonesBehind, "applied": worker.appliedEvents,
             "rate": Self.rate(worker.worker, samples), "deadLetters": worker.deadLetters]
        }
        var values: [String: Any] = [
            "backlog": backlog.count, "backlogAge": String(format: "%.1f", backlog.oldestAgeSeconds),
            "workers": workers, "charts": Self.charts(samples, workers: routes.settings.workers), "samples": samples.count,
            "deadLetters": letters.map { letter -> [String: Any] in
                ["id": letter.id, "worker": letter.worker, "event": letter.eventID.map(String.init) ?? "none", "zone": letter.zoneKey ?? "none",
                 "reason": letter.reason, "at": ISO8601DateFormatter().string(from: letter.createdAt)]
            },
            "noDeadLetters": letters.isEmpty, "pageSize": Self.pageSize,
        ]
        if letters.count == Self.pageSize, let last = letters.last { values["older"] = "/console/operations?before=\(last.id)" }
        values["canStart"] = routes.maintenance != nil
        values["jobs"] = MaintenanceJob.all(workers: routes.settings.workers).map { ["name": $0.name, "label": $0.label] }
        values["runs"] = try await MaintenanceRunStore(store: routes.data.store).recent(logger: context.logger).map(Self.view)
        switch items["done"] {
        case "retried": values["notice"] = "The dead letter was handed back to its worker, which applies its zone again from the event log."
        case "discarded": values["notice"] = "The dead letter was discarded."
        default: break
        }
        return ConsolePage.render("operations", title: "Operations", session: session, crumbs: [("Containers", "/console")], values)
    }

    /// Events per second a worker applied between the last two samples ("–" before there are two).
    static func rate(_ worker: String, _ samples: [OperationsHistory.Sample]) -> String {
        guard samples.count >= 2 else { return "–" }
        let (previous, last) = (samples[samples.count - 2], samples[samples.count - 1])
        guard let a = previous.workers[worker]?.applied, let b = last.workers[worker]?.applied else { return "–" }
        let seconds = last.at.timeIntervalSince(previous.at)
        guard seconds > 0 else { return "–" }
        return String(format: "%.1f", Double(max(0, b - a)) / seconds)
    }

    /// The charts of the page: each worker's lag at each sample, and its applied events per second
    /// between consecutive samples.
    static func charts(_ samples: [OperationsHistory.Sample], workers: [String]) -> [[String: Any]] {
        let lag = workers.map { worker in (worker, samples.compactMap { sample in sample.workers[worker].map { (sample.at, Double($0.lag)) } }) }
        let rate = workers.map { worker in
            (worker, zip(samples, samples.dropFirst()).compactMap { previous, sample -> (Date, Double)? in
                guard let a = previous.workers[worker]?.applied, let b = sample.workers[worker]?.applied else { return nil }
                let seconds = sample.at.timeIntervalSince(previous.at)
                return seconds > 0 ? (sample.at, Double(max(0, b - a)) / seconds) : nil
            })
        }
        return [
            chart(id: "lag-chart", lag, label: "Lag in events of each worker over the last \(samples.count) samples"),
            chart(id: "rate-chart", rate, label: "Events each worker applied per second between samples"),
        ]
    }

    /// An inline SVG line chart, one line a series: no script, no outside file.
    static func chart(id: String, _ series: [(name: String, points: [(Date, Double)])], label: String) -> [String: Any] {
        let (width, height, pad) = (600.0, 160.0, 20.0)
        let top = max(1, series.flatMap { $0.points.map(\.1) }.max() ?? 1)
        let colors = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2"]
        let times = series.flatMap { $0.points.map(\.0) }
        let first = times.min() ?? Date()
        let span = max(1, (times.max() ?? first).timeIntervalSince(first))
        let lines = series.enumerated().map { index, series -> [String: Any] in
            let points = series.points.map { at, value in
                String(format: "%.1f,%.1f", pad + (width - 2 * pad) * at.timeIntervalSince(first) / span, height - pad - (height - 2 * pad) * value / top)
            }
            return ["worker": series.name, "points": points.joined(separator: " "), "color": colors[index % colors.count]]
        }
        return ["id": id, "lines": lines, "top": top.rounded() == top ? String(Int(top)) : String(format: "%.1f", top), "width": Int(width),
                "height": Int(height), "seconds": Int(span.rounded()), "label": label]
    }

    func deadLetter(_ request: Request, _ context: Context, retry: Bool) async throws -> Response {
        let (session, form) = try await routes.form(request, context)
        try Self.requireEveryContainer(session)
        guard let id = form["id"].flatMap({ Int64($0) }) else { throw StratusError(.badRequest, "Name a dead letter by its id") }
        if retry {
            try await operations.retry(deadLetter: id, logger: context.logger)
        } else {
            guard try await operations.discard(deadLetter: id, logger: context.logger) else { throw StratusError(.notFound, "No dead letter \(id)") }
        }
        context.logger.notice("console dead letter \(retry ? "retried" : "discarded")", metadata: ["operator": "\(session.operator.login)", "id": "\(id)"])
        try await routes.audit(retry ? .deadLetterRetry : .deadLetterDiscard, session: session, context, subject: "\(id)")
        return ConsolePage.redirect("/console/operations?done=\(retry ? "retried" : "discarded")")
    }

    // MARK: Reindex and replay

    /// How often a running run's page reloads itself (no script: a refresh the browser does).
    static var refreshSeconds: Int { 2 }

    /// A run as the pages show it.
    static func view(_ run: MaintenanceRunStore.Run) -> [String: Any] {
        let time = ISO8601DateFormatter()
        return [
            "id": run.id, "href": "/console/operations/runs/\(run.id)", "job": run.job.label, "state": run.state, "startedBy": run.startedBy,
            "events": run.events, "position": run.position, "target": run.target, "started": time.string(from: run.startedAt),
            "finished": run.finishedAt.map { time.string(from: $0) } as Any, "reported": time.string(from: run.reportedAt),
            "error": run.error as Any, "running": run.state == "running",
            "stale": run.state == "running" && Date().timeIntervalSince(run.reportedAt) > Double(MaintenanceRunStore.staleAfter.components.seconds),
        ]
    }

    /// Starts a reindex or a replay (only an operator who reaches every container: both span them
    /// all) and sends the browser to its progress.
    func startRun(_ request: Request, _ context: Context) async throws -> Response {
        let (session, form) = try await routes.form(request, context)
        try Self.requireEveryContainer(session)
        let workers = routes.settings.workers
        guard let job = form["job"].flatMap({ MaintenanceJob(name: $0, workers: workers) }) else {
            throw StratusError(.badRequest, "Choose a job: reindex, or a replay of \(workers.joined(separator: ", "))")
        }
        guard let maintenance = routes.maintenance else {
            throw StratusError(.tryAgainLater, "This process cannot start runs; use stratus reindex or stratus replay")
        }
        let id = try await maintenance.start(job, "console:\(session.operator.login)", context.logger)
        context.logger.notice("console maintenance run started", metadata: ["operator": "\(session.operator.login)", "job": "\(job.label)", "run": "\(id)"])
        switch job {
        case .reindex: try await routes.audit(.indexReindex, session: session, context, details: [("run", "\(id)")])
        case .replay(let worker): try await routes.audit(.workerReplay, session: session, context, subject: worker, details: [("run", "\(id)")])
        }
        return ConsolePage.redirect("/console/operations/runs/\(id)?done=started")
    }

    /// A run's progress as the run last recorded it; the page reloads itself while it runs.
    func run(_ request: Request, _ context: Context) async throws -> Response {
        let session = try await routes.session(request, context)
        try Self.requireEveryContainer(session)
        guard let id = context.parameters.get("id").flatMap({ Int64($0) }),
              let run = try await MaintenanceRunStore(store: routes.data.store).run(id, logger: context.logger) else {
            throw StratusError(.notFound, "No such run")
        }
        var values = Self.view(run)
        values["refreshSeconds"] = Self.refreshSeconds
        let done = run.state == "finished"
        values["progressMax"] = max(run.target, 1)
        values["progressValue"] = done ? max(run.target, 1) : min(run.position, run.target)
        values["percent"] = run.target > 0 ? Int((Double(min(run.position, run.target)) / Double(run.target) * 100).rounded(.down)) : (done ? 100 : 0)
        // The reload drops `done`, so the notice that the run started is shown once.
        if run.state == "running" { values["refresh"] = "\(Self.refreshSeconds); url=/console/operations/runs/\(run.id)" }
        if Self.items(request)["done"] == "started" { values["notice"] = "The run started; it goes on when you leave this page." }
        return ConsolePage.render(
            "run", title: "Run \(run.id)", session: session, crumbs: [("Containers", "/console"), ("Operations", "/console/operations")], values)
    }

    static func items(_ request: Request) -> [String: String] { ConsoleDataPages<Context>.items(request) }
}
