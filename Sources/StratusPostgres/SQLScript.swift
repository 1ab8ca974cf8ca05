import Foundation

/// Splits a migration file into statements, because PostgreSQL's extended query protocol (the one
/// the driver speaks) takes one statement at a time. Semicolons inside quotes, quoted identifiers,
/// comments and dollar-quoted bodies do not split.
enum SQLScript {
    static func statements(_ sql: String) -> [String] {
        let characters = Array(sql.unicodeScalars)
        var statements: [String] = []
        var current = String.UnicodeScalarView()
        var index = 0

        func flush() {
            let text = String(current).trimmingCharacters(in: .whitespacesAndNewlines)
            if !text.isEmpty, !onlyComments(text) { statements.append(text) }
            current = String.UnicodeScalarView()
        }

        while index < characters.count {
            let character = characters[index]
            let next = index + 1 < characters.count ? characters[index + 1] : nil
            switch character {
            case "-" where next == "-":
                while index < characters.count, characters[index] != "\n" { current.append(characters[index]); index += 1 }
                continue
            case "/" where next == "*":
                while index < characters.count, !(characters[index] == "*" && index + 1 < characters.count && characters[index + 1] == "/") {
                    current.append(characters[index]); index += 1
                }
                if index < characters.count { current.append(contentsOf: ["*", "/"]); index += 2 }
                continue
            case "'", "\"":
                current.append(character); index += 1
                while index < characters.count {
                    current.append(characters[index])
                    if characters[index] == character {
                        // A doubled quote is an escaped quote, not the end.
                        if index + 1 < characters.count, characters[index + 1] == character { current.append(character); index += 2; continue }
                        index += 1
                        break
                    }
                    index += 1
                }
                continue
            case "$":
                if let tag = dollarTag(characters, at: index) {
                    current.append(contentsOf: tag); index += tag.count
                    while index < characters.count, !matches(characters, at: index, tag) { current.append(characters[index]); index += 1 }
                    if index < characters.count { current.append(contentsOf: tag); index += tag.count }
                    continue
                }
            case ";":
                flush(); index += 1
                continue
            default:
                break
            }
            current.append(character)
            index += 1
        }
        flush()
        return statements
    }

    private static func dollarTag(_ characters: [Unicode.Scalar], at start: Int) -> [Unicode.Scalar]? {
        var index = start + 1
        while index < characters.count, characters[index] == "_" || characters[index].properties.isAlphabetic || ("0"..."9").contains(characters[index]) {
            index += 1
        }
        guard index < characters.count, characters[index] == "$" else { return nil }
        return Array(characters[start...index])
    }

    private static func matches(_ characters: [Unicode.Scalar], at index: Int, _ tag: [Unicode.Scalar]) -> Bool {
        index + tag.count <= characters.count && Array(characters[index..<index + tag.count]) == tag
    }

    private static func onlyComments(_ text: String) -> Bool {
        text.split(separator: "\n").allSatisfy { $0.trimmingCharacters(in: .whitespaces).hasPrefix("--") || $0.trimmingCharacters(in: .whitespaces).isEmpty }
    }
}
