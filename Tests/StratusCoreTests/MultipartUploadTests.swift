import StratusCore
import XCTest

/// The multipart/form-data envelope of an asset upload: the file part's bytes come out, whatever
/// the chunking; the envelope is bounded and a malformed one refused.
final class MultipartUploadTests: XCTestCase {
    static let boundary = "----formdata-7d1f0a"

    /// A body with a form field, the file part and an epilogue, as a browser's form sends it.
    static func body(_ file: [UInt8], boundary: String = boundary, fileHeaders: String? = nil) -> [UInt8] {
        let headers = fileHeaders ?? "Content-Disposition: form-data; name=\"files\"; filename=\"photo; 1.jpg\"\r\nContent-Type: image/jpeg"
        return Array("preamble to ignore\r\n--\(boundary)\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nhello\r\n--\(boundary)\r\n\(headers)\r\n\r\n".utf8)
            + file + Array("\r\n--\(boundary)--\r\nepilogue".utf8)
    }

    static func scan(_ body: [UInt8], boundary: String = boundary, chunk: Int) throws -> [UInt8] {
        var scanner = MultipartScanner(boundary: Array(boundary.utf8))
        var out: [UInt8] = []
        var index = 0
        while index < body.count {
            let end = min(index + chunk, body.count)
            out += try scanner.feed(body[index..<end])
            index = end
        }
        try scanner.finish()
        return out
    }

    func testTheContentTypeNamesTheBoundaryOrLeavesTheBodyRaw() throws {
        XCTAssertNil(try MultipartUpload.boundary(contentType: nil))
        XCTAssertNil(try MultipartUpload.boundary(contentType: "application/octet-stream"))
        XCTAssertEqual(try MultipartUpload.boundary(contentType: "multipart/form-data; boundary=abc"), Array("abc".utf8))
        XCTAssertEqual(try MultipartUpload.boundary(contentType: "Multipart/Form-Data; charset=utf-8; boundary=\"a;b c\""), Array("a;b c".utf8))
        let refused = [
            "multipart/form-data", "multipart/form-data; boundary=", "multipart/mixed; boundary=abc",
            "multipart/form-data; boundary=\(String(repeating: "x", count: MultipartUpload.maxBoundaryBytes + 1))",
            "multipart/form-data; boundary=\"ends in space \"", "multipart/form-data; boundary=caf\u{e9}",
        ]
        for contentType in refused {
            XCTAssertThrowsError(try MultipartUpload.boundary(contentType: contentType), contentType) { error in
                XCTAssertEqual((error as? StratusError)?.code, .badRequest, contentType)
            }
        }
        XCTAssertNoThrow(try MultipartUpload.boundary(contentType: "multipart/form-data; boundary=\(String(repeating: "x", count: MultipartUpload.maxBoundaryBytes))"))
    }

    func testTheFilePartsBytesComeOutWhateverTheChunking() throws {
        // The file holds CRLFs, dashes and a near-boundary, which are content, not delimiters.
        let file = Array("\r\n--\(Self.boundary.dropLast())\r\n-- binary \u{0}\u{1}\r\n".utf8) + (0..<300).map { UInt8($0 % 256) }
        let body = Self.body(file)
        for chunk in [1, 2, 3, 7, 64, 75, body.count] {
            XCTAssertEqual(try Self.scan(body, chunk: chunk), file, "chunks of \(chunk)")
        }
        // An empty file, a part without a preamble, and transport padding after a boundary.
        XCTAssertEqual(try Self.scan(Self.body([]), chunk: 5), [])
        let bare = Array("--b \t\r\nContent-Disposition: form-data; name=\"f\"; filename=\"x\"\r\n\r\nabc\r\n--b--".utf8)
        XCTAssertEqual(try Self.scan(bare, boundary: "b", chunk: 1), Array("abc".utf8))
        // A part with a Content-Type and no filename is the file too.
        let typed = Self.body([9, 9], fileHeaders: "Content-Disposition: form-data; name=\"file\"\r\nContent-Type: application/octet-stream")
        XCTAssertEqual(try Self.scan(typed, chunk: 4), [9, 9])
    }

    func testAMalformedOrOversizedEnvelopeIsRefused() throws {
        let b = Self.boundary
        let part = "Content-Disposition: form-data; name=\"f\"; filename=\"x\"\r\n\r\n"
        let cases: [(String, [UInt8], ServerErrorCode)] = [
            ("no closing boundary", Array("--\(b)\r\n\(part)abc".utf8), .badRequest),
            ("no boundary at all", Array("just bytes".utf8), .badRequest),
            ("no file part", Array("--\(b)\r\nContent-Disposition: form-data; name=\"n\"\r\n\r\nv\r\n--\(b)--".utf8), .badRequest),
            ("two file parts", Array("--\(b)\r\n\(part)a\r\n--\(b)\r\n\(part)b\r\n--\(b)--".utf8), .badRequest),
            ("no disposition", Array("--\(b)\r\nContent-Type: text/plain\r\n\r\na\r\n--\(b)--".utf8), .badRequest),
            ("a header without a colon", Array("--\(b)\r\nnonsense\r\n\r\na\r\n--\(b)--".utf8), .badRequest),
            ("garbage after a boundary", Array("--\(b)xyz\r\n\(part)a\r\n--\(b)--".utf8), .badRequest),
            ("headers past the bound", Array("--\(b)\r\nX-Pad: \(String(repeating: "p", count: MultipartUpload.maxHeaderBytes))\r\n\r\n".utf8), .limitExceeded),
            ("too many header lines", Array(("--\(b)\r\n" + String(repeating: "X-A: 1\r\n", count: MultipartUpload.maxHeaderLines) + part).utf8), .limitExceeded),
            ("too many parts", Array((String(repeating: "--\(b)\r\nContent-Disposition: form-data; name=\"n\"\r\n\r\nv\r\n", count: MultipartUpload.maxParts + 1) + "--\(b)--").utf8), .limitExceeded),
            ("an envelope past the bound", Array("--\(b)\r\n\(part)a\r\n--\(b)--".utf8) + [UInt8](repeating: 65, count: Int(MultipartUpload.maxEnvelopeBytes)), .limitExceeded),
        ]
        for (name, body, code) in cases {
            for chunk in [body.count, 13, 1] {
                XCTAssertThrowsError(try Self.scan(body, chunk: chunk), "\(name), chunks of \(chunk)") { error in
                    XCTAssertEqual((error as? StratusError)?.code, code, "\(name): \(error)")
                }
                if body.count > 4096 { break }
            }
        }
    }
}
