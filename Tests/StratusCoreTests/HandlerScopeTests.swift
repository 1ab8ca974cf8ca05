import Foundation
import XCTest

/// Keeps the API's handlers off the database scope: what a scope means for a call is
/// `CallTarget`'s (StratusCore), and a handler asks the target (`participant`, `belongsToUser`,
/// `zone(named:owner:rules:)`, …), never `scope == .shared` or a switch over the scope. Also keeps
/// client text quoted in an error's reason going through `ClientText.excerpt`, in every module.
final class HandlerScopeTests: XCTestCase {
    /// Lines allowed to read the scope, by file and text: where the addressed database is made.
    private static let allowed: [(file: String, text: String)] = [
        // The database a caller may address, from the path's scope and the caller's credential.
        ("Authentication.swift", "switch path.scope {"),
        // The console's form naming a user's private database.
        ("ConsoleDataPages.swift", "scope: .private, owner: user)"),
    ]

    private static let scopeBranches = [
        #"\bscope\s*[!=]="#,  // database.scope == .shared
        #"[!=]=\s*\.(public|private|shared)\b"#,  // a scope held elsewhere compared
        #"\.(public|private|shared)\s*[!=]="#,  // .shared == database.scope
        #"\bswitch\b[^{]*\bscope\b"#,  // switch database.scope {
        #"\bcase\s+\.(public|private|shared)\s*="#,  // if case .shared = database.scope
        #"scope:\s*\.private\b"#,  // the shared database's zone rewritten to its owner's private database
    ]

    private static let unexcerpted = [
        #"\\\([^"]*\.prefix\(255\)\)"#,  // "Record '\(name.prefix(255))'"
    ]

    private static var apiSources: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Sources/StratusAPI")
    }

    /// `file:line: text` for each code line (comments skipped) of a Swift file under `directory`
    /// matching one of `patterns` and not allowed.
    static func offending(in directory: URL, patterns: [String], allowed: [(file: String, text: String)]) throws -> [String] {
        let expressions = try patterns.map { try NSRegularExpression(pattern: $0) }
        guard let files = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: nil) else { return [] }
        var found: [String] = []
        for case let file as URL in files where file.pathExtension == "swift" {
            let text = try String(contentsOf: file, encoding: .utf8)
            for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                let code = line.trimmingCharacters(in: .whitespaces)
                if code.hasPrefix("//") { continue }
                let range = NSRange(code.startIndex..., in: code)
                guard expressions.contains(where: { $0.firstMatch(in: code, range: range) != nil }) else { continue }
                if allowed.contains(where: { $0.file == file.lastPathComponent && code.contains($0.text) }) { continue }
                found.append("\(file.path.dropFirst(directory.path.count + 1)):\(index + 1): \(code)")
            }
        }
        return found.sorted()
    }

    func testHandlersDoNotBranchOnTheDatabaseScope() throws {
        XCTAssertTrue(FileManager.default.fileExists(atPath: Self.apiSources.path), "no sources at \(Self.apiSources.path)")
        let found = try Self.offending(in: Self.apiSources, patterns: Self.scopeBranches, allowed: Self.allowed)
        XCTAssertEqual(found, [], "Ask the call's CallTarget (DatabaseCall.target) instead:\n" + found.joined(separator: "\n"))
    }

    func testReasonsQuoteClientTextThroughItsExcerpt() throws {
        let sources = Self.apiSources.deletingLastPathComponent()
        let found = try Self.offending(in: sources, patterns: Self.unexcerpted, allowed: [])
        XCTAssertEqual(found, [], "Quote client text with ClientText.excerpt:\n" + found.joined(separator: "\n"))
    }

    /// The scan finds what it is for (else an empty answer would prove nothing).
    func testTheScanFindsABranch() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("handler-scope-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try """
            let a = database.scope == .shared
            // database.scope == .shared in a comment
            if .private != target.addressed.scope {}
            switch database.scope {
            if case .shared = scope {}
            DatabaseID(container: c, environment: e, scope: .private, owner: zone.ownerRecordName)
            let fine = database.scope.rawValue
            throw StratusError(.notFound, "Record '\\(name.prefix(255))' does not exist")
            """.write(to: directory.appendingPathComponent("Handler.swift"), atomically: true, encoding: .utf8)
        let branches = try Self.offending(in: directory, patterns: Self.scopeBranches, allowed: [])
        XCTAssertEqual(branches.map { $0.prefix(while: { $0 != " " }) }, ["Handler.swift:1:", "Handler.swift:3:", "Handler.swift:4:", "Handler.swift:5:", "Handler.swift:6:"])
        let quotes = try Self.offending(in: directory, patterns: Self.unexcerpted, allowed: [])
        XCTAssertEqual(quotes.map { $0.prefix(while: { $0 != " " }) }, ["Handler.swift:8:"])
        XCTAssertEqual(try Self.offending(in: directory, patterns: Self.scopeBranches, allowed: [("Handler.swift", "switch database.scope {")]).count, 4)
    }
}
