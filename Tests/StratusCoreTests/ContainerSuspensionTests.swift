import StratusCore
import XCTest

/// A suspended container's requests are refused with ACCESS_DENIED, naming the container and the
/// suspension; a serving one's pass.
final class ContainerSuspensionTests: XCTestCase {
    func testASuspendedContainerIsRefusedWithAccessDeniedAndAServingOnePasses() throws {
        XCTAssertNoThrow(try ContainerSuspension.check(false, container: "iCloud.com.example.notes"))
        XCTAssertThrowsError(try ContainerSuspension.check(true, container: "iCloud.com.example.notes")) { error in
            let refusal = error as? StratusError
            XCTAssertEqual(refusal?.code.rawValue, "ACCESS_DENIED")
            XCTAssertEqual(refusal?.code.httpStatus, 403)
            XCTAssertTrue(refusal?.reason.contains("'iCloud.com.example.notes' is suspended") == true, "\(String(describing: refusal))")
        }
    }

    func testAHostileContainerNameIsExcerptedInTheReason() throws {
        let long = String(repeating: "x", count: 10_000)
        XCTAssertThrowsError(try ContainerSuspension.check(true, container: long)) { error in
            XCTAssertLessThan((error as? StratusError)?.reason.count ?? .max, 1_000)
        }
    }
}
