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

/// The operations page: relay backlog, each worker's lag and applied rate with a chart of lag, and
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
            "workers": workers, "chart": Self.chart(samples, workers: routes.settings.workers), "samples": samples.count,
            "deadLetters": letters.map { letter -> [String: Any] in
                ["id": letter.id, "worker": letter.worker, "event": letter.eventID.map(String.init) ?? "none", "zone": letter.zoneKey ?? "none",
                 "reason": letter.reason, "at": ISO8601DateFormatter().string(from: letter.createdAt)]
            },
            "noDeadLetters": letters.isEmpty, "pageSize": Self.pageSize,
        ]
        if letters.count == Self.pageSize, let last = letters.last { values["older"] = "/console/operations?before=\(last.id)" }
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

    /// An inline SVG line chart of each worker's lag over the samples: no script, no outside file.
    static func chart(_ samples: [OperationsHistory.Sample], workers: [String]) -> [String: Any] {
        let (width, height, pad) = (600.0, 160.0, 20.0)
        let top = max(1, samples.flatMap { $0.workers.values.map(\.lag) }.max() ?? 1)
        let colors = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2"]
        let first = samples.first?.at ?? Date()
        let span = max(1, (samples.last?.at ?? first).timeIntervalSince(first))
        let lines = workers.enumerated().map { index, worker -> [String: Any] in
            let points = samples.compactMap { sample -> String? in
                guard let lag = sample.workers[worker]?.lag else { return nil }
                let x = pad + (width - 2 * pad) * sample.at.timeIntervalSince(first) / span
                let y = height - pad - (height - 2 * pad) * Double(lag) / Double(top)
                return String(format: "%.1f,%.1f", x, y)
            }
            return ["worker": worker, "points": points.joined(separator: " "), "color": colors[index % colors.count]]
        }
        return ["lines": lines, "top": top, "width": Int(width), "height": Int(height),
                "seconds": Int(span.rounded()), "label": "Lag in events of each worker over the last \(samples.count) samples"]
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
        return ConsolePage.redirect("/console/operations?done=\(retry ? "retried" : "discarded")")
    }
}
