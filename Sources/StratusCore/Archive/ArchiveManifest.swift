/// What an export archive holds and where (docs/operations.md, "Exporting and importing"). Every
/// file but the manifest is listed in the manifest, the archive's last file, with its size and
/// SHA-256; an import checks the whole archive against it before it writes anything.
public enum ArchiveLayout {
    public static let manifest = "manifest.json"
    /// The JSON lines files of a kind are written in parts of at most `partBytes`, so an export
    /// holds no more than one part in memory: `users/000001.jsonl`, `zones/000001.jsonl`, …
    public static let users = "users"
    public static let zones = "zones"
    public static let subscriptions = "subscriptions"
    /// The bytes after which a part of JSON lines is closed.
    public static let partBytes = 4 << 20
    /// The `index`th part (from 1) of a kind's lines.
    public static func part(_ kind: String, _ index: Int) -> String { "\(kind)/\(sixDigits(index)).jsonl" }
    /// The `part`th part of the records of the `zone`th zone (both from 1): one wire record a line.
    public static func records(zone: Int, part: Int) -> String { "records/\(sixDigits(zone))-\(sixDigits(part)).jsonl" }
    /// The schema of an environment in CloudKit's schema language.
    public static func schema(_ environment: Environment) -> String { "schema/\(environment.rawValue).ckdb" }
    /// An asset's bytes, named by the receipt the archived record holds.
    public static func asset(_ receipt: String) -> String { "assets/\(receipt)" }
    /// The parts of a kind's lines among an archive's paths, in order.
    public static func parts(_ kind: String, in paths: [String]) -> [String] {
        paths.filter { $0.hasPrefix(kind + "/") && $0.hasSuffix(".jsonl") }.sorted()
    }

    static func sixDigits(_ index: Int) -> String {
        let digits = String(index)
        return String(repeating: "0", count: max(0, 6 - digits.count)) + digits
    }

    /// The format's name and version in the manifest.
    public static let format = "stratus-export"
    public static let version: Int64 = 1
}

/// Bounds on what an import reads, so a hostile archive can make it neither run out of memory nor
/// loop: files, the manifest's size, a line's size, an asset's size.
public struct ArchiveLimits: Sendable, Hashable {
    /// Files an archive may hold.
    public var maxFiles = 500_000
    /// The manifest's bytes (it is read whole).
    public var maxManifestBytes: Int64 = 64 << 20
    /// A JSON line's bytes (a record line among them).
    public var maxLineBytes = 16 << 20
    /// An asset's bytes.
    public var maxAssetBytes: Int64 = 1 << 30

    /// The defaults.
    public init() {}
}

/// One file as the manifest lists it.
public struct ArchiveFile: Sendable, Hashable {
    public var path: String
    public var size: Int64
    /// Lower-case hex of the bytes' SHA-256.
    public var sha256: String

    /// Creates an entry.
    public init(path: String, size: Int64, sha256: String) {
        self.path = path
        self.size = size
        self.sha256 = sha256
    }

    /// Lower-case hex of a digest's bytes, as `sha256` holds it.
    public static func hex(_ digest: some Sequence<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        for byte in digest { text += [digits[Int(byte >> 4)], digits[Int(byte & 0x0f)]] }
        return String(decoding: text, as: UTF8.self)
    }

    /// The bytes of a `sha256`; nil for text that is not hex.
    public static func bytes(hex: String) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0, digits.allSatisfy(\.isLowerHex) else { return nil }
        func value(_ digit: UInt8) -> UInt8 { digit <= UInt8(ascii: "9") ? digit - UInt8(ascii: "0") : digit - UInt8(ascii: "a") + 10 }
        return stride(from: 0, to: digits.count, by: 2).map { value(digits[$0]) << 4 | value(digits[$0 + 1]) }
    }
}

/// The archive's manifest: which container (and, for a user's export, which user) it was taken
/// from, when, and every other file with its size and checksum.
public struct ArchiveManifest: Sendable, Hashable {
    public var container: String
    /// The user whose data it holds; nil: the whole container.
    public var user: String?
    /// When the export began (milliseconds since 1970).
    public var createdAt: Int64
    public var files: [ArchiveFile]

    /// Creates a manifest.
    public init(container: String, user: String?, createdAt: Int64, files: [ArchiveFile]) {
        self.container = container
        self.user = user
        self.createdAt = createdAt
        self.files = files
    }

    /// The manifest as the archive holds it.
    public var json: JSONValue {
        var members: [String: JSONValue] = [
            "format": .string(ArchiveLayout.format), "version": .int(ArchiveLayout.version), "container": .string(container),
            "createdAt": .int(createdAt),
            "files": .array(files.map { .object(["path": .string($0.path), "size": .int($0.size), "sha256": .string($0.sha256)]) }),
        ]
        if let user { members["user"] = .string(user) }
        return .object(members)
    }

    /// Reads a manifest, refusing one of another format or version, or whose entries are not
    /// archive paths with sizes and checksums, or list a file twice.
    public init(_ bytes: [UInt8], limits: ArchiveLimits = ArchiveLimits()) throws(StratusError) {
        let json: JSONValue
        do { json = try JSONParser.parse(bytes) } catch { throw ArchiveProblem.refuse("the manifest is not JSON (\(error))") }
        guard json["format"]?.stringValue == ArchiveLayout.format else { throw ArchiveProblem.refuse("the manifest is not a Stratus export's") }
        guard json["version"] == .int(ArchiveLayout.version) else {
            throw ArchiveProblem.refuse("the archive's format version is not \(ArchiveLayout.version)")
        }
        guard let container = json["container"]?.stringValue, !container.isEmpty, container.utf8.count <= 255 else {
            throw ArchiveProblem.refuse("the manifest names no container")
        }
        guard case .int(let createdAt)? = json["createdAt"] else { throw ArchiveProblem.refuse("the manifest has no createdAt") }
        guard case .array(let entries)? = json["files"], entries.count <= limits.maxFiles else {
            throw ArchiveProblem.refuse("the manifest lists no files, or more than \(limits.maxFiles)")
        }
        var files: [ArchiveFile] = []
        var seen = Set<String>()
        for entry in entries {
            guard let path = entry["path"]?.stringValue, case .int(let size)? = entry["size"], size >= 0,
                  let sha = entry["sha256"]?.stringValue, sha.utf8.count == 64, sha.utf8.allSatisfy({ $0.isLowerHex })
            else { throw ArchiveProblem.refuse("a manifest entry is not {path, size, sha256}") }
            try ArchivePath.check(path)
            guard path != ArchiveLayout.manifest, seen.insert(path).inserted else {
                throw ArchiveProblem.refuse("the manifest lists '\(ClientText.excerpt(path))' twice")
            }
            files.append(ArchiveFile(path: path, size: size, sha256: sha))
        }
        self.init(container: container, user: json["user"]?.stringValue, createdAt: createdAt, files: files)
    }

    /// Checks what the archive held (every file before the manifest, in order, with the size and
    /// checksum read) against the manifest: the same files, each once, with the same bytes.
    public func verify(_ found: [ArchiveFile]) throws(StratusError) {
        var listed: [String: ArchiveFile] = [:]
        for file in files { listed[file.path] = file }
        var seen = Set<String>()
        for file in found {
            guard seen.insert(file.path).inserted else { throw ArchiveProblem.refuse("the archive holds '\(ClientText.excerpt(file.path))' twice") }
            guard let expected = listed[file.path] else {
                throw ArchiveProblem.refuse("the archive holds '\(ClientText.excerpt(file.path))', which the manifest does not list")
            }
            guard expected.size == file.size else {
                throw ArchiveProblem.refuse("'\(ClientText.excerpt(file.path))' has \(file.size) bytes; the manifest says \(expected.size)")
            }
            guard expected.sha256 == file.sha256 else {
                throw ArchiveProblem.refuse("the checksum of '\(ClientText.excerpt(file.path))' does not match the manifest: the file is damaged")
            }
        }
        if let missing = files.first(where: { !seen.contains($0.path) }) {
            throw ArchiveProblem.refuse("'\(ClientText.excerpt(missing.path))' is in the manifest but not in the archive (truncated?)")
        }
    }
}

extension UInt8 {
    fileprivate var isLowerHex: Bool { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(self) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(self) }
}

/// Which user of the archive becomes which user of the target (`stratus import --map-user old=new`);
/// a user not named keeps their record name.
public struct ArchiveUserMapping: Sendable, Hashable {
    public var names: [String: String]

    /// Creates a mapping.
    public init(_ names: [String: String] = [:]) { self.names = names }

    /// Reads `old=new` pairs; refuses a malformed one, a name mapped twice, or two names mapped to one.
    public init(pairs: [String]) throws(StratusError) {
        var names: [String: String] = [:]
        for pair in pairs.prefix(10_001) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
            guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty, parts.allSatisfy({ $0.utf8.count <= 255 }) else {
                throw StratusError(.badRequest, "a user mapping is old=new (two user record names), got '\(ClientText.excerpt(pair))'")
            }
            guard names.updateValue(parts[1], forKey: parts[0]) == nil else {
                throw StratusError(.badRequest, "the user '\(ClientText.excerpt(parts[0]))' is mapped twice")
            }
        }
        guard pairs.count <= 10_000 else { throw StratusError(.badRequest, "at most 10000 user mappings") }
        guard Set(names.values).count == names.count else { throw StratusError(.badRequest, "two users are mapped to the same user") }
        self.names = names
    }

    /// The target's name of an archived user.
    public func callAsFunction(_ name: String) -> String { names[name] ?? name }
}
