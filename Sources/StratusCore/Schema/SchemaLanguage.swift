/// CloudKit's schema language (the text `.ckdb` files that CloudKit's command line tools export and
/// import): `DEFINE SCHEMA`, then `CREATE ROLE name;` and `RECORD TYPE name ( fields and grants );`.
public enum SchemaLanguage {
    /// How large a schema file may be, so a hostile file costs a bounded amount.
    public struct Limits: Sendable, Hashable {
        /// Bytes of text.
        public var maxBytes = 2_000_000
        /// Record types.
        public var maxRecordTypes = 1_000
        /// Fields of one record type, system fields included.
        public var maxFields = 1_000
        /// Roles, and grants of one record type.
        public var maxRoles = 200
        /// Bytes of one name.
        public var maxNameBytes = 255
        /// The defaults.
        public init() {}
    }

    /// Words the grammar gives a meaning; a name that is one is printed in quotes.
    static let keywords: Set<String> = Set([
        "DEFINE", "SCHEMA", "CREATE", "ROLE", "RECORD", "TYPE", "GRANT", "READ", "WRITE", "TO", "LIST", "ENCRYPTED",
        "PREFERRED", "AS", "QUERYABLE", "SORTABLE", "SEARCHABLE",
    ]).union(SchemaFieldType.Base.allCases.map(\.rawValue))

    /// Reads a schema file. Errors name the line and column of what is wrong.
    public static func parse(_ text: String, limits: Limits = Limits()) throws(SchemaLanguageError) -> Schema {
        guard text.utf8.count <= limits.maxBytes else {
            throw SchemaLanguageError(line: 1, column: 1, message: "the schema is \(text.utf8.count) bytes; the limit is \(limits.maxBytes)")
        }
        var parser = SchemaParser(tokens: try SchemaLexer.tokens(of: text), limits: limits)
        return try parser.schema()
    }

    /// Reads one field type as the schema language writes it (`LIST<INT64>`, …); nil if it is none.
    public static func fieldType(_ text: String) -> SchemaFieldType? {
        guard text.utf8.count <= 64, let tokens = try? SchemaLexer.tokens(of: text) else { return nil }
        var parser = SchemaParser(tokens: tokens, limits: Limits())
        guard let type = try? parser.dataType(), parser.current.kind == .end else { return nil }
        return type
    }

    /// Writes a schema as CloudKit's tools do: roles, then record types by name, each with its system
    /// fields first, then its fields by name (names aligned), then its grants.
    public static func print(_ schema: Schema) -> String {
        let schema = schema.normalized
        var text = "DEFINE SCHEMA\n"
        if !schema.roles.isEmpty { text += "\n" }
        for role in schema.roles { text += "    CREATE ROLE \(name(role));\n" }
        for type in schema.recordTypes {
            text += "\n    RECORD TYPE \(name(type.name)) (\n"
            let width = type.fields.map { name($0.name).count }.max() ?? 0
            var lines: [String] = type.fields.map { field in
                let printed = name(field.name)
                let words = [field.type.description] + field.indexes.schemaWords
                return printed + String(repeating: " ", count: width - printed.count + 1) + words.joined(separator: " ")
            }
            lines += type.grants.map { "GRANT \($0.permissions.schemaWords.joined(separator: ", ")) TO \(name($0.role))" }
            text += lines.map { "        " + $0 }.joined(separator: ",\n")
            text += "\n    );\n"
        }
        return text
    }

    /// A name as the schema language writes it: bare when it is a plain identifier that is no
    /// keyword, else in double quotes (a quote inside doubled).
    static func name(_ name: String) -> String {
        if isPlainIdentifier(name), !keywords.contains(name.uppercased()) { return name }
        return "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }

    /// A letter, then letters, digits and underscores (ASCII).
    static func isPlainIdentifier(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, SchemaLexer.isLetter(first) else { return false }
        return name.unicodeScalars.allSatisfy { SchemaLexer.isLetter($0) || SchemaLexer.isDigit($0) || $0 == "_" }
    }
}

/// A schema file that cannot be read: where, and why.
public struct SchemaLanguageError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The line, from 1.
    public var line: Int
    /// The column (in characters), from 1.
    public var column: Int
    /// What is wrong.
    public var message: String

    /// Creates an error.
    public init(line: Int, column: Int, message: String) {
        self.line = line
        self.column = column
        self.message = message
    }

    public var description: String { "line \(line), column \(column): \(message)" }

    /// The error as a client sees it.
    public var stratusError: StratusError { StratusError(.badRequest, "The schema is not valid: \(description)") }
}

struct SchemaToken: Equatable {
    enum Kind: Equatable {
        /// A bare word: a keyword or a name.
        case word(String)
        /// A name in double quotes.
        case quoted(String)
        /// One of `( ) , ; < >`.
        case symbol(Character)
        case end
    }
    var kind: Kind
    var line: Int
    var column: Int

    var describe: String {
        switch kind {
        case .word(let word): "'\(word.prefix(64))'"
        case .quoted(let name): "\"\(name.prefix(64))\""
        case .symbol(let symbol): "'\(symbol)'"
        case .end: "the end of the file"
        }
    }
}

/// Splits schema text into tokens; comments (`//` or `--` to the end of the line) and white space go.
enum SchemaLexer {
    static func isLetter(_ scalar: Unicode.Scalar) -> Bool { ("a"..."z").contains(scalar) || ("A"..."Z").contains(scalar) }
    static func isDigit(_ scalar: Unicode.Scalar) -> Bool { ("0"..."9").contains(scalar) }

    static func tokens(of text: String) throws(SchemaLanguageError) -> [SchemaToken] {
        let scalars = Array(text.unicodeScalars)
        var tokens: [SchemaToken] = []
        var index = 0
        var line = 1
        var lineStart = 0
        func column(_ at: Int) -> Int { at - lineStart + 1 }
        while index < scalars.count {
            let scalar = scalars[index]
            if scalar == "\n" {
                index += 1
                line += 1
                lineStart = index
            } else if scalar == " " || scalar == "\t" || scalar == "\r" {
                index += 1
            } else if (scalar == "/" || scalar == "-"), index + 1 < scalars.count, scalars[index + 1] == scalar {
                while index < scalars.count, scalars[index] != "\n" { index += 1 }
            } else if "(),;<>".unicodeScalars.contains(scalar) {
                tokens.append(SchemaToken(kind: .symbol(Character(scalar)), line: line, column: column(index)))
                index += 1
            } else if scalar == "\"" {
                let start = index
                var name = String.UnicodeScalarView()
                index += 1
                while true {
                    guard index < scalars.count, scalars[index] != "\n" else {
                        throw SchemaLanguageError(line: line, column: column(start), message: "a quoted name is not closed on its line")
                    }
                    if scalars[index] == "\"" {
                        if index + 1 < scalars.count, scalars[index + 1] == "\"" {
                            name.append("\"")
                            index += 2
                            continue
                        }
                        index += 1
                        break
                    }
                    guard scalars[index].value >= 0x20, scalars[index].value != 0x7F else {
                        throw SchemaLanguageError(line: line, column: column(index), message: "a quoted name may not contain control characters")
                    }
                    name.append(scalars[index])
                    index += 1
                }
                guard !name.isEmpty else { throw SchemaLanguageError(line: line, column: column(start), message: "a quoted name may not be empty") }
                tokens.append(SchemaToken(kind: .quoted(String(name)), line: line, column: column(start)))
            } else if isLetter(scalar) || isDigit(scalar) || scalar == "_" {
                let start = index
                while index < scalars.count, isLetter(scalars[index]) || isDigit(scalars[index]) || scalars[index] == "_" { index += 1 }
                tokens.append(SchemaToken(kind: .word(String(String.UnicodeScalarView(scalars[start..<index]))), line: line, column: column(start)))
            } else {
                throw SchemaLanguageError(line: line, column: column(index), message: "unexpected character '\(Character(scalar))'")
            }
        }
        tokens.append(SchemaToken(kind: .end, line: line, column: column(index)))
        return tokens
    }
}

/// A recursive-descent parser over the grammar of Apple's schema language reference.
struct SchemaParser {
    let tokens: [SchemaToken]
    let limits: SchemaLanguage.Limits
    var position = 0

    init(tokens: [SchemaToken], limits: SchemaLanguage.Limits) {
        self.tokens = tokens
        self.limits = limits
    }

    var current: SchemaToken { tokens[position] }

    mutating func advance() -> SchemaToken {
        let token = tokens[position]
        if position < tokens.count - 1 { position += 1 }
        return token
    }

    func error(_ message: String, at token: SchemaToken? = nil) -> SchemaLanguageError {
        let token = token ?? current
        return SchemaLanguageError(line: token.line, column: token.column, message: message)
    }

    /// Whether the current token is the keyword (any case).
    func at(_ keyword: String) -> Bool {
        if case .word(let word) = current.kind { return word.uppercased() == keyword }
        return false
    }

    func at(symbol: Character) -> Bool { current.kind == .symbol(symbol) }

    mutating func expect(_ keyword: String, _ context: String) throws(SchemaLanguageError) {
        guard at(keyword) else { throw error("expected \(keyword) \(context), found \(current.describe)") }
        _ = advance()
    }

    mutating func expect(symbol: Character, _ context: String) throws(SchemaLanguageError) {
        guard at(symbol: symbol) else { throw error("expected '\(symbol)' \(context), found \(current.describe)") }
        _ = advance()
    }

    /// A name, bare or quoted.
    mutating func name(_ what: String) throws(SchemaLanguageError) -> (String, SchemaToken) {
        let token = advance()
        let text: String
        switch token.kind {
        case .word(let word):
            guard SchemaLanguage.isPlainIdentifier(word) else { throw error("\(what) '\(word.prefix(64))' must start with a letter (or be quoted)", at: token) }
            text = word
        case .quoted(let quoted): text = quoted
        default: throw error("expected \(what), found \(token.describe)", at: token)
        }
        guard text.utf8.count <= limits.maxNameBytes else {
            throw error("\(what) is \(text.utf8.count) bytes; the limit is \(limits.maxNameBytes)", at: token)
        }
        return (text, token)
    }

    mutating func schema() throws(SchemaLanguageError) -> Schema {
        try expect("DEFINE", "at the start of the schema")
        try expect("SCHEMA", "after DEFINE")
        var schema = Schema()
        var grantedRoles: [(String, SchemaToken)] = []
        while current.kind != .end {
            if at("CREATE") {
                _ = advance()
                try expect("ROLE", "after CREATE")
                let (role, token) = try name("a role name")
                guard !Schema.builtInRoles.contains(role) else { throw error("role \(role) is built in", at: token) }
                guard !schema.roles.contains(role) else { throw error("role \(role.prefix(64)) is created twice", at: token) }
                guard schema.roles.count < limits.maxRoles else { throw error("more than \(limits.maxRoles) roles", at: token) }
                schema.roles.append(role)
            } else if at("RECORD") {
                guard schema.recordTypes.count < limits.maxRecordTypes else { throw error("more than \(limits.maxRecordTypes) record types") }
                let (type, grants) = try recordType()
                guard schema.recordType(named: type.name) == nil else {
                    throw error("record type \(type.name.prefix(64)) is defined twice", at: grants.typeToken)
                }
                schema.recordTypes.append(type)
                grantedRoles += grants.roles
            } else {
                throw error("expected CREATE ROLE or RECORD TYPE, found \(current.describe)")
            }
            if current.kind == .end { break }
            try expect(symbol: ";", "after a definition")
        }
        for (role, token) in grantedRoles where !Schema.builtInRoles.contains(role) && !schema.roles.contains(role) {
            throw error("role \(role.prefix(64)) is neither built in (_world, _icloud, _creator) nor created with CREATE ROLE", at: token)
        }
        return schema
    }

    mutating func recordType() throws(SchemaLanguageError) -> (RecordTypeSchema, (typeToken: SchemaToken, roles: [(String, SchemaToken)])) {
        try expect("RECORD", "")
        try expect("TYPE", "after RECORD")
        let (typeName, typeToken) = try name("a record type name")
        try expect(symbol: "(", "after the record type's name")
        var type = RecordTypeSchema(name: typeName)
        var roles: [(String, SchemaToken)] = []
        while !at(symbol: ")") {
            if at("GRANT") {
                _ = advance()
                var permissions: SchemaPermission = []
                repeat {
                    if !permissions.isEmpty { _ = advance() }
                    let token = advance()
                    let word: String = if case .word(let word) = token.kind { word.uppercased() } else { "" }
                    switch word {
                    case "READ": permissions.insert(.read)
                    case "CREATE": permissions.insert(.create)
                    case "WRITE": permissions.insert(.write)
                    default: throw error("expected READ, CREATE or WRITE, found \(token.describe)", at: token)
                    }
                } while at(symbol: ",") && isPermission(tokens[min(position + 1, tokens.count - 1)])
                try expect("TO", "after the granted permissions")
                let (role, token) = try name("a role name")
                guard type.grants.count < limits.maxRoles else { throw error("more than \(limits.maxRoles) grants", at: token) }
                type.grants.append(SchemaGrant(permissions, to: role))
                roles.append((role, token))
            } else {
                let (fieldName, token) = try name("a field name")
                guard type.field(named: fieldName) == nil else { throw error("field \(fieldName.prefix(64)) is defined twice", at: token) }
                guard type.fields.count < limits.maxFields else { throw error("more than \(limits.maxFields) fields", at: token) }
                let typeToken = current
                let fieldType = try dataType()
                if fieldName.hasPrefix("___") {
                    guard let system = RecordTypeSchema.systemFields.first(where: { $0.name == fieldName }) else {
                        throw error("\(fieldName.prefix(64)) is no system field; names starting with ___ are reserved", at: token)
                    }
                    guard system.type == fieldType else { throw error("system field \(fieldName) is \(system.type)", at: typeToken) }
                }
                var indexes: FieldIndexes = []
                while true {
                    let flagToken = current
                    let flag: FieldIndexes
                    if at("QUERYABLE") { flag = .queryable } else if at("SEARCHABLE") { flag = .searchable } else if at("SORTABLE") { flag = .sortable } else { break }
                    _ = advance()
                    guard fieldType.allowedIndexes.contains(flag) else {
                        throw error("a field of type \(fieldType) cannot be \(flag.schemaWords.joined())", at: flagToken)
                    }
                    indexes.insert(flag)
                }
                type.fields.append(SchemaField(name: fieldName, type: fieldType, indexes: indexes))
            }
            if at(symbol: ",") {
                _ = advance()
            } else if !at(symbol: ")") {
                throw error("expected ',' or ')' in record type \(typeName.prefix(64)), found \(current.describe)")
            }
        }
        _ = advance()
        // A hand-written file may leave the system fields out: every record type has them.
        for system in RecordTypeSchema.systemFields where type.field(named: system.name) == nil {
            type.fields.append(SchemaField(name: system.name, type: system.type))
        }
        guard type.fields.count <= limits.maxFields else {
            throw error("record type \(typeName.prefix(64)) has more than \(limits.maxFields) fields with its system fields", at: typeToken)
        }
        return (type, (typeToken, roles))
    }

    func isPermission(_ token: SchemaToken) -> Bool {
        if case .word(let word) = token.kind { return ["READ", "CREATE", "WRITE"].contains(word.uppercased()) }
        return false
    }

    mutating func dataType() throws(SchemaLanguageError) -> SchemaFieldType {
        if at("LIST") {
            _ = advance()
            try expect(symbol: "<", "after LIST")
            var type = try primitiveType()
            try expect(symbol: ">", "to close LIST<")
            type.isList = true
            return type
        }
        return try primitiveType()
    }

    mutating func primitiveType() throws(SchemaLanguageError) -> SchemaFieldType {
        let encrypted = at("ENCRYPTED")
        if encrypted { _ = advance() }
        let token = advance()
        guard case .word(let word) = token.kind, let base = SchemaFieldType.Base(rawValue: word.uppercased()) else {
            throw error("expected a field type (\(SchemaFieldType.Base.allCases.map(\.rawValue).joined(separator: ", ")) or LIST<…>), found \(token.describe)", at: token)
        }
        if encrypted, !SchemaFieldType.Base.encryptable.contains(base) { throw error("\(base.rawValue) cannot be ENCRYPTED", at: token) }
        var preferred: SchemaFieldType.Base?
        if base == .number, at("PREFERRED") {
            _ = advance()
            try expect("AS", "after PREFERRED")
            let choice = advance()
            guard case .word(let word) = choice.kind, let chosen = SchemaFieldType.Base(rawValue: word.uppercased()), chosen == .int64 || chosen == .double else {
                throw error("expected INT64 or DOUBLE after PREFERRED AS, found \(choice.describe)", at: choice)
            }
            preferred = chosen
        }
        return SchemaFieldType(base, encrypted: encrypted, preferred: preferred)
    }
}
