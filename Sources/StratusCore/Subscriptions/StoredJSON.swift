/// What PostgreSQL's `jsonb` does with a field's stored value, for the operators the query index
/// uses: `->>` and `jsonb_array_elements_text` (text of a value), scalar equality and `@>`
/// (containment). The stored value is the field's `value` exactly as the event encoder writes it
/// into the record (`FieldCoding`), so a BYTES value is its base64 string and a reference is
/// `{"recordName", "action"}`.
enum StoredJSON {
    /// A field's stored `value`.
    static func value(of field: FieldValue) -> JSONValue {
        FieldCoding.encodeValue(field, numbersAsStrings: false)
    }

    /// A scalar's identity under `jsonb` equality: strings by their bytes (never Unicode
    /// equivalence), numbers by `numeric` value (1 equals 1.0). Nil for arrays and objects.
    enum ScalarKey: Hashable, Sendable {
        case string([UInt8])
        case number(StoredNumber)
        case bool(Bool)
        case null
    }

    /// The scalar key of a value; nil for containers.
    static func scalarKey(_ value: JSONValue) -> ScalarKey? {
        switch value {
        case .string(let text): .string(Array(text.utf8))
        case .int(let number): .number(StoredNumber(number))
        case .double(let number): .number(StoredNumber(stored: number))
        case .bool(let flag): .bool(flag)
        case .null: .null
        case .array, .object: nil
        }
    }

    /// The number a stored JSON number is; nil for anything else.
    static func number(_ value: JSONValue) -> StoredNumber? {
        switch value {
        case .int(let number): StoredNumber(number)
        case .double(let number): StoredNumber(stored: number)
        default: nil
        }
    }

    /// `->>` / `#>>` / `jsonb_array_elements_text`: a string's own text, anything else its `jsonb`
    /// text; nil for JSON null.
    static func text(_ value: JSONValue) -> String? {
        switch value {
        case .string(let text): return text
        case .null: return nil
        default:
            var output = ""
            write(value, to: &output)
            return output
        }
    }

    /// `jsonb`'s output: `", "` and `": "` separators, object keys shortest first then by bytes,
    /// numbers as `numeric` shows them.
    private static func write(_ value: JSONValue, to output: inout String) {
        switch value {
        case .null: output += "null"
        case .bool(let flag): output += flag ? "true" : "false"
        case .int, .double: output += number(value)?.text ?? "null"
        case .string(let text): escape(text, to: &output)
        case .array(let elements):
            output += "["
            for (index, element) in elements.enumerated() {
                if index > 0 { output += ", " }
                write(element, to: &output)
            }
            output += "]"
        case .object(let members):
            output += "{"
            let keys = members.keys.sorted { left, right in
                let l = left.utf8.count, r = right.utf8.count
                return l != r ? l < r : left.utf8.lexicographicallyPrecedes(right.utf8)
            }
            for (index, key) in keys.enumerated() {
                if index > 0 { output += ", " }
                escape(key, to: &output)
                output += ": "
                write(members[key] ?? .null, to: &output)
            }
            output += "}"
        }
    }

    /// PostgreSQL's `escape_json`.
    private static func escape(_ text: String, to output: inout String) {
        output += "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\u{08}": output += "\\b"
            case "\u{0C}": output += "\\f"
            case "\n": output += "\\n"
            case "\r": output += "\\r"
            case "\t": output += "\\t"
            case "\"": output += "\\\""
            case "\\": output += "\\\\"
            default:
                if scalar.value < 0x20 {
                    let hex = String(scalar.value, radix: 16)
                    output += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    output.unicodeScalars.append(scalar)
                }
            }
        }
        output += "\""
    }

    /// `container @> contained` for any two values (PostgreSQL's `JsonbDeepContains`): an object
    /// contains an object whose every member it contains; an array contains an array each of whose
    /// elements equals (scalars) or is contained by (containers) one of its elements; a scalar
    /// contains only an equal scalar; kinds never mix, except that an array contains a top-level scalar.
    static func contains(_ container: JSONValue, _ contained: JSONValue, topLevel: Bool = true) -> Bool {
        switch (container, contained) {
        case (.object(let outer), .object(let inner)):
            return inner.allSatisfy { key, value in
                guard let candidate = outer[key] else { return false }
                if let wanted = scalarKey(value) { return scalarKey(candidate) == wanted }
                return contains(candidate, value, topLevel: false)
            }
        case (.array(let outer), .array(let inner)):
            return inner.allSatisfy { element in
                if let wanted = scalarKey(element) { return outer.contains { scalarKey($0) == wanted } }
                return outer.contains { contains($0, element, topLevel: false) }
            }
        case (.array(let outer), _) where topLevel:
            guard let wanted = scalarKey(contained) else { return false }
            return outer.contains { scalarKey($0) == wanted }
        case (.array, _), (.object, _), (_, .array), (_, .object):
            return false
        default:
            return scalarKey(container) == scalarKey(contained)
        }
    }
}

/// A stored list prepared for many containment probes (`@> '[e]'` for each wanted element), so a
/// list comparison costs the list's length plus the wanted values, not their product: scalars are
/// looked up in a set, objects by the values of the members the wanted object names.
struct StoredListMembership {
    private let elements: [JSONValue]
    private let scalars: Set<StoredJSON.ScalarKey>
    /// Member names (sorted) → the projections of the stored objects that have all of them.
    private var projections: [[String]: Set<[StoredJSON.ScalarKey]>] = [:]

    /// Prepares a stored array's elements.
    init(_ elements: [JSONValue]) {
        self.elements = elements
        self.scalars = Set(elements.compactMap(StoredJSON.scalarKey))
    }

    /// Whether the array contains `wanted` as `value @> jsonb_build_array(wanted)` decides.
    mutating func contains(_ wanted: JSONValue) -> Bool {
        if let key = StoredJSON.scalarKey(wanted) { return scalars.contains(key) }
        guard case .object(let members) = wanted else {
            return StoredJSON.contains(.array(elements), .array([wanted]))
        }
        // An object with only scalar members is contained exactly when some stored object has
        // equal values under those names: one set per distinct set of names.
        let names = members.keys.sorted()
        var projection: [StoredJSON.ScalarKey] = []
        for name in names {
            guard let key = members[name].flatMap(StoredJSON.scalarKey) else {
                return StoredJSON.contains(.array(elements), .array([wanted]))
            }
            projection.append(key)
        }
        if projections[names] == nil {
            var found = Set<[StoredJSON.ScalarKey]>()
            for case .object(let stored) in elements {
                var values: [StoredJSON.ScalarKey] = []
                for name in names {
                    guard let value = stored[name], let key = StoredJSON.scalarKey(value) else { break }
                    values.append(key)
                }
                if values.count == names.count { found.insert(values) }
            }
            projections[names] = found
        }
        return projections[names]?.contains(projection) ?? false
    }
}
