import Logging
import StratusCore
import StratusPostgres

/// Several projections behind one worker (one consumer group, one checkpoint): each event is applied
/// by every part, in order, in the same transaction. stratus-gc keeps its collectors' projections
/// this way.
public struct CompositeProjection: Projection {
    public let name: String
    let parts: [any Projection]
    public let statisticsTable: String?

    /// Creates the composite; it is interactive if any part is. `statisticsTable`: a table whose
    /// planner statistics its worker keeps fresh (`PlannerStatistics`).
    public init(name: String, parts: [any Projection], statisticsTable: String? = nil) {
        self.name = name
        self.parts = parts
        self.statisticsTable = statisticsTable
    }

    public var urgency: ProjectionUrgency {
        parts.contains { if case .interactive = $0.urgency { true } else { false } } ? .interactive : .background
    }

    public func apply(_ event: EventEnvelope, in transaction: Transaction, logger: Logger) async throws {
        for part in parts { try await part.apply(event, in: transaction, logger: logger) }
    }

    /// Each part takes the whole batch in turn (the parts keep separate state).
    public func apply(_ events: [EventEnvelope], in transaction: Transaction, logger: Logger) async throws {
        for part in parts { try await part.apply(events, in: transaction, logger: logger) }
    }

    public func reset(in transaction: Transaction, logger: Logger) async throws {
        for part in parts { try await part.reset(in: transaction, logger: logger) }
    }
}
