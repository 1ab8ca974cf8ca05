import Foundation
import Metrics
import StratusCore
import Synchronization

/// The next page of a forward sync, read while the client reads the page before it.
///
/// A device that syncs a zone asks for page after page, each with the token of the one before, and
/// reads each page before it asks for the next: PostgreSQL's part of the next page then runs in
/// that time, on another core, instead of after it (docs/benchmarks.md, "The next sync page read
/// ahead").
///
/// A page read ahead answers only the question it was read for — the same database, zone,
/// incarnation, version and horizon of its token, limit, record types, byte budget and answer form — and is served only
/// when nothing in the zone changed since it was read: the zone's incarnation, change counter and
/// tombstone horizon, read again (one statement on the zone's primary key) when the page is asked
/// for, must be those the page was read with. Every write to a zone raises its change counter in
/// the write's transaction, and collecting tombstones raises the horizon, so a change committed
/// before the question, by any process, is always seen. Time alone changes a page too, through
/// records that expire: a page is served at most `window` after it began to be read, so a record
/// that expires in between may appear live once more at most that long after its expiration — the
/// page the client would have had by asking that much earlier.
///
/// Bounded for hostile clients: at most one read per question, at most `capacity` pages read or
/// being read and `maxBytes` of them kept; a page that finds no room is not read ahead. A page not
/// asked for within `window` is dropped at the next read ahead. Only the owner's zones, forward
/// syncs, and pages holding no share (whose state lives in other tables) are read ahead.
///
/// The readings run as jobs of a `TaskOwner`, a service of the process, so graceful shutdown waits
/// for them (or cancels them at its deadline); once it refuses jobs nothing more is read ahead.
public final class SyncReadAhead: Sendable {
    /// What a page answers.
    struct Question: Hashable, Sendable {
        var database: DatabaseID
        var zoneName: String
        var incarnation: UUID
        var since: Int64
        /// The horizon the question's token was issued at (`ZoneSyncToken.horizon`).
        var known: Int64
        var limit: Int
        var recordTypes: Set<String>?
        var maxBytes: Int
        var firstAlwaysFits: Bool
        var wire: String?
    }

    /// A zone's row as a page read it: what has to be unchanged for the page to still be its answer.
    struct ZoneState: Hashable, Sendable {
        var incarnation: UUID
        var counter: Int64
        var horizon: Int64

        /// The state of a zone's row as the sync statements read it: incarnation, change counter,
        /// tombstone horizon.
        init(_ row: (UUID, Int64, Int64)) {
            (incarnation, counter, horizon) = row
        }
    }

    /// A page read ahead, with the zone's state it was read at and when its reading began.
    struct Page: Sendable {
        var page: SyncStore.ZoneChanges
        var state: ZoneState
        var readAt: ContinuousClock.Instant
    }

    private enum Slot {
        case reading(id: UInt64, since: ContinuousClock.Instant, Reading)
        case read(Page, bytes: Int)
    }

    private struct State {
        var slots: [Question: Slot] = [:]
        var bytes = 0
        var nextID: UInt64 = 0
        var served = 0
        var discarded = 0
    }

    /// A page being read by a job of the owner: its result, for whoever takes the question meanwhile.
    final class Reading: Sendable {
        private enum Phase {
            case reading([CheckedContinuation<Page?, Never>])
            case ended(Page?)
        }

        private let phase = Mutex(Phase.reading([]))

        /// Hands the page read (nil: none) to those who wait for it.
        func end(_ page: Page?) {
            let waiting: [CheckedContinuation<Page?, Never>] = phase.withLock { phase in
                defer { phase = .ended(page) }
                if case .reading(let waiting) = phase { return waiting }
                return []
            }
            for continuation in waiting { continuation.resume(returning: page) }
        }

        /// The page once its reading has ended (nil: none).
        var value: Page? {
            get async {
                await withCheckedContinuation { continuation in
                    let ended: Page?? = phase.withLock { phase in
                        switch phase {
                        case .reading(let waiting):
                            phase = .reading(waiting + [continuation])
                            return nil
                        case .ended(let page):
                            return .some(page)
                        }
                    }
                    if let ended { continuation.resume(returning: ended) }
                }
            }
        }
    }

    /// The most pages read or being read at once.
    public let capacity: Int
    /// The most bytes of pages kept.
    public let maxBytes: Int
    /// How long after its reading began a page may be served.
    public let window: Duration
    /// Runs the readings.
    let owner: TaskOwner
    private let state = Mutex(State())

    /// Creates an empty read-ahead of at most `capacity` pages and `maxBytes` of their records,
    /// read by jobs of `owner` (which the process runs as a service).
    public init(capacity: Int, maxBytes: Int = 64 << 20, window: Duration = .seconds(1), owner: TaskOwner) {
        self.capacity = max(capacity, 0)
        self.maxBytes = maxBytes
        self.window = window
        self.owner = owner
    }

    /// Pages served, and pages read ahead but found changed or too old when asked for.
    public var outcomes: (served: Int, discarded: Int) { state.withLock { ($0.served, $0.discarded) } }

    /// Pages read or being read now.
    public var count: Int { state.withLock { $0.slots.count } }

    /// Takes the page read for `question`, waiting for its reading to end; nil when none was read.
    /// The caller checks that the zone is unchanged (`served(_:current:)`).
    func take(_ question: Question) async -> Page? {
        let slot: Slot? = state.withLock { state in
            guard let slot = state.slots.removeValue(forKey: question) else { return nil }
            if case .read(_, let bytes) = slot { state.bytes -= bytes }
            return slot
        }
        switch slot {
        case nil: return nil
        case .read(let page, _)?: return page
        case .reading(_, _, let reading)?: return await reading.value
        }
    }

    /// Whether `page` may answer now, the zone's row being `current` (nil: no zone); counted.
    func serves(_ page: Page, current: ZoneState?) -> Bool {
        let serves = current == page.state && ContinuousClock.now - page.readAt <= window
        state.withLock { serves ? ($0.served += 1) : ($0.discarded += 1) }
        (serves ? SyncReadAheadMetrics.served : SyncReadAheadMetrics.discarded).increment()
        return serves
    }

    /// Starts reading the page that follows `page` (the answer to `question`), if more are coming,
    /// it was read in one statement, and there is room.
    func readNext(after page: SyncStore.ZoneChanges, of question: Question, read: @escaping @Sendable (Question) async -> (SyncStore.ZoneChanges, ZoneState)?) {
        guard capacity > 0, page.moreComing, page.observed != nil, page.version > question.since else { return }
        var following = question
        following.incarnation = page.incarnation
        following.since = page.version
        following.known = page.horizon
        let next = following
        let now = ContinuousClock.now
        let reading = Reading()
        let id: UInt64? = state.withLock { state in
            makeRoom(&state, at: now)
            guard state.slots[next] == nil, state.slots.count < capacity else { return nil }
            state.nextID &+= 1
            state.slots[next] = .reading(id: state.nextID, since: now, reading)
            return state.nextID
        }
        guard let id else { return }
        let accepted = owner.submit { [self] in
            let result = await read(next).map { Page(page: $0.0, state: $0.1, readAt: now) }
            reading.end(keep(result, for: next, id: id))
        }
        // Shutting down: nothing more is read ahead (and whoever took the question meanwhile reads it).
        if !accepted {
            drop(next, id: id)
            reading.end(nil)
        }
    }

    /// Forgets the reading `id` of `question` if it is still the one waited for.
    private func drop(_ question: Question, id: UInt64) {
        state.withLock { state in
            if case .reading(let current, _, _)? = state.slots[question], current == id { state.slots[question] = nil }
        }
    }

    /// Keeps a page whose reading ended, if its question still waits for it and its bytes fit;
    /// the page for a caller who took the question while it was read, nil when it is not to be
    /// served.
    private func keep(_ page: Page?, for question: Question, id: UInt64) -> Page? {
        state.withLock { state in
            let bytes = page?.page.heldBytes ?? 0
            guard case .reading(let current, _, _)? = state.slots[question], current == id else {
                // Taken while it was read (or dropped as too slow): the caller who took it has it.
                return bytes <= maxBytes ? page : nil
            }
            guard let page, state.bytes + bytes <= maxBytes else {
                state.slots[question] = nil
                return nil
            }
            state.bytes += bytes
            state.slots[question] = .read(page, bytes: bytes)
            return page
        }
    }

    /// Waits for every page being read (tests: nothing runs on after them).
    func settle() async {
        let readings = state.withLock { state in
            state.slots.values.compactMap { slot -> Reading? in
                if case .reading(_, _, let reading) = slot { reading } else { nil }
            }
        }
        for reading in readings { _ = await reading.value }
    }

    /// Drops the pages too old to be served (and readings that have taken longer than that).
    private func makeRoom(_ state: inout State, at now: ContinuousClock.Instant) {
        guard !state.slots.isEmpty else { return }
        for (question, slot) in state.slots {
            switch slot {
            case .read(let page, let bytes) where now - page.readAt > window:
                state.slots[question] = nil
                state.bytes -= bytes
                state.discarded += 1
                SyncReadAheadMetrics.discarded.increment()
            case .reading(_, let since, _) where now - since > window:
                state.slots[question] = nil
            default:
                break
            }
        }
    }
}

extension SyncStore.ZoneChanges {
    /// About the memory the page holds: its records' texts.
    var heldBytes: Int {
        var bytes = (wire?.readableBytes ?? 0) + 64
        for change in changes {
            switch change {
            case .deleted(let name, let type): bytes += name.utf8.count + type.utf8.count
            case .saved(let record): bytes += record.recordName.utf8.count + 1024
            }
        }
        return bytes
    }
}

enum SyncReadAheadMetrics {
    static let served = Counter(label: "stratus_sync_read_ahead_pages_total", dimensions: [("outcome", "served")])
    static let discarded = Counter(label: "stratus_sync_read_ahead_pages_total", dimensions: [("outcome", "discarded")])
}
