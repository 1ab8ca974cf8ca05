import StratusConnections
import XCTest

/// The prepared-statement registry's bookkeeping: names, capacity, epochs.
final class StatementRegistryTests: XCTestCase {
    typealias Registry = StatementRegistry<[String]>

    func name(_ lookup: Registry.Lookup) -> String {
        switch lookup {
        case .named(let named): "named \(named.name)"
        case .unprepared: "unprepared"
        case .unknown: "unknown"
        }
    }

    func testATextIsNamedOnceWithTheTypesItWasFirstSeenWith() {
        var registry = Registry(capacity: 4, maxEpochs: 2)
        XCTAssertEqual(name(registry.lookup("SELECT 1")), "unknown")
        XCTAssertEqual(registry.register("SELECT 1", types: ["int8"])?.name, "stratus_0_0")
        XCTAssertEqual(registry.register("SELECT 2", types: [])?.name, "stratus_0_1")
        let again = registry.register("SELECT 1", types: ["text"])
        XCTAssertEqual(again?.name, "stratus_0_0", "one text, one name")
        XCTAssertEqual(again?.types, ["int8"], "the types it was first seen with")
        XCTAssertEqual(name(registry.lookup("SELECT 1")), "named stratus_0_0")
        XCTAssertEqual(registry.count, 2)
        XCTAssertEqual(registry.prepared, 2)
        XCTAssertEqual(registry.texts, ["SELECT 1", "SELECT 2"])
    }

    func testTextsBeyondTheCapacityRunUnpreparedForTheProcesssLifetime() {
        var registry = Registry(capacity: 2, maxEpochs: 8)
        XCTAssertNotNil(registry.register("a", types: []))
        XCTAssertNotNil(registry.register("b", types: []))
        XCTAssertNil(registry.register("c", types: []), "the capacity is reached")
        XCTAssertEqual(name(registry.lookup("c")), "unknown")
        XCTAssertNotNil(registry.register("a", types: []), "a prepared text stays prepared")
        // A new epoch forgets the names but not how many texts were prepared.
        XCTAssertEqual(registry.failed(sqlState: "26000", name: "stratus_0_0"), 1)
        XCTAssertNil(registry.register("a", types: []), "the capacity counts every epoch")
        XCTAssertEqual(registry.count, 0)
        var zero = Registry(capacity: 0, maxEpochs: 8)
        XCTAssertNil(zero.register("a", types: []), "capacity 0 prepares nothing")
        var none = Registry(capacity: -3, maxEpochs: -1)
        XCTAssertEqual(none.capacity, 0)
        XCTAssertEqual(none.maxEpochs, 0)
        XCTAssertNil(none.register("a", types: []))
    }

    /// Which failures move the names to a new epoch.
    func testOnlyAFailureAPreparationMayCauseMovesTheNamesOnce() {
        let cases: [(sqlState: String?, moves: Bool)] = [
            ("55P03", true), ("0A000", true), ("26000", true), ("42P01", true), ("25P02", true),
            ("57014", false), ("23505", false), ("40001", false), ("42601", false), (nil, false),
        ]
        for test in cases {
            var registry = Registry(capacity: 8, maxEpochs: 8)
            let named = registry.register("SELECT 1", types: [])!
            XCTAssertEqual(registry.failed(sqlState: test.sqlState, name: named.name), test.moves ? 1 : nil, "\(test)")
            XCTAssertEqual(registry.epoch, test.moves ? 1 : 0)
            XCTAssertEqual(name(registry.lookup("SELECT 1")), test.moves ? "unknown" : "named stratus_0_0", "\(test)")
            if test.moves {
                XCTAssertNil(registry.failed(sqlState: test.sqlState, name: named.name), "a name of an epoch gone: moved already")
                XCTAssertEqual(registry.register("SELECT 1", types: [])?.name, "stratus_1_0", "prepared again under a new name")
            }
        }
        XCTAssertEqual(Registry.mayStickToName, ["55P03", "0A000", "26000", "42P01", "25P02"])
    }

    func testAfterTheLastEpochEveryStatementRunsUnprepared() {
        var registry = Registry(capacity: 100, maxEpochs: 2)
        for epoch in 0..<2 {
            let named = registry.register("SELECT 1", types: [])!
            XCTAssertEqual(named.name, "stratus_\(epoch)_0")
            XCTAssertEqual(registry.failed(sqlState: "0A000", name: named.name), epoch + 1)
        }
        XCTAssertEqual(name(registry.lookup("SELECT 1")), "unprepared")
        XCTAssertNil(registry.register("SELECT 1", types: []))
        XCTAssertNil(registry.failed(sqlState: "0A000", name: "stratus_1_0"), "nothing is named any more")
        XCTAssertEqual(name(Registry(capacity: 8, maxEpochs: 0).lookup("SELECT 1")), "unprepared", "no epochs: never prepared")
    }
}
