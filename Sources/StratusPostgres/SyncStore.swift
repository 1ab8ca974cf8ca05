import Foundation
import Logging
import PostgresNIO
import StratusConnections
import StratusCore

extension PostgresQuery.StringInterpolation {
    /// The condition and order of a sync page's part from `record_tombstones`: the zone's deletions
    /// after `version` of records that existed at it, in `(version, upper]` and below `below`, of the
    /// record types asked for, in `order`, at most `limit + 1` — limited in the index's own order.
    fileprivate mutating func appendInterpolation(
        tombstonesOf zoneName: String, of database: DatabaseID, after version: Int64, upTo upper: Int64, below: Int64, types: [String]?,
        order: String, limit: Int
    ) {
        appendInterpolation(zone: zoneName, of: database)
        appendLiteral(" AND deleted_version > ")
        appendInterpolation(version)
        appendLiteral(" AND deleted_version <= ")
        appendInterpolation(upper)
        appendLiteral(" AND deleted_version < ")
        appendInterpolation(below)
        appendLiteral(" AND created_version <= ")
        appendInterpolation(version)
        appendLiteral(" AND (")
        appendInterpolation(types)
        appendLiteral("::text[] IS NULL OR record_type = ANY(")
        appendInterpolation(types)
        appendLiteral("::text[])) ORDER BY deleted_version \(order) LIMIT ")
        appendInterpolation(limit + 1)
    }
}

extension PostgresQuery.StringInterpolation {
    /// A `records` row as CloudKit's record dictionary — byte for byte what
    /// `RecordWire.write(stored:…)` copies from the row's stored text (`SyncStore.storedText`), and
    /// as JSON what `RecordWire.dictionary`, the wire form's owner, writes of the record
    /// (`RecordWireAgreementTests`): the row's `wire_head` (migration 0031: every member up to
    /// `recordType`, written when the row was) with each reference given its zone
    /// (`StoredReferenceZone`), then `share`, `shortGUID` and `zoneID`, with `zoneID` (a bound
    /// value) for the zone id dictionary's text. For a row without an asset field; the references
    /// are searched for only in a row that holds one (`holds_reference`, migration 0051).
    fileprivate mutating func appendInterpolation(wireOf zoneID: String) {
        appendLiteral("((CASE WHEN holds_reference THEN replace(wire_head, '\(StoredReferenceZone.opening)', '\(StoredReferenceZone.zonedPrefix)' || ")
        appendInterpolation(zoneID)
        appendLiteral("::text || '\(StoredReferenceZone.zonedSuffix)') ELSE wire_head END)")
        appendLiteral(" || coalesce('\"share\":{\"recordName\":' || json_string(share) || ',\"zoneID\":' || ")
        appendInterpolation(zoneID)
        appendLiteral("::text || '},', '') || coalesce('\"shortGUID\":' || json_string(short_guid) || ',', '') || '\"zoneID\":' || ")
        appendInterpolation(zoneID)
        appendLiteral("::text || '}')")
    }
}

extension PostgresQuery.StringInterpolation {
    /// The common table expressions of a sync page (`zone`, the zone's row; `page`, the page's
    /// candidates in page order with each one's fields' size, running byte total, position and —
    /// for a live record that is neither a share nor holds an asset field — its text, written as
    /// CloudKit's record dictionary; null for the others, which the general page answers). Each
    /// table's part is limited in its own index order: as one union under one limit, PostgreSQL
    /// sorted every record of the zone after the token, rendering each, when its statistics said
    /// the table was empty.
    fileprivate mutating func appendInterpolation(pageOf c: SyncStore.PageCandidates) {
        let live = RecordExpirySQL.live
        appendLiteral("zone AS (SELECT incarnation, change_counter, tombstone_horizon FROM zones WHERE ")
        appendInterpolation(zone: c.zone.zoneName, of: c.database)
        // One window for the running total and the position: PostgreSQL then copies the
        // candidates, texts and all, through one window node instead of two (about a quarter of
        // the statement's time; docs/benchmarks.md).
        appendLiteral(" AND NOT deleted), page AS (SELECT version, record_name, record_type, deleted, bytes, text,")
        appendLiteral(" sum(bytes) OVER w AS running, row_number() OVER w AS position FROM (")
        // The records' part: the size, wire form and flags written with the row (migrations 0031
        // and 0051).
        appendLiteral("(SELECT version, record_name, record_type, NOT \(live) AS deleted,")
        appendLiteral(" (CASE WHEN \(live) THEN fields_bytes ELSE 0 END) AS bytes,")
        appendLiteral(" (CASE WHEN NOT \(live) OR record_type = ")
        appendInterpolation(ShareRecord.recordType)
        appendLiteral(" OR holds_asset THEN NULL ELSE ")
        appendInterpolation(wireOf: c.wire)
        appendLiteral(" END) AS text FROM records WHERE ")
        appendInterpolation(zone: c.zone.zoneName, of: c.database)
        appendLiteral(" AND version > ")
        appendInterpolation(c.version)
        appendLiteral(" AND version <= ")
        appendInterpolation(c.upper)
        appendLiteral(" AND version < ")
        appendInterpolation(c.below)
        appendLiteral(" AND (")
        appendInterpolation(c.types)
        appendLiteral("::text[] IS NULL OR record_type = ANY(")
        appendInterpolation(c.types)
        appendLiteral("::text[])) AND (\(live) OR created_version <= ")
        appendInterpolation(c.version)
        appendLiteral(") ORDER BY version \(c.order) LIMIT ")
        appendInterpolation(c.limit + 1)
        // The tombstones' part.
        appendLiteral(") UNION ALL (SELECT deleted_version, record_name, record_type, true, 0::int8, NULL::text FROM record_tombstones WHERE ")
        appendInterpolation(tombstonesOf: c.zone.zoneName, of: c.database, after: c.version, upTo: c.upper, below: c.below, types: c.types, order: c.order, limit: c.limit)
        appendLiteral(") ORDER BY 1 \(c.order) LIMIT ")
        appendInterpolation(c.limit + 1)
        appendLiteral(") AS candidates WINDOW w AS (ORDER BY version \(c.order) ROWS UNBOUNDED PRECEDING))")
    }
}

/// Change tracking: what changed in a zone since a version, and which zones of a database changed.
public struct SyncStore: Sendable {
    let store: PostgresStore
    /// The next page of a forward sync, read while the client reads the last one; nil: none.
    public let readAhead: SyncReadAhead?

    /// Creates the sync store; with `readAhead`, forward syncs of the owner's zones are read a page
    /// ahead.
    public init(store: PostgresStore, readAhead: SyncReadAhead? = nil) {
        self.store = store
        self.readAhead = readAhead
    }

    /// One change of the general page: a record as it is now, or a deleted record's name. (A page
    /// written by PostgreSQL holds its changes as text instead: `ZoneChanges.wire`.)
    public enum Change: Sendable, Hashable {
        case saved(Record)
        case deleted(recordName: String, recordType: String)

        /// The record name either way.
        public var recordName: String {
            switch self {
            case .saved(let record): record.recordName
            case .deleted(let name, _): name
            }
        }
    }

    /// How a page is cut from a zone's history.
    public enum Mode: Sendable, Hashable {
        /// Oldest change first; each record once, at its latest version.
        case forward
        /// Newest change first within `(since, upTo]`, continuing below `below`; each record once.
        case reverse(upTo: Int64?, below: Int64?)
        /// Every change in the order it happened, intermediate versions included: any prefix the
        /// client has applied is a state the zone really had.
        case snapshot
    }

    /// A page of a zone's changes.
    public struct ZoneChanges: Sendable {
        /// The changes, oldest first.
        public var changes: [Change]
        /// The zone incarnation the page belongs to.
        public var incarnation: UUID
        /// Everything up to this version has been delivered once the client applied this page.
        public var version: Int64
        /// More changes wait beyond `version`.
        public var moreComing: Bool
        /// For a reverse sync that is not finished: the bounds to continue with.
        public var reverse: (upTo: Int64, below: Int64)?
        /// Bytes of the fields of the page's records, as stored JSON.
        public var bytes: Int = 0
        /// The zone's tombstone horizon the page was read at, for its token (`ZoneSyncToken.horizon`).
        public var horizon: Int64 = 0
        /// The page's entries written by PostgreSQL as the answer's `records` members, joined
        /// with commas (`changes` is then empty): for a page asked for with a `wire` zone id whose
        /// records all have their wire form. The bytes as PostgreSQL sent them: copied into the
        /// answer as they are, never made a `String` (checked and copied again) on the way.
        public var wire: ByteBuffer?
        /// `wire` as text (tests).
        package var wireText: String? { wire.map { String(buffer: $0) } }
        /// The zone's row as the page's one statement read it (nil: read in a transaction of
        /// several): what has to be unchanged for a page read ahead to be served.
        var observed: SyncReadAhead.ZoneState?
    }

    /// The changes of a custom zone after `version` (0 = from the start), at most `limit`, in version
    /// order. A delete is reported only when the record existed at `version` (a record created and
    /// deleted since then was never seen by the client). A record that has expired counts as deleted
    /// at its last version, by the same rule, until `stratus-gc` deletes it. Fails with CHANGE_TOKEN_EXPIRED when the
    /// zone is another incarnation or its tombstones were collected past `version`.
    ///
    /// `maxBytes` bounds the page by the size of its records' fields too (forward and reverse): the
    /// page ends before the record that would pass it — but for its first record when
    /// `firstAlwaysFits`, so that a record larger than the budget still reaches the client — and a
    /// page where nothing fits holds no change, keeps the client's position and says more are coming.
    ///
    /// A page is built one of two ways. `wire`, the zone id dictionary's text, asks for the page
    /// written by PostgreSQL in one statement (`ZoneChanges.wire`: each record as CloudKit's record
    /// dictionary) — for an answer with every field and numbers as numbers, in the owner's zone,
    /// forward or reverse, when no record on it is a share or holds an asset field. Every other
    /// page is the general one: a snapshot transaction that reads the records (`Change.saved`),
    /// which the API writes with `RecordWire.dictionary`.
    public func changes(
        zone: ZoneID, in database: DatabaseID, incarnation expected: UUID?, since version: Int64, horizon known: Int64 = 0, limit: Int,
        recordTypes: Set<String>? = nil, mode: Mode = .forward, maxBytes: Int = .max, firstAlwaysFits: Bool = true, sharedWith user: String? = nil,
        wire: String? = nil, logger: Logger
    ) async throws -> ZoneChanges {
        guard !zone.isDefaultZone else {
            throw StratusError(.badRequest, "Change tracking is available in custom zones only, not in \(ZoneID.defaultZoneName): read its records with records/query (or records/lookup by name), or keep records a device syncs in a custom zone (zones/modify) and fetch them with records/changes")
        }
        // The common case — the owner's own zone, forward or reverse, answered in wire form — is
        // one statement (one snapshot, one round trip); the rest takes the general page.
        func question(_ incarnation: UUID) -> SyncReadAhead.Question {
            SyncReadAhead.Question(
                database: database, zoneName: zone.zoneName, incarnation: incarnation, since: version, known: known, limit: limit, recordTypes: recordTypes,
                maxBytes: maxBytes, firstAlwaysFits: firstAlwaysFits, wire: wire)
        }
        if user == nil, mode == .forward, let readAhead, let expected {
            let question = question(expected)
            if let read = await readAhead.take(question), readAhead.serves(read, current: try await zoneState(zone, in: database, logger: logger)) {
                readAhead.readNext(after: read.page, of: question, read: nextPage(zone: zone, logger: logger))
                return read.page
            }
        }
        var page: ZoneChanges?
        if user == nil, mode != .snapshot, let wire {
            page = try await wirePage(
                zone: zone, in: database, incarnation: expected, since: version, known: known, limit: limit, recordTypes: recordTypes, mode: mode,
                maxBytes: maxBytes, firstAlwaysFits: firstAlwaysFits, wire: wire, logger: logger)
        }
        let answer: ZoneChanges
        if let page {
            answer = page
        } else {
            answer = try await generalPage(
                zone: zone, in: database, incarnation: expected, since: version, known: known, limit: limit, recordTypes: recordTypes, mode: mode,
                maxBytes: maxBytes, firstAlwaysFits: firstAlwaysFits, sharedWith: user, logger: logger)
        }
        if user == nil, mode == .forward, let readAhead {
            readAhead.readNext(after: answer, of: question(answer.incarnation), read: nextPage(zone: zone, logger: logger))
        }
        return answer
    }

    /// The general page: the zone's row, the page's versions and its records read in one snapshot;
    /// in the shared database only what the caller reaches; snapshot mode from the event log.
    private func generalPage(
        zone: ZoneID, in database: DatabaseID, incarnation expected: UUID?, since version: Int64, known: Int64, limit: Int, recordTypes: Set<String>?,
        mode: Mode, maxBytes: Int, firstAlwaysFits: Bool, sharedWith user: String?, logger: Logger
    ) async throws -> ZoneChanges {
        try await store.snapshot(logger: logger) { transaction in
            let connection = transaction.connection
            // The shared database: the caller must reach the zone now, and sees only what they reach.
            var shared: SharedZone?
            if let user {
                shared = try await ShareStore.sharedZone(
                    zone.zoneName, owner: database.owner, user: user, container: database.container, environment: database.environment, on: transaction)
                if case .snapshot = mode { throw StratusError(.badRequest, "snapshot is not available in the shared database") }
            }
            let zoneRows = try await connection.query("""
                SELECT incarnation, change_counter, tombstone_horizon FROM zones
                WHERE container = \(database.container) AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue)
                  AND owner = \(database.owner) AND zone_name = \(zone.zoneName) AND NOT deleted
                """, logger: logger)
            var state: (UUID, Int64, Int64)?
            for try await row in zoneRows.decode((UUID, Int64, Int64).self) { state = row }
            let (incarnation, counter, horizon) = try Self.check(zone: zone, state: state, expected: expected, version: version, known: known)
            let types = recordTypes.map { Array($0) }
            switch mode {
            case .snapshot:
                var page = try await Self.history(zone: zone, database: database, incarnation: incarnation, since: version, counter: counter,
                                                  limit: limit, types: types, in: transaction)
                page.horizon = horizon
                return page
            case .forward, .reverse:
                break
            }
            var upper = counter
            var below = Int64.max
            var descending = false
            if case .reverse(let upTo, let continueBelow) = mode {
                descending = true
                upper = min(upTo ?? counter, counter)
                below = continueBelow ?? Int64.max
            }
            let order = descending ? "DESC" : "ASC"
            let rows = try await connection.query("""
                (SELECT version, record_name, record_type, NOT \(unescaped: RecordExpirySQL.live),
                        (CASE WHEN \(unescaped: RecordExpirySQL.live) THEN fields_bytes ELSE 0 END) FROM records
                 WHERE \(zone: zone.zoneName, of: database) AND version > \(version) AND version <= \(upper) AND version < \(below)
                   AND (\(types)::text[] IS NULL OR record_type = ANY(\(types)::text[]))
                   AND (\(unescaped: RecordExpirySQL.live) OR created_version <= \(version))
                 ORDER BY version \(unescaped: order) LIMIT \(limit + 1))
                UNION ALL
                (SELECT deleted_version, record_name, record_type, true, 0::int8 FROM record_tombstones
                 WHERE \(tombstonesOf: zone.zoneName, of: database, after: version, upTo: upper, below: below, types: types, order: order, limit: limit))
                ORDER BY 1 \(unescaped: order)
                LIMIT \(limit + 1)
                """, logger: logger)
            var entries: [(version: Int64, name: String, type: String, deleted: Bool, bytes: Int64)] = []
            for try await row in rows.decode((Int64, String, String, Bool, Int64).self) { entries.append(row) }
            let fit = Self.fit(entries.map(\.bytes), limit: limit, maxBytes: maxBytes, firstAlwaysFits: firstAlwaysFits)
            entries.removeLast(entries.count - fit.count)
            let ending = Ending(incarnation: incarnation, since: version, counter: counter, reverse: descending ? (upper, below) : nil,
                                moreComing: fit.moreComing, lastVersion: entries.last?.version, bytes: fit.bytes, horizon: horizon)
            if entries.isEmpty { return ending.page([]) }
            let savedNames = entries.filter { !$0.deleted }.map(\.name)
            // By exact name: canonically equivalent names are distinct records.
            var records: [ExactName: Record] = [:]
            if !savedNames.isEmpty {
                let recordRows = try await connection.query("""
                    SELECT \(unescaped: RecordRow.columns) FROM records
                    WHERE container = \(database.container) AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue)
                      AND owner = \(database.owner) AND zone_name = \(zone.zoneName) AND record_name = ANY(\(savedNames))
                    """, logger: logger)
                let decoded = try await ShareTables.attachStates(
                    try await RecordRow.decode(recordRows), zone: zone.zoneName, of: database, on: connection, logger: logger)
                for record in decoded { records[ExactName(record.recordName)] = record }
            }
            var reached: Set<ExactName>?
            if let shared { reached = try await ShareStore.reachable(savedNames, in: shared, on: transaction) }
            let changes: [Change] = entries.compactMap { entry in
                if entry.deleted { return .deleted(recordName: entry.name, recordType: entry.type) }
                guard let record = records[ExactName(entry.name)] else { return nil }
                if let reached, !reached.contains(ExactName(entry.name)) {
                    // Outside the caller's hierarchies: a record that may have been inside at their
                    // token (moved out since) is reported deleted; a newer one is not reported.
                    return version > 0 && (record.createdVersion ?? 0) <= version ? .deleted(recordName: entry.name, recordType: entry.type) : nil
                }
                return .saved(record)
            }
            var page = ending.page(changes)
            // The owner's zone: what a page read ahead is served against (`SyncReadAhead`). Not a
            // page holding a share, whose state lives in other tables.
            if user == nil, !changes.contains(where: { if case .saved(let record) = $0 { ShareRecord.isShare(record.recordType) } else { false } }) {
                page.observed = SyncReadAhead.ZoneState((incarnation, counter, horizon))
            }
            return page
        }
    }

    /// The zone's row now (nil: no zone, or a deleted one): what a page read ahead is checked against.
    private func zoneState(_ zone: ZoneID, in database: DatabaseID, logger: Logger) async throws -> SyncReadAhead.ZoneState? {
        let statements = store.statements
        return try await store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT incarnation, change_counter, tombstone_horizon FROM zones WHERE \(zone: zone.zoneName, of: database) AND NOT deleted
                """, preparedIn: statements, logger: logger)
            for try await row in rows.decode((UUID, Int64, Int64).self) { return SyncReadAhead.ZoneState(row) }
            return nil
        }
    }

    /// How a page is read ahead: as `changes` reads the question's page (the page written by
    /// PostgreSQL or the general one), nil when it cannot (an error).
    private func nextPage(zone: ZoneID, logger: Logger) -> @Sendable (SyncReadAhead.Question) async -> (ZoneChanges, SyncReadAhead.ZoneState)? {
        { question in
            var page: ZoneChanges?
            if let wire = question.wire {
                page = try? await wirePage(
                    zone: zone, in: question.database, incarnation: question.incarnation, since: question.since, known: question.known, limit: question.limit,
                    recordTypes: question.recordTypes, mode: .forward, maxBytes: question.maxBytes, firstAlwaysFits: question.firstAlwaysFits,
                    wire: wire, logger: logger)
            }
            if page == nil {
                page = try? await generalPage(
                    zone: zone, in: question.database, incarnation: question.incarnation, since: question.since, known: question.known, limit: question.limit,
                    recordTypes: question.recordTypes, mode: .forward, maxBytes: question.maxBytes, firstAlwaysFits: question.firstAlwaysFits,
                    sharedWith: nil, logger: logger)
            }
            guard let page, let observed = page.observed else { return nil }
            return (page, observed)
        }
    }

    /// Whether a token at `version` of incarnation `expected` (nil: no token) may continue in the
    /// zone whose row says `state` (incarnation, change counter, tombstone horizon; nil: no zone).
    /// `known` is the horizon the token was issued at: a token below the horizon continues while
    /// the horizon is still that (its page was read after those tombstones were collected).
    private static func check(zone: ZoneID, state: (UUID, Int64, Int64)?, expected: UUID?, version: Int64, known: Int64) throws -> (UUID, Int64, Int64) {
        guard let (incarnation, counter, horizon) = state else {
            throw StratusError(.zoneNotFound, "Zone '\(ClientText.excerpt(zone.zoneName))' does not exist")
        }
        if let expected, expected != incarnation {
            throw StratusError(.changeTokenExpired, "The zone was deleted and created again since this sync token; discard the local copy and sync from the start")
        }
        if version > 0, version < horizon, known < horizon {
            throw StratusError(.changeTokenExpired, "This sync token is older than the zone's retained history; discard the local copy and sync from the start")
        }
        guard version <= counter else {
            throw StratusError(.changeTokenExpired, "This sync token is ahead of the zone; discard the local copy and sync from the start")
        }
        return (incarnation, counter, horizon)
    }

    /// A record row of `records` as its stored JSON (the members `Record`'s coding names), in the
    /// form PostgreSQL writes `jsonb` (`"name": value`, members after ", "): what `StoredRecordText`
    /// cuts and `EventCoding.decodeRecord` reads. Written out member by member: building a `jsonb`
    /// object per record and printing it took 1.8 of a 200-record page's 2.4 ms; `fields` is
    /// printed as stored and every text column through `to_json`, which escapes as `jsonb` does.
    static let storedText = """
        ('{"recordName": ' || to_json(record_name)::text || ', "recordType": ' || to_json(record_type)::text
         || ', "fields": ' || fields::text || ', "changeTag": ' || to_json(change_tag)::text
         || ', "created": {"timestamp": ' || created_at::text || ', "userRecordName": ' || to_json(created_by)::text
         || ', "deviceID": ' || coalesce(to_json(created_device)::text, 'null')
         || '}, "modified": {"timestamp": ' || modified_at::text || ', "userRecordName": ' || to_json(modified_by)::text
         || ', "deviceID": ' || coalesce(to_json(modified_device)::text, 'null')
         || '}, "parent": ' || coalesce(to_json(parent)::text, 'null') || ', "share": ' || coalesce(to_json(share)::text, 'null')
         || ', "shortGUID": ' || coalesce(to_json(short_guid)::text, 'null') || ', "version": ' || coalesce(version::text, 'null')
         || ', "createdVersion": ' || coalesce(created_version::text, 'null')
         || ', "expirationDate": ' || coalesce(expires_at::text, 'null') || '}')
        """

    /// What a one-statement page reads (`appendInterpolation(pageOf:)`).
    struct PageCandidates {
        var zone: ZoneID
        var database: DatabaseID
        var version: Int64
        /// The highest version read (a reverse sync's own bound; every version of the zone is at
        /// most its change counter in any one snapshot, so the counter bounds nothing here).
        var upper: Int64
        var below: Int64
        var types: [String]?
        var order: String
        var limit: Int
        var wire: String
    }

    /// A forward or reverse page of the owner's zone written by PostgreSQL in one statement: the
    /// zone's row, the page's versions (records and tombstones, as the general page reads them) and
    /// its entries, each record as CloudKit's record dictionary (`appendInterpolation(wireOf:)`),
    /// joined by commas (`ZoneChanges.wire`). Nil when a record on the page has no wire form (a
    /// share, an asset field): the general page answers it.
    private func wirePage(
        zone: ZoneID, in database: DatabaseID, incarnation expected: UUID?, since version: Int64, known: Int64, limit: Int,
        recordTypes: Set<String>?, mode: Mode, maxBytes: Int, firstAlwaysFits: Bool, wire: String, logger: Logger
    ) async throws -> ZoneChanges? {
        var upTo: Int64?
        var continueBelow: Int64?
        if case .reverse(let reverseUpTo, let reverseBelow) = mode {
            upTo = reverseUpTo
            continueBelow = reverseBelow
        }
        let descending = mode != .forward
        let below = continueBelow ?? Int64.max
        let candidates = PageCandidates(
            zone: zone, database: database, version: version, upper: upTo ?? Int64.max, below: below, types: recordTypes.map { Array($0) },
            order: descending ? "DESC" : "ASC", limit: limit, wire: wire)
        guard let joined = try await joinedPage(candidates, maxBytes: maxBytes, firstAlwaysFits: firstAlwaysFits, logger: logger) else { return nil }
        let (incarnation, counter, horizon) = try Self.check(zone: zone, state: joined.state, expected: expected, version: version, known: known)
        let ending = Ending(incarnation: incarnation, since: version, counter: counter, reverse: descending ? (min(upTo ?? counter, counter), below) : nil,
                            moreComing: joined.moreComing, lastVersion: joined.lastVersion, bytes: joined.bytes, horizon: horizon)
        var page = ending.page([])
        page.wire = joined.text
        page.observed = joined.state.map(SyncReadAhead.ZoneState.init)
        return page
    }

    /// A page as one row (`wirePage`): the zone's row (nil: no zone), what the page
    /// holds, and its entries written by PostgreSQL and joined with commas. Nil when a record the
    /// page holds has no wire form (a share, an asset field): the general page answers it.
    private func joinedPage(
        _ candidates: PageCandidates, maxBytes: Int, firstAlwaysFits: Bool, logger: Logger
    ) async throws -> (state: (UUID, Int64, Int64)?, moreComing: Bool, lastVersion: Int64?, bytes: Int, text: ByteBuffer)? {
        let statements = store.statements
        return try await store.withConnection { connection in
            // `kept`: the page ends before the first candidate past `limit` or past the byte budget
            // (but for the first, when it always fits) — `fit`'s rule, which the running total makes
            // a prefix. A deletion is written as the API writes one.
            //
            // The aggregates read `kept` in page order without sorting it: a scan of a materialized
            // common table expression returns its rows in the order they were stored, which is the
            // window's (page) order. An `ORDER BY position` in `string_agg` copied and sorted every
            // entry's text again, about a tenth of the statement (docs/benchmarks.md, "Sync pages:
            // the record's flags written with it, the entries joined without sorting…");
            // `SyncPageWireTests` checks the entries' order.
            let last = candidates.order == "DESC" ? "min" : "max"
            let rows = try await connection.query("""
                WITH \(pageOf: candidates), kept AS (
                    SELECT * FROM page
                    WHERE position <= \(candidates.limit) AND (running <= \(Int64(clamping: maxBytes)) OR (position = 1 AND \(firstAlwaysFits)))
                )
                SELECT zone.incarnation, zone.change_counter, zone.tombstone_horizon,
                       (SELECT count(*) FROM page), s.count, s.bytes, s.last_version, s.whole, s.text
                FROM zone LEFT JOIN (
                    SELECT count(*) AS count, coalesce(sum(bytes), 0)::int8 AS bytes,
                           \(unescaped: last)(version) AS last_version,
                           coalesce(bool_and(deleted OR text IS NOT NULL), true) AS whole,
                           string_agg(CASE WHEN deleted THEN '{"deleted":true,"recordName":' || to_json(record_name)::text || '}' ELSE text END, ',') AS text
                    FROM kept
                ) AS s ON true
                """, preparedIn: statements, logger: logger)
            for try await row in rows {
                var cells = row.makeIterator()
                let incarnation = try cells.decodeNext(UUID?.self), counter = try cells.decodeNext(Int64?.self), horizon = try cells.decodeNext(Int64?.self)
                let candidates = try cells.decodeNext(Int64?.self) ?? 0, count = try cells.decodeNext(Int64?.self) ?? 0
                let bytes = try cells.decodeNext(Int64?.self) ?? 0, lastVersion = try cells.decodeNext(Int64?.self)
                let whole = try cells.decodeNext(Bool?.self) ?? true, text = try cells.decodeNext(ByteBuffer?.self)
                guard let incarnation, let counter, let horizon else { return (nil, false, nil, 0, ByteBuffer()) }
                guard whole else { return nil }
                return ((incarnation, counter, horizon), candidates > count, lastVersion, Int(bytes), text ?? ByteBuffer())
            }
            return (nil, false, nil, 0, ByteBuffer())
        }
    }

    /// How many of a page's candidates the page holds — their fields' sizes in page order, one
    /// more than `limit` when more wait — with whether more are coming and the bytes it holds: it
    /// ends before the record that would pass `maxBytes` (but for its first when `firstAlwaysFits`).
    static func fit(_ sizes: [Int64], limit: Int, maxBytes: Int, firstAlwaysFits: Bool) -> (count: Int, moreComing: Bool, bytes: Int) {
        var count = min(sizes.count, limit)
        var moreComing = sizes.count > limit
        var bytes = 0
        for index in 0..<count {
            if index > 0 || !firstAlwaysFits, bytes + Int(sizes[index]) > maxBytes {
                count = index
                moreComing = true
                break
            }
            bytes += Int(sizes[index])
        }
        return (count, moreComing, bytes)
    }

    /// Where a forward or reverse page leaves the client.
    struct Ending {
        var incarnation: UUID
        /// The client's version before the page.
        var since: Int64
        var counter: Int64
        /// A reverse page's bounds: what it reads up to, and below which it continues.
        var reverse: (upTo: Int64, below: Int64)?
        var moreComing: Bool
        /// The version of the page's last entry; nil when it holds none.
        var lastVersion: Int64?
        var bytes: Int
        /// The zone's tombstone horizon the page was read at.
        var horizon: Int64 = 0

        func page(_ changes: [Change]) -> ZoneChanges {
            var page = cut(changes)
            page.horizon = horizon
            return page
        }

        private func cut(_ changes: [Change]) -> ZoneChanges {
            guard let lastVersion else {
                if moreComing {
                    // Nothing fits: the client keeps its position and asks again.
                    return ZoneChanges(changes: [], incarnation: incarnation, version: since, moreComing: true, reverse: reverse)
                }
                return ZoneChanges(changes: [], incarnation: incarnation, version: reverse?.upTo ?? counter, moreComing: false, reverse: nil)
            }
            if let reverse {
                // Until the reverse range is exhausted the client keeps its old position; then it holds everything up to `upper`.
                if moreComing {
                    return ZoneChanges(changes: changes, incarnation: incarnation, version: since, moreComing: true, reverse: (reverse.upTo, lastVersion), bytes: bytes)
                }
                return ZoneChanges(changes: changes, incarnation: incarnation, version: reverse.upTo, moreComing: false, reverse: nil, bytes: bytes)
            }
            return ZoneChanges(changes: changes, incarnation: incarnation, version: moreComing ? lastVersion : counter, moreComing: moreComing, reverse: nil, bytes: bytes)
        }
    }

    /// Snapshot mode: the zone's record events after `version`, in order, from the event log. A
    /// token whose next event retention has removed from the log (docs/event-pipeline.md,
    /// "Retention") is expired: the history after it is no longer whole.
    private static func history(
        zone: ZoneID, database: DatabaseID, incarnation: UUID, since version: Int64, counter: Int64, limit: Int, types: [String]?,
        in transaction: Transaction
    ) async throws -> ZoneChanges {
        let key = ZoneKey(database: database, zoneName: zone.zoneName).rawValue
        if version < counter {
            let next = try await transaction.connection.query("""
                SELECT EXISTS (SELECT 1 FROM events WHERE zone_key = \(key) AND zone_sequence = \(version + 1))
                """, logger: transaction.logger)
            for try await present in next.decode(Bool.self) where !present {
                if version == 0 {
                    throw StratusError(.badRequest, "The event log no longer holds this zone's first changes (retention); sync without snapshot")
                }
                throw StratusError(.changeTokenExpired, "The event log no longer holds the changes after this sync token; discard the local copy and sync from the start")
            }
        }
        let rows = try await transaction.connection.query("""
            SELECT zone_sequence, type, payload::text FROM events
            WHERE zone_key = \(key) AND zone_sequence > \(version) AND zone_sequence <= \(counter)
              AND type IN ('record.saved', 'record.deleted') AND payload->>'zoneIncarnation' = \(incarnation.uuidString)
              AND (\(types)::text[] IS NULL OR coalesce(payload->'record'->>'recordType', payload->>'recordType') = ANY(\(types)::text[]))
            ORDER BY zone_sequence
            LIMIT \(limit + 1)
            """, logger: transaction.logger)
        var entries: [(Int64, String, String)] = []
        for try await row in rows.decode((Int64, String, String).self) { entries.append(row) }
        let moreComing = entries.count > limit
        if moreComing { entries.removeLast(entries.count - limit) }
        // An expired record is gone from every state the client is handed (as of the page's clock).
        let clock = try await transaction.connection.query("SELECT \(unescaped: RecordExpirySQL.now)", logger: transaction.logger)
        var now = Int64.max
        for try await value in clock.decode(Int64.self) { now = value }
        var changes: [Change] = []
        for (_, type, payload) in entries {
            if type == RecordSaved.eventType.rawValue {
                let record = try EventCoding.decoder.decode(RecordSaved.self, from: Data(payload.utf8)).record
                changes.append(record.isExpired(at: now) ? .deleted(recordName: record.recordName, recordType: record.recordType) : .saved(record))
            } else {
                let deleted = try EventCoding.decoder.decode(RecordDeleted.self, from: Data(payload.utf8))
                changes.append(.deleted(recordName: deleted.recordName, recordType: deleted.recordType))
            }
        }
        return ZoneChanges(changes: changes, incarnation: incarnation, version: moreComing ? entries.last!.0 : counter, moreComing: moreComing, reverse: nil)
    }

    /// A zone as database change tracking sees it.
    public struct ZoneState: Sendable, Hashable {
        public var zoneName: String
        public var incarnation: UUID
        public var changeCounter: Int64
        public var deleted: Bool

        /// The compact form a database token of the earlier form remembers.
        public var fingerprint: String { deleted ? "deleted" : "\(incarnation.uuidString.prefix(8)):\(changeCounter)" }
    }

    /// Every custom zone of a database (deleted ones too: their rows are kept), by name, in one
    /// snapshot; with that snapshot, which a sync from a token of the earlier form hands out once it
    /// has answered every zone that differs.
    public func zoneStates(in database: DatabaseID, logger: Logger) async throws -> (states: [ZoneState], reading: ChangeReading) {
        try await store.snapshot(logger: logger) { transaction in
            let reading = try await ChangeReading.read(on: transaction)
            let rows = try await transaction.connection.query("""
                SELECT zone_name, incarnation, change_counter, deleted FROM zones
                WHERE container = \(database.container) AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue)
                  AND owner = \(database.owner)
                ORDER BY zone_name
                """, logger: transaction.logger)
            return (try await Self.states(rows), reading)
        }
    }

    private static func states(_ rows: PostgresRowSequence) async throws -> [ZoneState] {
        var states: [ZoneState] = []
        for try await (name, incarnation, counter, deleted) in rows.decode((String, UUID, Int64, Bool).self) {
            states.append(ZoneState(zoneName: name, incarnation: incarnation, changeCounter: counter, deleted: deleted))
        }
        return states
    }

    /// A page of the database's changes since `token` (nil: a first sync): its zones whose rows
    /// were changed by a transaction the token's snapshot does not see, by name, at most `limit`;
    /// and the token after them (`DatabaseChangeWindow`). One snapshot: the page is read in the
    /// snapshot the token after it names.
    ///
    /// The zones are read by the primary key (`changed_xid` has no index, so the update every
    /// record write makes to its zone row stays HOT); the scan stops once `limit` + 1 have matched.
    /// A `limit` of 0 reads no zone (a database whose zones are not the caller's): the token alone.
    public func zoneChanges(
        in database: DatabaseID, since token: DatabaseChangeToken?, limit: Int, logger: Logger
    ) async throws -> (zones: [ZoneState], moreComing: Bool, token: DatabaseChangeToken) {
        let asked = DatabaseChangeWindow.asked(token)
        let since = asked.since
        // One statement, one round trip: the page and the snapshot it was read in, which names
        // the token after it. (A `limit` of 0 reads no zone: the snapshot alone.)
        let statements = store.statements
        let (reading, states) = try await store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT reading.snapshot_text, reading.system_identifier, page.zone_name, page.incarnation, page.change_counter, page.deleted
                FROM (SELECT \(unescaped: ChangeReading.columns)) AS reading (snapshot_text, system_identifier)
                LEFT JOIN LATERAL (
                    SELECT zone_name, incarnation, change_counter, deleted FROM zones
                    WHERE container = \(database.container) AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue)
                      AND owner = \(database.owner)
                      AND changed_after(changed_xid, \(String(since.xmin))::xid8, \(String(since.xmax))::xid8, \(since.inProgress.map(String.init))::xid8[])
                      AND NOT (deleted AND \(asked.leavesOutDeleted))
                      AND (\(asked.after?.first)::text IS NULL OR zone_name > \(asked.after?.first))
                    ORDER BY zone_name
                    LIMIT \(limit > 0 ? Int64(limit) + 1 : 0)
                ) AS page ON true
                ORDER BY page.zone_name
                """, preparedIn: statements, logger: logger)
            var reading: ChangeReading?
            var states: [ZoneState] = []
            for try await (snapshot, system, name, incarnation, counter, deleted) in rows.decode((String, String, String?, UUID?, Int64?, Bool?).self) {
                if reading == nil { reading = try ChangeReading.parse(snapshot: snapshot, system: system) }
                if let name, let incarnation, let counter, let deleted {
                    states.append(ZoneState(zoneName: name, incarnation: incarnation, changeCounter: counter, deleted: deleted))
                }
            }
            guard let reading else { throw ChangeReading.unreadable }
            return (reading, states)
        }
        let window = try reading.window(token, database: database)
        let page = Array(states.prefix(limit))
        let moreComing = states.count > limit
        return (page, moreComing, window.token(last: page.last.map { [$0.zoneName] }, moreComing: moreComing))
    }

    /// Zones holding tombstones deleted before `olderThan` (the GC worker's work list).
    public func zonesWithTombstones(olderThan: Date, limit: Int, logger: Logger) async throws -> [(DatabaseID, ZoneID)] {
        try await store.withConnection { connection in
            // Crosses owners: the collector's sweep of every owner's due rows (each node sweeps its own, when sharded).
            let rows = try await connection.query("""
                SELECT DISTINCT container, environment, scope, owner, zone_name FROM record_tombstones
                WHERE deleted_at < \(olderThan) LIMIT \(limit)
                """, logger: logger)
            var zones: [(DatabaseID, ZoneID)] = []
            for try await (container, environment, scope, owner, zoneName) in rows.decode((String, String, String, String, String).self) {
                guard let environment = Environment(rawValue: environment), let scope = DatabaseScope(rawValue: scope) else { continue }
                zones.append((DatabaseID(container: container, environment: environment, scope: scope, owner: owner), ZoneID(zoneName: zoneName, ownerRecordName: owner)))
            }
            return zones
        }
    }

    /// Collects a zone's tombstones deleted before `olderThan` and raises its horizon past them, so
    /// tokens from before the horizon must reset. Returns how many were collected. (The GC worker
    /// runs this on a schedule.)
    @discardableResult
    public func collectTombstones(zone: ZoneID, in database: DatabaseID, olderThan: Date, logger: Logger) async throws -> Int {
        try await store.locked(logger: logger, locks: [ZoneKey(database: database, zoneName: zone.zoneName).rawValue]) { transaction in
            let rows = try await transaction.connection.query("""
                WITH collected AS (
                    DELETE FROM record_tombstones
                    WHERE container = \(database.container) AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue)
                      AND owner = \(database.owner) AND zone_name = \(zone.zoneName) AND deleted_at < \(olderThan)
                    RETURNING deleted_version)
                SELECT count(*)::bigint, coalesce(max(deleted_version), 0)::bigint FROM collected
                """, logger: transaction.logger)
            var result: (Int64, Int64) = (0, 0)
            for try await row in rows.decode((Int64, Int64).self) { result = row }
            if result.0 > 0 {
                try await transaction.connection.query("""
                    UPDATE zones SET tombstone_horizon = greatest(tombstone_horizon, \(result.1))
                    WHERE container = \(database.container) AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue)
                      AND owner = \(database.owner) AND zone_name = \(zone.zoneName)
                    """, logger: transaction.logger)
            }
            return Int(result.0)
        }
    }
}
