import XCTest
@testable import StratusCore

/// What a retention pass of the event log drops, empties and creates (`EventRetention.plan`).
final class EventRetentionTests: XCTestCase {
    let hour: Int64 = 3_600_000
    let now: Int64 = 1_800_000_000_000

    func partition(_ lower: Int64?, _ upper: Int64?, newest: Int64?, age: Int64? = nil) -> EventRetention.Partition {
        let name = upper == nil ? "events_default" : "events_\(lower ?? 0)"
        return .init(name: name, lower: lower, upper: upper, newestID: newest, newestCreatedAt: newest == nil ? nil : now - (age ?? 0))
    }

    /// Three closed partitions, all old: the frontier decides how far the drop goes, lowest first.
    func testDropsOnlyPartitionsEveryReaderHasPassed() {
        let partitions = [partition(nil, 100, newest: 99, age: 10 * hour), partition(100, 200, newest: 199, age: 9 * hour),
                          partition(200, 300, newest: 299, age: 8 * hour), partition(300, 400, newest: 350, age: 0),
                          partition(nil, nil, newest: nil)]
        let settings = EventRetention.Settings(windowMilliseconds: hour, partitionEvents: 100, ahead: 1)
        // A reader still needs event 150: only the first partition goes.
        var plan = EventRetention.plan(.init(partitions: partitions, frontier: 150, nextID: 351, now: now), settings: settings)
        XCTAssertEqual(plan.drop, ["events_0"])
        XCTAssertEqual(plan.prunedBelow, 100)
        XCTAssertTrue(plan.removesEvents)
        // The frontier exactly at a partition's end: that partition goes too.
        plan = EventRetention.plan(.init(partitions: partitions, frontier: 200, nextID: 351, now: now), settings: settings)
        XCTAssertEqual(plan.drop, ["events_0", "events_100"])
        // Nobody needs anything: every closed old partition, never the one the next id falls in.
        plan = EventRetention.plan(.init(partitions: partitions, frontier: nil, nextID: 351, now: now), settings: settings)
        XCTAssertEqual(plan.drop, ["events_0", "events_100", "events_200"])
        XCTAssertEqual(plan.prunedBelow, 300)
        // A reader at the very first event: nothing goes.
        plan = EventRetention.plan(.init(partitions: partitions, frontier: 1, nextID: 351, now: now), settings: settings)
        XCTAssertEqual(plan.drop, [])
        XCTAssertNil(plan.prunedBelow)
    }

    /// The window keeps young partitions whatever their readers, and a young partition stops the
    /// walk: what is kept is a contiguous tail.
    func testTheWindowKeepsYoungEventsAndTheTailContiguous() {
        let partitions = [partition(nil, 100, newest: 99, age: 10 * hour), partition(100, 200, newest: 199, age: 30 * 60_000),
                          partition(200, 300, newest: 299, age: 10 * hour), partition(300, 400, newest: 301, age: 0)]
        let plan = EventRetention.plan(
            .init(partitions: partitions, frontier: nil, nextID: 302, now: now),
            settings: .init(windowMilliseconds: hour, partitionEvents: 100, ahead: 1))
        XCTAssertEqual(plan.drop, ["events_0"], "the second is inside the window, so the third stays behind it")
        XCTAssertEqual(plan.prunedBelow, 100)
    }

    /// A partition whose ids can still be drawn is never dropped, even empty and unread.
    func testAnOpenPartitionIsNeverDropped() {
        let partitions = [partition(1, 100, newest: nil), partition(100, 200, newest: nil)]
        let plan = EventRetention.plan(
            .init(partitions: partitions, frontier: nil, nextID: 50, now: now), settings: .init(windowMilliseconds: 0, partitionEvents: 100, ahead: 1))
        XCTAssertEqual(plan.drop, [])
        XCTAssertFalse(plan.removesEvents)
        XCTAssertEqual(plan.create, [], "ids up to 50 + 100 are already covered")
        // Closed and empty (a new database's first partitions): dropped, and no event was removed.
        let empty = EventRetention.plan(
            .init(partitions: partitions, frontier: nil, nextID: 250, now: now), settings: .init(windowMilliseconds: 0, partitionEvents: 100, ahead: 1))
        XCTAssertEqual(empty.drop, ["events_1", "events_100"])
        XCTAssertFalse(empty.removesEvents)
    }

    /// Partitions are created after the highest until `ahead` of them lie past the next id.
    func testCreatesThePartitionsAhead() {
        let partitions = [partition(nil, 100, newest: 90), partition(nil, nil, newest: nil)]
        let plan = EventRetention.plan(
            .init(partitions: partitions, frontier: 1, nextID: 91, now: now), settings: .init(windowMilliseconds: hour, partitionEvents: 50, ahead: 2))
        XCTAssertEqual(plan.create, [.init(lower: 100, upper: 150), .init(lower: 150, upper: 200)])
        XCTAssertEqual(plan.create.first?.name, "events_100")
    }

    /// Ids the default partition caught (the passes fell behind) are never covered by a new
    /// partition; the default partition is emptied only once all of it lies below the kept tail.
    func testTheDefaultPartition() {
        let settings = EventRetention.Settings(windowMilliseconds: 0, partitionEvents: 100, ahead: 1)
        let behind = [partition(nil, 100, newest: 99, age: hour), partition(nil, nil, newest: 140, age: hour)]
        var plan = EventRetention.plan(.init(partitions: behind, frontier: 120, nextID: 141, now: now), settings: settings)
        XCTAssertEqual(plan.create, [.init(lower: 141, upper: 241)], "the new partition starts past the default partition's events")
        XCTAssertEqual(plan.drop, ["events_0"])
        XCTAssertFalse(plan.truncateDefault, "its events are above the kept tail's start")
        // Later: the default partition's events are below a dropped range's end.
        let later = [partition(nil, 100, newest: 99, age: hour), partition(141, 241, newest: 240, age: hour),
                     partition(241, 341, newest: 250, age: 0), partition(nil, nil, newest: 140, age: hour)]
        plan = EventRetention.plan(.init(partitions: later, frontier: nil, nextID: 251, now: now), settings: settings)
        XCTAssertEqual(plan.drop, ["events_0", "events_141"])
        XCTAssertTrue(plan.truncateDefault)
        XCTAssertEqual(plan.prunedBelow, 241)
    }
}
