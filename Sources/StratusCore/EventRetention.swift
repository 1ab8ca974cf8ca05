/// The event log's retention (docs/event-pipeline.md, "Retention"): the log is partitioned by ranges
/// of event ids, and a pass drops whole partitions that every reader has passed and that are older
/// than the window, and creates the partitions the next ids will need. What a pass does is decided
/// here, from what it read under the log's lock; the store only reads and carries it out.
public enum EventRetention {
    /// The smallest and largest partition size a configuration may name, in event ids.
    public static let partitionEventsRange: ClosedRange<Int64> = 1_000...100_000_000
    /// The most partitions a pass keeps created ahead of the next id.
    public static let aheadRange: ClosedRange<Int> = 1...16
    /// The longest window a configuration may name: ten years, in seconds.
    public static let maxWindowSeconds: Int64 = 315_360_000

    /// What a pass is told to keep.
    public struct Settings: Sendable, Equatable {
        /// Events younger than this many milliseconds are kept whatever their readers.
        public var windowMilliseconds: Int64
        /// The ids each new partition spans.
        public var partitionEvents: Int64
        /// How many partitions of `partitionEvents` ids past the next id exist after a pass.
        public var ahead: Int

        public init(windowMilliseconds: Int64, partitionEvents: Int64 = 1_000_000, ahead: Int = 2) {
            self.windowMilliseconds = windowMilliseconds
            self.partitionEvents = partitionEvents
            self.ahead = ahead
        }
    }

    /// One partition of the log as read.
    public struct Partition: Sendable, Equatable {
        /// Its table's name.
        public var name: String
        /// Its first id (nil: from the lowest possible) and the id past its last (nil: the default
        /// partition, which holds any id no range partition does).
        public var lower: Int64?
        public var upper: Int64?
        /// Its highest id and that event's time (milliseconds since 1970); nil when it is empty.
        public var newestID: Int64?
        public var newestCreatedAt: Int64?

        public init(name: String, lower: Int64?, upper: Int64?, newestID: Int64?, newestCreatedAt: Int64?) {
            self.name = name
            self.lower = lower
            self.upper = upper
            self.newestID = newestID
            self.newestCreatedAt = newestCreatedAt
        }

        /// Whether it is the default partition.
        public var isDefault: Bool { upper == nil }
    }

    /// What a pass read, with the log locked against writers (so every id drawn is committed or gone).
    public struct Reading: Sendable, Equatable {
        /// The log's partitions.
        public var partitions: [Partition]
        /// The lowest id some reader still needs: the relay's first unpublished event, or the first
        /// event of a zone that some worker's checkpoint has not passed; nil when none does.
        public var frontier: Int64?
        /// The id the log's sequence gives next.
        public var nextID: Int64
        /// The database's clock, milliseconds since 1970.
        public var now: Int64

        public init(partitions: [Partition], frontier: Int64?, nextID: Int64, now: Int64) {
            self.partitions = partitions
            self.frontier = frontier
            self.nextID = nextID
            self.now = now
        }
    }

    /// A partition to create: the ids `lower..<upper`.
    public struct NewPartition: Sendable, Equatable {
        public var lower: Int64
        public var upper: Int64

        public init(lower: Int64, upper: Int64) {
            self.lower = lower
            self.upper = upper
        }

        /// Its table's name: the log's name and its first id.
        public var name: String { "events_\(lower)" }
    }

    /// What a pass does.
    public struct Plan: Sendable, Equatable {
        /// Partitions dropped, lowest first.
        public var drop: [String] = []
        /// Whether the default partition is emptied (every event in it is below the retained tail).
        public var truncateDefault = false
        /// Partitions created, lowest first.
        public var create: [NewPartition] = []
        /// Every event below this id is gone after the pass (nil: the pass drops nothing).
        public var prunedBelow: Int64?
        /// Whether the pass removes any event (a partition it drops or empties held one): until one
        /// does, the log still holds its beginning.
        public var removesEvents = false

        public init(drop: [String] = [], truncateDefault: Bool = false, create: [NewPartition] = [], prunedBelow: Int64? = nil) {
            self.drop = drop
            self.truncateDefault = truncateDefault
            self.create = create
            self.prunedBelow = prunedBelow
        }
    }

    /// Decides a pass. Range partitions are dropped from the lowest up, each only when it is closed
    /// (no id it spans can still be drawn), every reader has passed all of it, and its newest event
    /// is older than the window; the first that may not be dropped stops the walk, so what is kept
    /// is always a contiguous tail of the log. The default partition is emptied when all of its
    /// events lie below that tail. Partitions are then created after the highest one (and after any
    /// id drawn already) until `ahead` partitions lie past the next id.
    public static func plan(_ reading: Reading, settings: Settings) -> Plan {
        var plan = Plan()
        let cutoff = reading.now - max(0, settings.windowMilliseconds)
        let passed = reading.frontier ?? Int64.max
        func old(_ partition: Partition) -> Bool { partition.newestCreatedAt.map { $0 < cutoff } ?? true }
        let ranges = reading.partitions.filter { !$0.isDefault }.sorted { ($0.lower ?? Int64.min) < ($1.lower ?? Int64.min) }
        for partition in ranges {
            guard let upper = partition.upper, upper <= reading.nextID, upper <= passed, old(partition) else { break }
            plan.drop.append(partition.name)
            plan.prunedBelow = upper
            if partition.newestID != nil { plan.removesEvents = true }
        }
        let fallback = reading.partitions.first(where: \.isDefault)
        if let fallback, let newest = fallback.newestID, let below = plan.prunedBelow, newest < below, old(fallback) {
            plan.truncateDefault = true
            plan.removesEvents = true
        }
        let size = max(1, settings.partitionEvents)
        // Past the highest partition, past any id the default partition caught, and past every id
        // drawn (under the log's lock each is committed, or gone, so none can still arrive).
        var start = max(ranges.compactMap(\.upper).max() ?? reading.nextID, reading.nextID)
        if let newest = fallback?.newestID, !plan.truncateDefault { start = max(start, newest + 1) }
        let target = reading.nextID + size * Int64(max(1, settings.ahead))
        while start < target {
            plan.create.append(NewPartition(lower: start, upper: start + size))
            start += size
        }
        return plan
    }
}
