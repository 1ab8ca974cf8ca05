import Logging
import StratusCore
import StratusPostgres

/// stratus-gc's asset reference counts, from record and zone events (`AssetReferenceStore`): what
/// the orphaned-asset collector reads to find its work without scanning records.
public struct AssetReferenceProjection: Projection {
    public let name: String
    public let urgency = ProjectionUrgency.background

    /// Creates the projection under a worker name.
    public init(name: String = "stratus-gc") { self.name = name }

    public func apply(_ event: EventEnvelope, in transaction: Transaction, logger: Logger) async throws {
        switch event.type {
        case RecordSaved.eventType:
            // A created record without assets releases and binds nothing: no need to decode it.
            guard RecordSaved.mayConcernAssets(event) else { return }
            try await AssetReferenceStore.apply(RecordSaved.withoutPrevious(event), event: event, in: transaction)
        case RecordDeleted.eventType:
            try await AssetReferenceStore.apply(RecordDeleted.withoutImage(event), event: event, in: transaction)
        case .zoneDeleted:
            try await AssetReferenceStore.apply(event.decode(ZoneDeleted.self), event: event, in: transaction)
        default:
            break
        }
    }

    /// A batch in order, each run of deletions releasing its records' assets with one statement, and
    /// each run of saves without assets too.
    public func apply(_ events: [EventEnvelope], in transaction: Transaction, logger: Logger) async throws {
        try await apply(events, in: transaction, logger: logger, readingSave: { event in
            RecordSaved.mayConcernAssets(event) ? try RecordSaved.withoutPrevious(event) : nil
        }, saves: { run in
            try await AssetReferenceStore.apply(saves: run, in: transaction)
        }, deletions: { run in
            try await AssetReferenceStore.apply(deletions: run, in: transaction)
        })
    }

    public func reset(in transaction: Transaction, logger: Logger) async throws {
        try await AssetReferenceStore.reset(in: transaction)
    }
}
