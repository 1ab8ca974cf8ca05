import Foundation
@testable import StratusAPI
import StratusCore
import XCTest

/// A continuation marker and a query's fingerprint are written directly in `JSONEncoder`'s bytes:
/// a marker issued before, and a fingerprint made before, still match what is made now.
final class QueryMarkerFormTests: XCTestCase {
    typealias Marker = QueryRoutes<APIRequestContext>.Marker

    static let values: [JSONValue] = [
        .null, .bool(true), .bool(false), .int(0), .int(-7), .int(Int64.max), .int(Int64.min),
        .double(1), .double(-0.0), .double(0.1), .double(1e20), .double(1e-5), .double(123.456), .double(-2.5e300),
        .string(""), .string("a/b"), .string("quote \" backslash \\ tab \t newline \n"), .string("\u{1}\u{1f}"), .string("é ✓ 😀"),
        .array([]), .array([.int(1), .string("x/y"), .null]),
        .object([:]), .object(["b": .int(1), "a": .string("/"), "é": .bool(true), "A": .array([.double(2)])]),
    ]

    func testAMarkerIsWrittenInTheCodersBytes() throws {
        var random = SystemRandomNumberGenerator()
        for round in 0..<300 {
            let count = round < Self.values.count ? 1 : Int.random(in: 0...5, using: &random)
            let after = round < Self.values.count ? [Self.values[round]] : (0..<count).map { _ in Self.values.randomElement(using: &random)! }
            let marker = Marker(query: "q/\(round)+Z_-", after: after)
            var direct: [UInt8] = []
            XCTAssertTrue(marker.writeEncoderForm(into: &direct), "\(after)")
            XCTAssertEqual(String(decoding: direct, as: UTF8.self), String(decoding: try EventCoding.encoder.encode(marker), as: UTF8.self), "\(after)")
            XCTAssertEqual(Data(direct), EventCoding.encode(marker))
        }
        // A number JSON cannot carry is left to the coder.
        var bytes: [UInt8] = []
        XCTAssertFalse(Marker(query: "q", after: [.array([.double(.infinity)])]).writeEncoderForm(into: &bytes))
    }

    func testAQuerysFingerprintTextIsTheCodersBytes() throws {
        for value in Self.values + [.object(["recordType": .string("Item"), "filterBy": .array([.object(["fieldName": .string("a/b"), "fieldValue": .object(["value": .double(3)])])])])] {
            var direct: [UInt8] = []
            value.writeEncoderForm(into: &direct)
            XCTAssertEqual(String(decoding: direct, as: UTF8.self), String(decoding: try EventCoding.encoder.encode(value), as: UTF8.self), "\(value)")
        }
    }
}
