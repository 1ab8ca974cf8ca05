import Foundation
import Logging
import PostgresNIO
import StratusCore

extension RecordStore {
    /// Deletes those of `recordNames` that have expired, through the write path of `records/modify`'s
    /// deletes: the zone's lock, one transaction, a `record.deleted` event and a tombstone each (and
    /// each DELETE_SELF referrer's), so every device's sync and every subscription learns of it.
    ///
    /// Whether a record has expired is decided inside the transaction, on the locked row and the
    /// database's clock: a record saved again since with a later expiration, or none, is left alone,
    /// whatever the caller believed. Returns the names of the expired records deleted (not their
    /// cascade). A VALIDATE reference does not keep an expired record: its lifetime was set when it
    /// was saved.
    public func expire(_ recordNames: [String], zone: ZoneID, in database: DatabaseID, causation: Causation, logger: Logger) async throws -> [String] {
        guard !recordNames.isEmpty else { return [] }
        let context = WriteContext(database: database, zone: zone, causation: causation, deviceID: nil, limits: Limits())
        let expire: @Sendable (Transaction) async throws -> [String] = { transaction in
            var writer = try await ZoneWriter.open(context, in: transaction)
            let expired = try await writer.expire(recordNames, in: transaction)
            try await writer.close(in: transaction)
            return expired
        }
        if zone.isDefaultZone {
            // As a delete through the API: each record's lock, and SERIALIZABLE for the cascade's reads.
            return try await store.serializable(logger: logger, locks: recordNames.map { context.zoneKey.rawValue + "/" + $0 }, expire)
        }
        return try await store.locked(logger: logger, locks: [context.zoneKey.rawValue], expire)
    }
}

extension ZoneWriter {
    /// Deletes those of `recordNames` that have expired by the database's clock; returns their names.
    mutating func expire(_ recordNames: [String], in transaction: Transaction) async throws -> [String] {
        let rows = try await transaction.connection.query("SELECT \(unescaped: RecordExpirySQL.now)", logger: transaction.logger)
        var now = Int64.min
        for try await value in rows.decode(Int64.self) { now = value }
        let unknown = Set(recordNames.map(ExactName.init)).filter { known[$0] == nil }.map(\.name)
        if !unknown.isEmpty { try await lock(unknown, in: transaction) }
        let expired = recordNames.compactMap { known[ExactName($0)] ?? nil }.filter { $0.isExpired(at: now) }
        try await deleteAsCreators(expired, in: transaction)
        return expired.map(\.recordName)
    }

    /// Deletes records that this transaction has locked (expired ones, or a reset's), each as its
    /// creator would (in the public database a delete cascades only to the deleter's own records).
    mutating func deleteAsCreators(_ records: [Record], in transaction: Transaction) async throws {
        var creators: [String] = []
        var byCreator: [String: [Record]] = [:]
        for record in records {
            if byCreator[record.created.userRecordName] == nil { creators.append(record.created.userRecordName) }
            byCreator[record.created.userRecordName, default: []].append(record)
        }
        for creator in creators {
            // A record an earlier group's cascade already deleted is not deleted twice.
            let live = (byCreator[creator] ?? []).filter { if case .some(.some) = known[ExactName($0.recordName)] { true } else { false } }
            guard !live.isEmpty else { continue }
            actingUser = creator
            defer { actingUser = nil }
            _ = try await delete(live, checksValidation: false, in: transaction)
        }
    }
}
