import Logging
import StratusCore
import StratusPostgres

/// `stratus-gc`'s projection: the expiry index (`RecordExpirationIndex`) kept from the zone events —
/// a record saved with an expiration is indexed, one saved without or deleted is not, a deleted zone
/// takes its entries along. Nobody waits for it (the readers hide expired records by themselves):
/// background urgency.
public struct ExpiryProjection: Projection {
    public let name = "stratus-gc"
    public let urgency = ProjectionUrgency.background

    /// Creates the projection.
    public init() {}

    public func apply(_ event: EventEnvelope, in transaction: Transaction, logger: Logger) async throws {
        switch event.type {
        case RecordSaved.eventType:
            // Most saves create records without an expiration: nothing to index, nothing to decode.
            guard RecordSaved.mayConcernExpiry(event) else { return }
            try await RecordExpirationIndex.apply(RecordSaved.withoutPrevious(event), in: transaction)
        case RecordDeleted.eventType: try await RecordExpirationIndex.apply(RecordDeleted.withoutImage(event), in: transaction)
        case .zoneDeleted: try await RecordExpirationIndex.apply(event.decode(ZoneDeleted.self), in: transaction)
        default: break
        }
    }

    /// A batch in order, each run of deletions removing its entries with one statement per zone, and
    /// each run of saves indexing with one statement and removing with one per zone.
    public func apply(_ events: [EventEnvelope], in transaction: Transaction, logger: Logger) async throws {
        try await apply(events, in: transaction, logger: logger, readingSave: { event in
            RecordSaved.mayConcernExpiry(event) ? try RecordSaved.withoutPrevious(event) : nil
        }, saves: { run in
            try await RecordExpirationIndex.apply(saves: run.map(\.saved), in: transaction)
        }, deletions: { run in
            try await RecordExpirationIndex.apply(deletions: run.map(\.deleted), in: transaction)
        })
    }

    public func reset(in transaction: Transaction, logger: Logger) async throws {
        try await RecordExpirationIndex.reset(in: transaction)
    }
}
