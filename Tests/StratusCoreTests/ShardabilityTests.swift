import Foundation
import XCTest

/// Keeps Stratus shardable by owner (docs/scale-out.md): every table is placed — distributed by the
/// database that owns its rows, reference data of a container, the identity directory, or local to
/// a node — and every statement the server writes on a distributed table names its key (binds the
/// key column, inserts it, or names the zone by its five columns), or says in a comment just above
/// it why it crosses owners (`Crosses owners:`) or where its key is added (`Owner key:`). So a
/// distributed engine's tables, or the CloudKit paper's placement of each user on one cluster, stay
/// possible, and every statement that would cross shards is written down where it is.
final class ShardabilityTests: XCTestCase {
    /// Where a table's rows live when Stratus runs on several PostgreSQL nodes.
    enum Placement: Equatable {
        /// Distributed by the owning database: a statement names one of these key columns (the
        /// first is the distribution column; a zone key embeds its owner).
        case owned([String])
        /// A container's configuration, small and read everywhere: replicated to every node; and its
        /// shared request counters, kept on the container's home node.
        case container
        /// Who a user is (sign-in, sessions, linked identities): the directory that also says on
        /// which node a user's databases live, as in the CloudKit paper.
        case directory
        /// Each node's own: its event log and relay, the delivery queue of its subscribers'
        /// notifications, the operators' tables, the audit log, maintenance runs.
        case node
    }

    /// Every table the migrations create (partitions follow their parent).
    static let placements: [String: Placement] = [
        // The user's databases.
        "zones": .owned(["owner"]), "records": .owned(["owner"]), "record_references": .owned(["owner"]),
        "record_tombstones": .owned(["owner"]), "record_expirations": .owned(["owner"]), "shares": .owned(["owner"]),
        "share_participants": .owned(["owner"]), "storage_usage": .owned(["owner"]), "subscriptions": .owned(["owner"]),
        "query_index.records": .owned(["owner"]), "index_zones": .owned(["owner", "zone_key"]),
        // A zone's worker checkpoints and asset references, by the zone's key.
        "worker_checkpoints": .owned(["zone_key"]), "asset_references": .owned(["zone_key"]),
        // An asset is addressed by its id alone (upload and download URLs name nothing else).
        "assets": .owned(["asset_id"]),
        // A participant's view of the zones shared with them: their shared database.
        "shared_zone_tracking": .owned(["user_record_name"]),
        // A subscriber's notifications and the ways they are delivered.
        "notifications": .owned(["subscriber"]), "notification_positions": .owned(["subscriber"]),
        "courier_tokens": .owned(["subscriber"]), "device_tokens": .owned(["subscriber"]),
        // A container's configuration.
        "containers": .container, "api_tokens": .container, "schema_environments": .container, "schema_record_types": .container,
        "schema_fields": .container, "schema_roles": .container, "schema_role_members": .container, "query_index.field_indexes": .container,
        "query_index.generations": .container, "webhooks": .container, "apns_credentials": .container, "trusted_issuers": .container,
        "sign_up_invitations": .container, "server_keys": .container, "request_buckets": .container,
        // Who a user is and where they live.
        "users": .directory, "sessions": .directory, "linked_accounts": .directory, "email_tokens": .directory,
        "used_nonces": .directory, "user_deletions": .directory, "container_deletions": .directory,
        // Each node's own.
        "events": .node, "event_log_retention": .node, "unpublished_events": .node, "notification_deliveries": .node, "relay_topics": .node, "worker_dead_letters": .node,
        "maintenance_runs": .node, "operators": .node, "operator_sessions": .node, "audit_log": .node, "audit_head": .node,
        // What the writes a node holds add to each container's counts: a container's totals are the sum over the nodes.
        "container_usage": .node,
    ]

    /// Modules that hold no server statement: the benchmark's own tables and setup.
    static let unscanned: Set<String> = ["StratusBench"]

    private static var root: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    }

    // MARK: The tables

    /// The tables the migrations create and have not dropped, with the columns each is created
    /// with or given later (a table made `LIKE` another has the other's).
    static func tables(inMigrations directory: URL) throws -> [String: Set<String>] {
        let files = try FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil)
            .filter { $0.pathExtension == "sql" }.sorted { $0.lastPathComponent < $1.lastPathComponent }
        let sql = try files.map { try String(contentsOf: $0, encoding: .utf8) }.joined(separator: "\n")
            .split(separator: "\n").map { line in line.range(of: "--").map { String(line[..<$0.lowerBound]) } ?? String(line) }
            .joined(separator: "\n")
        let name = #"([a-z_]+(?:\.[a-z_]+)?)"#
        var tables: [String: Set<String>] = [:]
        let create = try NSRegularExpression(pattern: #"CREATE (?:UNLOGGED )?TABLE (?:IF NOT EXISTS )?"# + name + #"\s*(PARTITION OF|\()"#, options: [.caseInsensitive])
        for match in create.matches(in: sql, range: NSRange(sql.startIndex..., in: sql)) {
            let table = String(sql[Range(match.range(at: 1), in: sql)!])
            guard String(sql[Range(match.range(at: 2), in: sql)!]).uppercased() != "PARTITION OF" else { continue }
            // The body: up to the parenthesis that closes the one opening it.
            var depth = 0
            var body = ""
            for character in sql[Range(match.range(at: 2), in: sql)!.lowerBound...] {
                if character == "(" { depth += 1 }
                if character == ")" { depth -= 1 }
                body.append(character)
                if depth == 0 { break }
            }
            // Each part's first word, where it is a column's name (not `PRIMARY`, `UNIQUE`, …).
            var columns = Set(
                body.dropFirst().split(separator: ",").compactMap { $0.split(whereSeparator: \.isWhitespace).first.map(String.init) }
                    .filter { $0.allSatisfy { $0 == "_" || ($0.isLetter && $0.isLowercase) || $0.isNumber } })
            if let like = try NSRegularExpression(pattern: #"^\(\s*LIKE\s+"# + name, options: [.caseInsensitive])
                .firstMatch(in: body, range: NSRange(body.startIndex..., in: body)) {
                columns.formUnion(tables[String(body[Range(like.range(at: 1), in: body)!])] ?? [])
            }
            tables[table, default: []].formUnion(columns)
        }
        let added = try NSRegularExpression(pattern: #"ALTER TABLE (?:IF EXISTS )?"# + name + #"\s+ADD COLUMN (?:IF NOT EXISTS )?([a-z_]+)"#, options: [.caseInsensitive])
        for match in added.matches(in: sql, range: NSRange(sql.startIndex..., in: sql)) {
            tables[String(sql[Range(match.range(at: 1), in: sql)!]), default: []].insert(String(sql[Range(match.range(at: 2), in: sql)!]))
        }
        // A table attached as a partition follows its parent, as one made `PARTITION OF` it does.
        let attached = try NSRegularExpression(pattern: #"ATTACH PARTITION "# + name, options: [.caseInsensitive])
        for match in attached.matches(in: sql, range: NSRange(sql.startIndex..., in: sql)) {
            tables[String(sql[Range(match.range(at: 1), in: sql)!])] = nil
        }
        let dropped = try NSRegularExpression(pattern: #"DROP TABLE (?:IF EXISTS )?"# + name, options: [.caseInsensitive])
        for match in dropped.matches(in: sql, range: NSRange(sql.startIndex..., in: sql)) {
            tables[String(sql[Range(match.range(at: 1), in: sql)!])] = nil
        }
        return tables
    }

    func testEveryTableIsPlacedAndHoldsItsKey() throws {
        let tables = try Self.tables(inMigrations: Self.root.appendingPathComponent("migrations"))
        XCTAssertGreaterThan(tables.count, 40, "the migrations were read")
        for (table, columns) in tables.sorted(by: { $0.key < $1.key }) {
            guard let placement = Self.placements[table] else {
                XCTFail("\(table) is not placed: add it to ShardabilityTests.placements and docs/scale-out.md")
                continue
            }
            if case .owned(let keys) = placement {
                for key in keys { XCTAssertTrue(columns.contains(key), "\(table) has no column \(key): \(columns.sorted())") }
            }
        }
        XCTAssertEqual(Set(Self.placements.keys).subtracting(tables.keys), [], "placed tables the migrations do not create")
    }

    // MARK: The statements

    /// One statement on a distributed table that names no key of it, as `file:line: tables`.
    static func unkeyed(in directory: URL, placements: [String: Placement], skipping: Set<String> = []) throws -> [String] {
        guard let files = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: nil) else { return [] }
        let literal = try NSRegularExpression(pattern: #""""(.*?)"""|"((?:[^"\\\n]|\\.)*)""#, options: [.dotMatchesLineSeparators])
        let verb = try NSRegularExpression(pattern: #"\b(SELECT|INSERT INTO|UPDATE|DELETE FROM)\b"#)
        let table = try NSRegularExpression(pattern: #"\b(?:FROM|JOIN|UPDATE|INTO)\s+([a-z_]+(?:\.[a-z_]+)?)"#)
        let fragment = try NSRegularExpression(pattern: #"\blet\s+(\w+)\s*=\s*"((?:[^"\\\n]|\\.)*)""#)
        let interpolated = try NSRegularExpression(pattern: #"\\\((\w+)\)"#)
        // The zone's five columns, written once (`\(zone:of:)`), in the statement or, for a builder's
        // piece (`appendLiteral("… WHERE ")`), as the piece after it.
        let zoneKey = try NSRegularExpression(pattern: #"\\\(zone:"#)
        let nextPiece = try NSRegularExpression(pattern: #"^\s*appendInterpolation\((zone|tombstonesOf):"#, options: [.anchorsMatchLines])
        var tests: [String: [KeyTest]] = [:]
        for (name, placement) in placements {
            if case .owned(let keys) = placement { tests[name] = try keys.map { try KeyTest(key: $0, table: name) } }
        }
        var found: [String] = []
        for case let file as URL in files where file.pathExtension == "swift" {
            let relative = String(file.path.dropFirst(directory.path.count + 1))
            if skipping.contains(where: { relative.hasPrefix($0 + "/") }) { continue }
            let source = try String(contentsOf: file, encoding: .utf8)
            let whole = NSRange(source.startIndex..., in: source)
            var fragments: [String: String] = [:]
            for match in fragment.matches(in: source, range: whole) {
                fragments[String(source[Range(match.range(at: 1), in: source)!])] = String(source[Range(match.range(at: 2), in: source)!])
            }
            for match in literal.matches(in: source, range: whole) {
                let range = Range(match.range(at: 1), in: source) ?? Range(match.range(at: 2), in: source)!
                let statement = String(source[range])
                let statementRange = NSRange(statement.startIndex..., in: statement)
                guard verb.firstMatch(in: statement, range: statementRange) != nil else { continue }
                let named = Set(table.matches(in: statement, range: statementRange).map { String(statement[Range($0.range(at: 1), in: statement)!]) })
                let distributed = named.filter { if case .owned = placements[$0] { true } else { false } }
                guard !distributed.isEmpty else { continue }
                let start = Range(match.range, in: source)!
                if Self.comment(above: source[..<start.lowerBound]).contains(where: { $0.contains("Crosses owners:") || $0.contains("Owner key:") }) { continue }
                let opening = source[..<start.lowerBound].split(separator: "\n", omittingEmptySubsequences: false).last ?? ""
                let next = opening.hasSuffix("append(") || opening.hasSuffix("appendLiteral(")
                    ? source[start.upperBound...].split(separator: "\n", omittingEmptySubsequences: false).prefix(3).joined(separator: "\n") : ""
                let used = interpolated.matches(in: statement, range: statementRange).compactMap { fragments[String(statement[Range($0.range(at: 1), in: statement)!])] }
                let text = ([statement] + used).joined(separator: " ")
                let namesZone = zoneKey.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)) != nil
                    || nextPiece.firstMatch(in: next, range: NSRange(next.startIndex..., in: next)) != nil
                let missing = distributed.sorted().filter { name in
                    guard case .owned(let keys) = placements[name] else { return false }
                    if keys.contains("owner") && namesZone { return false }
                    return !(tests[name] ?? []).contains { $0.named(in: text) }
                }
                if !missing.isEmpty {
                    let line = source[..<start.lowerBound].filter { $0 == "\n" }.count + 1
                    found.append("\(relative):\(line): \(missing.joined(separator: ", "))")
                }
            }
        }
        return found.sorted()
    }

    /// The comment just above a statement that begins where `before` ends: the block of `//` lines
    /// above its line, or above the call that opens it on the line before (`connection.query(`).
    static func comment(above before: Substring) -> [Substring] {
        var lines = before.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
        let isComment = { (line: Substring) in line.trimmingCharacters(in: .whitespaces).hasPrefix("//") }
        if let last = lines.last, !isComment(last), last.trimmingCharacters(in: .whitespaces).hasSuffix("(") { lines = lines.dropLast() }
        var block: [Substring] = []
        while let last = lines.last, isComment(last) {
            block.append(last)
            lines = lines.dropLast()
        }
        return block
    }

    /// Whether a statement binds a table's key in a condition (`key = …`, `key IN`, `(…, key, …) IN`)
    /// or inserts it: the expressions made once per key and table.
    struct KeyTest {
        let condition: NSRegularExpression
        let insert: NSRegularExpression
        let key: String

        init(key: String, table: String) throws {
            self.key = key
            condition = try NSRegularExpression(pattern: #"\b\#(key)\s*(=|IN\b)|\(\s*[a-z_., ]*\b\#(key)\b[a-z_., ]*\)\s*(=|IN\b)"#)
            insert = try NSRegularExpression(pattern: #"INSERT INTO \#(NSRegularExpression.escapedPattern(for: table))\b(?:\s+AS\s+\w+)?\s*\(([^)]*)\)"#)
        }

        func named(in text: String) -> Bool {
            let range = NSRange(text.startIndex..., in: text)
            if condition.firstMatch(in: text, range: range) != nil { return true }
            return insert.matches(in: text, range: range).contains { match in
                String(text[Range(match.range(at: 1), in: text)!]).split(separator: ",").contains { $0.trimmingCharacters(in: .whitespacesAndNewlines) == key }
            }
        }
    }

    func testEveryStatementOnADistributedTableNamesItsKey() throws {
        let sources = Self.root.appendingPathComponent("Sources")
        let found = try Self.unkeyed(in: sources, placements: Self.placements, skipping: Self.unscanned)
        XCTAssertEqual(
            found, [],
            "Name the owner's key in these statements, or say above each why it crosses owners (`// Crosses owners: …`, docs/scale-out.md):\n"
                + found.joined(separator: "\n"))
    }

    /// The scan finds what it is for (else an empty answer would prove nothing).
    func testTheScanFindsAStatementWithoutItsKey() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("shardability-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try #"""
            let a = "SELECT * FROM records WHERE record_name = \(name)"
            let b = "SELECT * FROM records WHERE owner = \(owner) AND record_name = \(name)"
            let c = "SELECT * FROM records WHERE \(zone: zoneName, of: database)"
            let d = "INSERT INTO records (container, owner, record_name) VALUES ($1, $2, $3)"
            let e = "INSERT INTO records (container, record_name) VALUES ($1, $2)"
            // Crosses owners: a sweep of every owner's rows.
            let f = "DELETE FROM records WHERE deleted"
            let own = "owner = $2"
            let g = "DELETE FROM records WHERE \(own)"
            let h = "SELECT * FROM containers"
            let i = """
                SELECT count(*) FROM records r JOIN zones z ON z.zone_key = r.zone_key
                WHERE r.record_name = $1
                """
            append("SELECT version FROM records WHERE ")
            appendInterpolation(zone: zoneName, of: database)
            let j = "UPDATE notifications SET is_read = true WHERE (container, subscriber) = ($1, $2)"
            // Crosses owners: the first only.
            let k = "DELETE FROM records WHERE a"
            let l = "DELETE FROM records WHERE b"
            // Crosses owners: a call's statement on the line below it.
            let m = connection.query(
                "DELETE FROM records WHERE c")
            let n = "DELETE FROM records WHERE owner <> $1"
            """#.write(to: directory.appendingPathComponent("Store.swift"), atomically: true, encoding: .utf8)
        let placements: [String: Placement] = ["records": .owned(["owner"]), "zones": .owned(["owner"]), "notifications": .owned(["subscriber"]), "containers": .container]
        XCTAssertEqual(try Self.unkeyed(in: directory, placements: placements), ["Store.swift:11: records, zones", "Store.swift:1: records", "Store.swift:20: records", "Store.swift:24: records", "Store.swift:5: records"])
        XCTAssertEqual(try Self.unkeyed(in: directory, placements: placements, skipping: ["Store.swift"]).count, 5, "only folders are skipped")
    }

    func testTheMigrationsAreReadWithTheirColumns() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("shardability-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try """
            CREATE TABLE things (owner text NOT NULL, name text, PRIMARY KEY (owner, name));
            CREATE TABLE IF NOT EXISTS q.rows (owner text); -- CREATE TABLE commented (x int)
            CREATE UNLOGGED TABLE counters (owner text);
            ALTER TABLE things ADD COLUMN size bigint;
            CREATE TABLE old (id int);
            CREATE TABLE copy (LIKE things INCLUDING DEFAULTS, PRIMARY KEY (owner));
            CREATE TABLE copy_a PARTITION OF copy FOR VALUES IN ('a');
            CREATE TABLE copy_b (LIKE copy);
            ALTER TABLE copy ATTACH PARTITION copy_b DEFAULT;
            DROP TABLE old;
            """.write(to: directory.appendingPathComponent("0001_x.sql"), atomically: true, encoding: .utf8)
        let tables = try Self.tables(inMigrations: directory)
        XCTAssertEqual(Set(tables.keys), ["things", "q.rows", "counters", "copy"])
        XCTAssertEqual(tables["things"], ["owner", "name", "size"])
        XCTAssertEqual(tables["copy"], ["owner", "name"], "the columns of the table it copies when it copies them")
    }
}
