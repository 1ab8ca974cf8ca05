import Foundation
import Logging
import StratusCore
import StratusPostgres
import Synchronization

/// Usage per container as Prometheus metrics (`STRATUS_METRICS_CONTAINERS`), appended to `/metrics`:
/// `stratus_container_requests_total` (the authenticated database calls this process received),
/// and `stratus_container_records`, `_record_bytes`, `_assets`, `_asset_bytes`, `_zones`,
/// `_subscriptions` (what the container holds, read by `refresh` every
/// `STRATUS_METRICS_CONTAINERS_SECONDS`, never by a scrape). Label cardinality is bounded by the
/// limit: requests name the first `limit` containers the process sees and count the rest as
/// `other` (`ContainerMetricLabels`); usage names the first `limit` containers by identifier.
public final class ContainerMetrics: Sendable {
    private struct State {
        var labels: ContainerMetricLabels
        var requests: [String: Int64] = [:]
        var usage: [ContainerUsage] = []
    }

    private let state: Mutex<State>
    /// The most containers named.
    public let limit: Int

    /// Metrics of at most `limit` containers (at least 1).
    public init(limit: Int) {
        self.limit = max(1, limit)
        state = Mutex(State(labels: ContainerMetricLabels(limit: max(1, limit))))
    }

    /// Counts a call to `container`.
    func request(_ container: String) {
        state.withLock { state in
            guard let label = state.labels.label(container) else { return }
            state.requests[label, default: 0] += 1
        }
    }

    /// Reads what the first `limit` containers hold (a few index scans per container).
    public func refresh(store: PostgresStore, logger: Logger) async throws {
        let usage = try await ContainerStore(store: store).usage(limit: limit, logger: logger)
        state.withLock { $0.usage = usage }
    }

    /// The metrics in Prometheus's text format.
    public func render() -> String {
        let (requests, usage) = state.withLock { ($0.requests, $0.usage) }
        var text = "# TYPE stratus_container_requests_total counter\n"
        for (label, count) in requests.sorted(by: { $0.key < $1.key }) {
            text += "stratus_container_requests_total{container=\"\(ContainerMetricLabels.escaped(label))\"} \(count)\n"
        }
        let gauges: [(String, KeyPath<ContainerUsage, Int64>)] = [
            ("records", \.records), ("record_bytes", \.recordBytes), ("assets", \.assets), ("asset_bytes", \.assetBytes),
            ("zones", \.zones), ("subscriptions", \.subscriptions),
        ]
        for (name, value) in gauges {
            text += "# TYPE stratus_container_\(name) gauge\n"
            for entry in usage {
                text += "stratus_container_\(name){container=\"\(ContainerMetricLabels.escaped(entry.container))\"} \(entry[keyPath: value])\n"
            }
        }
        return text
    }
}
