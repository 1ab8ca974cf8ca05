import Foundation
import StratusCore
import StratusTesting

/// Checks a JSON value against a shape of the compatibility fixtures' shape language (see
/// `CompatibilityTests` for the language). Every problem names the key path where it was found.
struct ShapeChecker {
    /// The named shapes (`"@name"`), from `Compatibility/_shapes.json`.
    let named: [String: JSONValue]

    /// What is wrong with `value` for `shape`; empty when it matches.
    func problems(_ value: JSONValue, _ shape: JSONValue, at path: String = "body") -> [String] {
        switch shape {
        case .string(let name): primitive(value, name, at: path)
        case .object(let rule): compound(value, rule, at: path)
        default: ["\(path): the fixture's shape \(Self.render(shape)) is neither a name nor a dictionary"]
        }
    }

    // MARK: - Named and primitive shapes

    private func primitive(_ value: JSONValue, _ name: String, at path: String) -> [String] {
        if name.hasPrefix("@") {
            guard let shape = named[String(name.dropFirst())] else { return ["\(path): the fixture names an unknown shape \(name)"] }
            return problems(value, shape, at: path)
        }
        let matches: Bool
        switch (name, value) {
        case ("any", _), ("string", .string), ("number", .int), ("number", .double), ("bool", .bool), ("object", .object), ("array", .array):
            matches = true
        case ("base64", .string(let text)):
            return Self.isStandardBase64(text) ? [] : ["\(path): '\(text.prefix(60))' is not standard padded base64"]
        case ("string", _), ("number", _), ("bool", _), ("object", _), ("array", _), ("base64", _):
            matches = false
        default:
            return ["\(path): the fixture names an unknown primitive shape '\(name)'"]
        }
        return matches ? [] : ["\(path): expected \(name), got \(value.kind) \(Self.render(value))"]
    }

    /// Standard base64 with padding: A–Z a–z 0–9 + /, then at most two `=`, length a multiple of 4.
    static func isStandardBase64(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard !bytes.isEmpty, bytes.count % 4 == 0 else { return false }
        let padding = bytes.reversed().prefix { $0 == UInt8(ascii: "=") }.count
        guard padding <= 2 else { return false }
        let alphabet = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
        return bytes.dropLast(padding).allSatisfy(alphabet.contains) && Data(base64Encoded: text) != nil
    }

    // MARK: - Dictionary shapes

    /// The keys each form of dictionary shape may use; any other key is a typo in the fixture.
    private static let forms: [(key: String, allowed: Set<String>)] = [
        ("equals", ["equals"]), ("enum", ["enum"]), ("includes", ["includes"]), ("all-of", ["all-of"]), ("any-of", ["any-of"]),
        ("array-of", ["array-of", "count", "minCount", "contains", "elements"]),
        ("type", ["type", "required", "optional", "absent", "each", "sameValue", "when"]),
    ]

    private func compound(_ value: JSONValue, _ rule: [String: JSONValue], at path: String) -> [String] {
        guard let form = Self.forms.first(where: { rule[$0.key] != nil }) else {
            return ["\(path): the fixture's shape has none of the known forms: \(rule.keys.sorted())"]
        }
        let unknown = Set(rule.keys).subtracting(form.allowed)
        guard unknown.isEmpty else { return ["\(path): the fixture's '\(form.key)' shape has unknown keys \(unknown.sorted())"] }
        switch form.key {
        case "equals":
            return value == rule["equals"] ? [] : ["\(path): expected \(Self.render(rule["equals"] ?? .null)), got \(Self.render(value))"]
        case "enum":
            let options = rule["enum"]?.arrayValue ?? []
            return options.contains(value) ? [] : ["\(path): expected one of \(Self.render(.array(options))), got \(Self.render(value))"]
        case "includes":
            let part = rule["includes"]?.stringValue ?? ""
            guard let text = value.stringValue else { return ["\(path): expected a string including '\(part)', got \(value.kind)"] }
            return text.contains(part) ? [] : ["\(path): '\(text.prefix(200))' does not include '\(part)'"]
        case "all-of":
            return (rule["all-of"]?.arrayValue ?? []).flatMap { problems(value, $0, at: path) }
        case "any-of":
            let shapes = rule["any-of"]?.arrayValue ?? []
            var all: [String] = []
            for shape in shapes {
                let found = problems(value, shape, at: path)
                if found.isEmpty { return [] }
                all.append(found.joined(separator: ", "))
            }
            return ["\(path): matches none of \(shapes.count) alternatives (\(all.joined(separator: " | ")))"]
        case "array-of":
            return array(value, rule, at: path)
        default:
            guard rule["type"] == .string("object") else { return ["\(path): the only dictionary 'type' is \"object\""] }
            return object(value, rule, at: path)
        }
    }

    private func object(_ value: JSONValue, _ rule: [String: JSONValue], at path: String) -> [String] {
        guard case .object(let members) = value else { return ["\(path): expected an object, got \(value.kind) \(Self.render(value))"] }
        var found: [String] = []
        for (key, shape) in (rule["required"]?.objectValue ?? [:]).sorted(by: { $0.key < $1.key }) {
            if let member = members[key] { found += problems(member, shape, at: Self.join(path, key)) } else { found.append("\(Self.join(path, key)): missing required key") }
        }
        for (key, shape) in (rule["optional"]?.objectValue ?? [:]).sorted(by: { $0.key < $1.key }) {
            if let member = members[key] { found += problems(member, shape, at: Self.join(path, key)) }
        }
        for key in (rule["absent"]?.arrayValue ?? []).compactMap(\.stringValue) where members[key] != nil {
            found.append("\(Self.join(path, key)): present, but must be absent")
        }
        if let each = rule["each"] {
            for (key, member) in members.sorted(by: { $0.key < $1.key }) { found += problems(member, each, at: Self.join(path, key)) }
        }
        for pair in (rule["sameValue"]?.arrayValue ?? []).map({ $0.arrayValue?.compactMap(\.stringValue) ?? [] }) where pair.count == 2 {
            if let first = members[pair[0]], let second = members[pair[1]], first != second {
                found.append("\(path): \(pair[0]) and \(pair[1]) must be equal, got \(Self.render(first)) and \(Self.render(second))")
            }
        }
        // Conditional rules: when `key` holds one of `in`, the keys of `require` must be present with their shapes.
        for condition in (rule["when"]?.arrayValue ?? []).compactMap(\.objectValue) {
            guard let key = condition["key"]?.stringValue, let member = members[key], (condition["in"]?.arrayValue ?? []).contains(member) else { continue }
            for (required, shape) in (condition["require"]?.objectValue ?? [:]).sorted(by: { $0.key < $1.key }) {
                if let present = members[required] {
                    found += problems(present, shape, at: Self.join(path, required))
                } else {
                    found.append("\(Self.join(path, required)): missing, but required when \(key) is \(Self.render(member))")
                }
            }
        }
        return found
    }

    private func array(_ value: JSONValue, _ rule: [String: JSONValue], at path: String) -> [String] {
        guard case .array(let elements) = value else { return ["\(path): expected an array, got \(value.kind) \(Self.render(value))"] }
        var found = elements.enumerated().flatMap { index, element in problems(element, rule["array-of"] ?? .string("any"), at: "\(path)[\(index)]") }
        if case .int(let count)? = rule["count"], elements.count != Int(count) {
            found.append("\(path): expected \(count) elements, got \(elements.count)")
        }
        if case .int(let minimum)? = rule["minCount"], elements.count < Int(minimum) {
            found.append("\(path): expected at least \(minimum) elements, got \(elements.count)")
        }
        for (index, shape) in (rule["contains"]?.arrayValue ?? []).enumerated()
        where !elements.contains(where: { problems($0, shape, at: path).isEmpty }) {
            found.append("\(path): no element matches contains[\(index)] \(Self.render(shape))")
        }
        if let positional = rule["elements"]?.arrayValue {
            if positional.count != elements.count { found.append("\(path): expected \(positional.count) elements in order, got \(elements.count)") }
            for (index, (element, shape)) in zip(elements, positional).enumerated() { found += problems(element, shape, at: "\(path)[\(index)]") }
        }
        return found
    }

    // MARK: - Helpers

    static func join(_ path: String, _ key: String) -> String { "\(path).\(key)" }

    /// Compact JSON text of a value, for messages.
    static func render(_ value: JSONValue) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let text = (try? encoder.encode(value)).flatMap { String(data: $0, encoding: .utf8) } ?? "\(value)"
        return text.count > 300 ? String(text.prefix(300)) + "…" : text
    }
}

extension JSONValue {
    var objectValue: [String: JSONValue]? {
        if case .object(let members) = self { members } else { nil }
    }

    var arrayValue: [JSONValue]? {
        if case .array(let elements) = self { elements } else { nil }
    }

    /// The value at a dotted key path (`records.0.recordChangeTag`; numbers index arrays).
    func value(at keyPath: String) -> JSONValue? {
        keyPath.split(separator: ".").reduce(Optional(self)) { current, key in
            switch current {
            case .object(let members)?: members[String(key)]
            case .array(let elements)?: Int(key).flatMap { elements.indices.contains($0) ? elements[$0] : nil }
            default: nil
            }
        }
    }
}
