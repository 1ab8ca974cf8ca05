/// Which containers the per-container metrics name (`STRATUS_METRICS_CONTAINERS`): the first `limit`
/// a process sees, each by its identifier; every later one is counted as `other`. So a process
/// exports at most `limit` + 1 series of each metric, however many containers it serves.
public struct ContainerMetricLabels: Sendable, Equatable {
    /// The label of the containers past the limit.
    public static let other = "other"

    /// The most containers named.
    public let limit: Int
    /// The containers named so far.
    public private(set) var named: Set<String> = []

    /// Labels for at most `limit` containers (0: none, the metrics are off).
    public init(limit: Int) { self.limit = max(0, limit) }

    /// The label `container` is counted under; nil when the metrics are off.
    public mutating func label(_ container: String) -> String? {
        guard limit > 0 else { return nil }
        if named.contains(container) { return container }
        guard named.count < limit else { return Self.other }
        named.insert(container)
        return container
    }

    /// A label value as Prometheus's text format writes it between quotes.
    public static func escaped(_ value: String) -> String {
        var escaped = ""
        for character in value {
            switch character {
            case "\\": escaped += "\\\\"
            case "\"": escaped += "\\\""
            case "\n": escaped += "\\n"
            default: escaped.append(character)
            }
        }
        return escaped
    }
}
