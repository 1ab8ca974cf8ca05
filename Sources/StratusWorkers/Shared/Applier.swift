import Logging
import Metrics
import StratusCore
import StratusPostgres

/// Applies events to a projection exactly once per zone sequence, whatever order and however often
/// they arrive: a redelivered event is skipped, and an event that arrives after a gap first pulls
/// the missing events of its zone from the PostgreSQL event log.
public struct Applier: Sendable {
    /// The projection applied to.
    public let projection: any Projection
    let store: PostgresStore

    /// Creates an applier.
    public init(projection: any Projection, store: PostgresStore) {
        self.projection = projection
        self.store = store
    }

    /// What happened to an event.
    public enum Outcome: Sendable, Equatable {
        /// Applied, together with this many earlier events of its zone that had not arrived.
        case applied(filledGap: Int)
        /// Already applied before.
        case duplicate
    }

    /// Applies one event in its own transaction. Each event applied (the missing ones it pulls in,
    /// then itself) runs under a savepoint: one that fails for good is set aside as a dead letter and
    /// the checkpoint moves past it, so a poison event never holds back its zone's later events.
    @discardableResult
    public func apply(_ event: EventEnvelope, from message: DeadLetterMessage? = nil, logger: Logger) async throws -> Outcome {
        let projection = projection
        let worker = projection.name
        return try await ApplyTracing.span(worker, CollectionOfOne(event)) { try await store.serializable(logger: logger) { transaction -> Outcome in
            guard let sequence = event.zoneSequence else {
                try await Self.isolated(event, message: message, projection: projection, in: transaction, logger: logger)
                return .applied(filledGap: 0)
            }
            // The checkpoint moves first (and says where it was); the effects follow in the transaction.
            let last = try await CheckpointStore.advance(worker: worker, zoneKey: event.zoneKey, to: sequence, eventID: event.id, in: transaction)
            if sequence <= last { return .duplicate }
            var missing: [EventEnvelope] = []
            if sequence > last + 1 {
                missing = try await EventLog.events(zoneKey: event.zoneKey, sequences: (last + 1)...(sequence - 1), in: transaction)
                guard missing.count == Int(sequence - last - 1) else {
                    throw EventDecodingError(reason: "zone \(event.zoneKey) is missing sequences \(last + 1)..<\(sequence) in the event log")
                }
            }
            for earlier in missing {
                try await Self.isolated(earlier, projection: projection, in: transaction, logger: logger)
            }
            try await Self.isolated(event, message: message, projection: projection, in: transaction, logger: logger)
            return .applied(filledGap: missing.count)
        } }
    }

    /// Sets an event aside for good (after transient failures ran out of attempts): a dead letter,
    /// and the checkpoint past it, in one transaction.
    public func setAside(_ event: EventEnvelope, from message: DeadLetterMessage? = nil, reason: String, logger: Logger) async throws {
        let worker = projection.name
        try await store.serializable(logger: logger) { transaction in
            try await DeadLetterStore.record(worker: worker, event: event, message: message, reason: reason, in: transaction)
            // Past it, never back (a checkpoint already further stays).
            if let sequence = event.zoneSequence {
                _ = try await CheckpointStore.advance(worker: worker, zoneKey: event.zoneKey, to: sequence, eventID: event.id, in: transaction)
            }
        }
        Self.deadLetters(worker).increment()
        logger.error("event set aside as a dead letter", metadata: ["event": "\(event.id)", "zone": "\(event.zoneKey)", "reason": "\(reason)"])
    }

    /// Applies one event under a savepoint; a permanent failure becomes a dead letter in the same transaction.
    static func isolated(
        _ event: EventEnvelope, message: DeadLetterMessage? = nil, projection: any Projection, in transaction: Transaction, logger: Logger
    ) async throws {
        guard let error = try await transaction.isolating({ try await projection.apply(event, in: transaction, logger: logger) }) else { return }
        let reason = PostgresStore.describe(error)
        try await DeadLetterStore.record(worker: projection.name, event: event, message: message, reason: reason, in: transaction)
        deadLetters(projection.name).increment()
        logger.error("event set aside as a dead letter", metadata: ["event": "\(event.id)", "zone": "\(event.zoneKey)", "reason": "\(reason)"])
    }

    static func deadLetters(_ worker: String) -> Counter {
        Counter(label: "stratus_worker_dead_letters_total", dimensions: [("worker", worker)])
    }

    /// Applies a batch of events in one transaction, with the same once-per-sequence rule as
    /// `apply(_:logger:)`. Returns how many events took effect (gap fills included). Any failure
    /// rolls the whole batch back; the caller then applies the events one by one.
    public func apply(batch events: [EventEnvelope], logger: Logger) async throws -> Int {
        let projection = projection
        let worker = projection.name
        // Each zone's checkpoint moves to the zone's last event in the batch first, in zone order
        // (two transactions of the worker never wait for each other's rows in opposite orders); the
        // statement says where each was, and the effects follow in the same transaction.
        var newest: [ZoneKey: EventEnvelope] = [:]
        for event in events {
            guard let sequence = event.zoneSequence else { continue }
            if sequence > newest[event.zoneKey]?.zoneSequence ?? 0 { newest[event.zoneKey] = event }
        }
        let moves = newest.sorted { $0.key.rawValue < $1.key.rawValue }
        return try await ApplyTracing.span(worker, events) { try await store.serializable(logger: logger) { transaction -> Int in
            var positions: [ZoneKey: Int64] = [:]
            for (zoneKey, event) in moves {
                positions[zoneKey] = try await CheckpointStore.advance(
                    worker: worker, zoneKey: zoneKey, to: event.zoneSequence!, eventID: event.id, in: transaction)
            }
            // What takes effect, in order (gap fills before the event that revealed them), handed to
            // the projection at once.
            var effective: [EventEnvelope] = []
            for event in events {
                guard let sequence = event.zoneSequence else {
                    effective.append(event)
                    continue
                }
                var last = positions[event.zoneKey] ?? 0
                if sequence <= last { continue }
                if sequence > last + 1 {
                    let missing = try await EventLog.events(zoneKey: event.zoneKey, sequences: (last + 1)...(sequence - 1), in: transaction)
                    guard missing.count == Int(sequence - last - 1) else {
                        throw EventDecodingError(reason: "zone \(event.zoneKey) is missing sequences \(last + 1)..<\(sequence) in the event log")
                    }
                    effective += missing
                }
                effective.append(event)
                last = sequence
                positions[event.zoneKey] = last
            }
            try await projection.apply(effective, in: transaction, logger: logger)
            return effective.count
        } }
    }

    /// Forgets the projection's state and checkpoints in one transaction.
    public func reset(logger: Logger) async throws {
        let projection = projection
        try await store.serializable(logger: logger) { transaction in
            try await projection.reset(in: transaction, logger: logger)
            try await CheckpointStore.reset(worker: projection.name, in: transaction)
        }
    }
}
