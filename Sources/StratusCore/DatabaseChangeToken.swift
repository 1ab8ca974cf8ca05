import Crypto
import Foundation

/// Which transactions a reader of PostgreSQL saw as committed: a snapshot (`pg_current_snapshot()`),
/// bounded to `maxInProgress` transactions in progress so that it always takes the same bytes.
///
/// Every row a database's change history reports carries `changed_xid`, the transaction that last
/// wrote it (migration 0032). A row was changed after a snapshot iff the snapshot does not see its
/// transaction: the transaction id is at or past `xmax`, or was in progress (`inProgress`). That is
/// exact whatever order the writers commit in: nothing is missed and nothing repeated.
public struct ChangeSnapshot: Sendable, Hashable {
    /// At most this many transactions in progress are kept; a snapshot with more is lowered (see
    /// `init(xmin:xmax:inProgress:)`).
    public static let maxInProgress = 16
    /// Bytes of the fixed encoding: xmin and xmax (8 bytes each), the count of transactions in
    /// progress (1), and `maxInProgress` offsets from xmin (4 bytes each).
    static let encodedBytes = 8 + 8 + 1 + 4 * maxInProgress
    /// The longest `pg_snapshot` text read (its in-progress list names at most the server's connections).
    static let maxTextBytes = 1 << 20

    /// Every transaction below this one has ended.
    public private(set) var xmin: UInt64
    /// No transaction from this one on had ended.
    public private(set) var xmax: UInt64
    /// Transactions in [xmin, xmax) still in progress, ascending.
    public private(set) var inProgress: [UInt64]

    /// The snapshot that sees nothing: what a first sync starts from.
    public static let nothing = ChangeSnapshot(xmin: 0, xmax: 0, inProgress: [])

    /// A snapshot, bounded: the transactions in progress outside [xmin, xmax) are dropped, and when
    /// more than `maxInProgress` remain (or one lies 2³² or more past xmin), xmax is lowered to the
    /// first that cannot be kept. The lowered snapshot sees fewer transactions than the reader did,
    /// never more: a change it leaves out is answered again by the next sync, never missed.
    public init(xmin: UInt64, xmax: UInt64, inProgress: [UInt64]) {
        let xmax = max(xmin, xmax)
        let listed = Array(Set(inProgress.filter { $0 >= xmin && $0 < xmax })).sorted()
        var kept: [UInt64] = []
        var bound = xmax
        for xid in listed {
            guard kept.count < Self.maxInProgress, xid - xmin <= UInt64(UInt32.max) else {
                bound = xid
                break
            }
            kept.append(xid)
        }
        self.xmin = xmin
        self.xmax = bound
        self.inProgress = kept
    }

    /// Reads PostgreSQL's text form `xmin:xmax:xip,…` (nil when it is not one): the snapshot,
    /// bounded, and the xmax as read (the transaction id the cluster has reached), which bounding
    /// may have lowered.
    public static func read(_ text: String) -> (snapshot: ChangeSnapshot, reached: UInt64)? {
        guard text.utf8.count <= Self.maxTextBytes else { return nil }
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 3, let xmin = UInt64(parts[0]), let xmax = UInt64(parts[1]), xmin <= xmax else { return nil }
        var listed: [UInt64] = []
        if !parts[2].isEmpty {
            for item in parts[2].split(separator: ",", omittingEmptySubsequences: false) {
                guard let xid = UInt64(item) else { return nil }
                listed.append(xid)
            }
        }
        return (ChangeSnapshot(xmin: xmin, xmax: xmax, inProgress: listed), xmax)
    }

    /// Whether the transaction `xid` had ended when the snapshot was taken (a row it wrote is in
    /// what the reader saw).
    public func sees(_ xid: UInt64) -> Bool {
        if xid < xmin { return true }
        if xid >= xmax { return false }
        return !inProgress.contains(xid)
    }

    /// The fixed-width bytes (`encodedBytes`, whatever the numbers).
    var bytes: [UInt8] {
        var out = Self.bigEndian(xmin) + Self.bigEndian(xmax)
        out.append(UInt8(inProgress.count))
        for index in 0..<Self.maxInProgress {
            let offset = index < inProgress.count ? UInt32(inProgress[index] - xmin) : 0
            out += (0..<4).map { UInt8(truncatingIfNeeded: offset >> (8 * (3 - $0))) }
        }
        return out
    }

    /// Reads `bytes`'s form; nil when it is not one this type writes.
    init?(bytes: ArraySlice<UInt8>) {
        guard bytes.count == Self.encodedBytes else { return nil }
        let start = bytes.startIndex
        let xmin = Self.number(bytes[start..<start + 8])
        let xmax = Self.number(bytes[start + 8..<start + 16])
        let count = Int(bytes[start + 16])
        guard xmin <= xmax, count <= Self.maxInProgress else { return nil }
        var listed: [UInt64] = []
        for index in 0..<Self.maxInProgress {
            let at = start + 17 + 4 * index
            let offset = Self.number(bytes[at..<at + 4])
            if index >= count {
                guard offset == 0 else { return nil }
                continue
            }
            let (xid, overflow) = xmin.addingReportingOverflow(offset)
            guard !overflow else { return nil }
            listed.append(xid)
        }
        self.init(xmin: xmin, xmax: xmax, inProgress: listed)
        // Only the canonical form: every listed transaction kept, in order, inside the bounds.
        guard inProgress == listed, self.xmax == xmax else { return nil }
    }

    static func bigEndian(_ value: UInt64) -> [UInt8] { (0..<8).map { UInt8(truncatingIfNeeded: value >> (8 * (7 - $0))) } }

    static func number(_ bytes: ArraySlice<UInt8>) -> UInt64 { bytes.reduce(0) { $0 << 8 | UInt64($1) } }
}

/// A database sync token (`zones/changes`, `changes/database`): the snapshot in which the client's
/// last answer was read, as a zone token is a position in the zone's history. Its size does not
/// depend on the number of zones: a fixed number of bytes, plus, while a sync pages, the name of
/// the last zone answered (at most 255 bytes, and its owner's in the shared database).
public struct DatabaseChangeToken: Sendable, Hashable, Codable {
    /// The PostgreSQL cluster the snapshot is of (`binding` of its system identifier): transaction
    /// ids of another cluster mean nothing here.
    public var cluster: UInt64
    /// The database the token belongs to (`binding` of `DatabaseID.key`).
    public var database: UInt64
    /// The client holds every change this snapshot sees. While a sync pages: the snapshot the sync
    /// answers the changes since.
    public var snapshot: ChangeSnapshot
    /// While a sync pages: where it stands.
    public var paging: Paging?

    /// A sync with more to come.
    public struct Paging: Sendable, Hashable {
        /// The token the client holds once the last page is out: the snapshot of the sync's first page.
        public var through: ChangeSnapshot
        /// The key of the last zone answered (its name; in the shared database its owner and name):
        /// the next page answers the zones past it.
        public var after: [String]
        /// A first sync: zones deleted or no longer shared stay left out, as the client never knew them.
        public var leavesOutDeleted: Bool

        /// Creates a paging state.
        public init(through: ChangeSnapshot, after: [String], leavesOutDeleted: Bool) {
            self.through = through
            self.after = after
            self.leavesOutDeleted = leavesOutDeleted
        }
    }

    /// Creates a token value.
    public init(cluster: UInt64, database: UInt64, snapshot: ChangeSnapshot, paging: Paging? = nil) {
        self.cluster = cluster
        self.database = database
        self.snapshot = snapshot
        self.paging = paging
    }

    /// What a token is bound to, as 8 bytes: the start of SHA-256 of `text` (a cluster's system
    /// identifier, or a database's key).
    public static func binding(_ text: String) -> UInt64 {
        ChangeSnapshot.number(ArraySlice(Array(SHA256.hash(data: Data(text.utf8))).prefix(8)))
    }

    enum CodingKeys: String, CodingKey {
        case state = "s", after = "a"
    }

    /// The bytes, as base64url (JSON escapes no character of it, so its length is fixed): a form
    /// (0: a position, 1: paging, 2: a first sync paging), the cluster, the database, the snapshot
    /// and, while paging, the snapshot it ends at.
    public func encode(to encoder: any Encoder) throws {
        var out: [UInt8] = [paging.map { $0.leavesOutDeleted ? 2 : 1 } ?? 0]
        out += ChangeSnapshot.bigEndian(cluster) + ChangeSnapshot.bigEndian(database) + snapshot.bytes
        if let paging { out += paging.through.bytes }
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(Base64URL.encode(Data(out)), forKey: .state)
        try container.encodeIfPresent(paging?.after, forKey: .after)
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let text = try container.decode(String.self, forKey: .state)
        let after = try container.decodeIfPresent([String].self, forKey: .after)
        let fixed = 1 + 16 + ChangeSnapshot.encodedBytes
        guard text.utf8.count <= 4 * (fixed + ChangeSnapshot.encodedBytes), let data = Base64URL.decode(text),
              let form = data.first, form <= 2, data.count == fixed + (form == 0 ? 0 : ChangeSnapshot.encodedBytes),
              (form == 0) == (after == nil), (after?.count ?? 1) <= 2,
              after?.allSatisfy({ !$0.isEmpty && $0.utf8.count <= 255 }) ?? true
        else { throw DecodingError.dataCorruptedError(forKey: .state, in: container, debugDescription: "not a database change token") }
        let bytes = Array(data)
        guard let snapshot = ChangeSnapshot(bytes: bytes[17..<fixed]) else {
            throw DecodingError.dataCorruptedError(forKey: .state, in: container, debugDescription: "not a snapshot")
        }
        cluster = ChangeSnapshot.number(bytes[1..<9])
        database = ChangeSnapshot.number(bytes[9..<17])
        self.snapshot = snapshot
        if let after {
            guard let through = ChangeSnapshot(bytes: bytes[fixed...]) else {
                throw DecodingError.dataCorruptedError(forKey: .state, in: container, debugDescription: "not a snapshot")
            }
            paging = Paging(through: through, after: after, leavesOutDeleted: form == 2)
        } else {
            paging = nil
        }
    }
}

/// What one database sync call answers, decided from its token and the snapshot the call reads in:
/// the rows whose `changed_xid` the `since` snapshot does not see, past `after` in key order, at
/// most a page; and the token after the page.
///
/// Pages are in key order (the zone's name; in the shared database its owner and name), and the
/// token after the last page is the snapshot of the first: a zone that changes while the sync pages
/// is answered on a later page if its key lies ahead, or else by the next sync (its change is not
/// seen by the first page's snapshot), so nothing is missed whatever commits meanwhile.
public struct DatabaseChangeWindow: Sendable, Hashable {
    /// The changes answered are those this snapshot does not see.
    public var since: ChangeSnapshot
    /// Only keys past this one (nil: from the first).
    public var after: [String]?
    /// The snapshot the client holds once the last page is out.
    public var through: ChangeSnapshot
    /// A first sync: leave out zones deleted or no longer shared.
    public var leavesOutDeleted: Bool
    /// The token's bindings.
    public var cluster: UInt64
    public var database: UInt64

    /// The window of a call from `token` (nil: a first sync) read in `current` on `cluster`, for
    /// `database` (their `DatabaseChangeToken.binding`s), the cluster having `reached` that
    /// transaction id (the snapshot's xmax as read). A token of another cluster or database, or one
    /// that has seen transactions this cluster has not reached (a cluster restored from an earlier
    /// backup), can no longer be honoured.
    public static func open(
        _ token: DatabaseChangeToken?, cluster: UInt64, database: UInt64, current: ChangeSnapshot, reached: UInt64
    ) throws(StratusError) -> DatabaseChangeWindow {
        guard let token else {
            return DatabaseChangeWindow(since: .nothing, after: nil, through: current, leavesOutDeleted: true, cluster: cluster, database: database)
        }
        guard token.database == database else {
            throw StratusError(.changeTokenExpired, "This sync token belongs to another database; discard the local copy and sync from the start")
        }
        guard token.cluster == cluster else {
            throw StratusError(.changeTokenExpired, "This sync token was issued by another database server; discard the local copy and sync from the start")
        }
        let through = token.paging?.through ?? current
        guard token.snapshot.xmax <= reached, through.xmax <= reached else {
            throw StratusError(.changeTokenExpired, "This sync token is ahead of the database's change history; discard the local copy and sync from the start")
        }
        return DatabaseChangeWindow(
            since: token.snapshot, after: token.paging?.after, through: through, leavesOutDeleted: token.paging?.leavesOutDeleted ?? false,
            cluster: cluster, database: database)
    }

    /// What a call from `token` (nil: a first sync) asks for, known before the snapshot the call
    /// reads in: the changes `since` does not see, past `after`, leaving deleted zones out on a
    /// first sync. The same as the window `open` gives, so a call may read its page and its
    /// snapshot in one statement and check the token against the snapshot after.
    public static func asked(_ token: DatabaseChangeToken?) -> (since: ChangeSnapshot, after: [String]?, leavesOutDeleted: Bool) {
        guard let token else { return (.nothing, nil, true) }
        return (token.snapshot, token.paging?.after, token.paging?.leavesOutDeleted ?? false)
    }

    /// The token after a page whose last key is `last`: the rest of the window while more is
    /// coming, else the snapshot the window ends at.
    public func token(last: [String]?, moreComing: Bool) -> DatabaseChangeToken {
        guard moreComing, let last else { return DatabaseChangeToken(cluster: cluster, database: database, snapshot: through) }
        return DatabaseChangeToken(
            cluster: cluster, database: database, snapshot: since,
            paging: DatabaseChangeToken.Paging(through: through, after: last, leavesOutDeleted: leavesOutDeleted))
    }

    /// The first token of a sync that answered an earlier token's changes in `current` (the zone
    /// by zone comparison, when nothing more was coming).
    public static func position(cluster: UInt64, database: UInt64, current: ChangeSnapshot) -> DatabaseChangeToken {
        DatabaseChangeToken(cluster: cluster, database: database, snapshot: current)
    }
}
