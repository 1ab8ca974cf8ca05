/// What the schema makes of a record being saved: the fields as stored, and what the save adds to
/// a development schema.
public struct SchemaAdmission: Sendable, Hashable {
    /// The record's fields, a value the schema reads as another type converted to it (an integer
    /// sent without `type` into a DOUBLE field, an empty list into a list of another type).
    public var fields: [String: FieldValue]
    /// The record type the save creates (development), with its system fields and default grants.
    public var createdType: RecordTypeSchema?
    /// The fields the save adds to an existing record type (development), with their default flags.
    public var createdFields: [SchemaField]

    /// Whether the save changes the schema.
    public var changesSchema: Bool { createdType != nil || !createdFields.isEmpty }

    /// Checks a record's fields against its record type's schema (`nil`: the type does not exist).
    /// With `grows` (development) unknown types and fields are created with CloudKit's default
    /// flags; without (production) they are refused with the errors CloudKit gives. A value of
    /// another type than its field's is refused in both, naming the field.
    /// A record type may grow to `maxFields` fields (system fields included), so its schema, and
    /// the event that announces the growth, stay bounded.
    public static func admit(
        recordType name: String, fields: [String: FieldValue], schema: RecordTypeSchema?, grows: Bool,
        maxFields: Int = SchemaLanguage.Limits().maxFields
    ) throws(StratusError) -> SchemaAdmission {
        var admission = SchemaAdmission(fields: fields, createdType: nil, createdFields: [])
        guard let schema else {
            guard grows else { throw StratusError(.badRequest, "Cannot create new type \(ClientText.excerpt(name)) in production schema") }
            var created = RecordTypeSchema.created(name: name)
            for (field, value) in fields.sorted(by: { Schema.byteOrder($0.key, $1.key) }) {
                try checkName(field, recordType: name)
                let type = SchemaFieldType(valueType: value.type)
                created.fields.append(SchemaField(name: field, type: type, indexes: type.defaultIndexes))
            }
            try checkSize(created.fields.count, recordType: name, maxFields: maxFields)
            admission.createdType = created
            return admission
        }
        for (field, value) in fields.sorted(by: { Schema.byteOrder($0.key, $1.key) }) {
            guard let declared = schema.field(named: field) else {
                guard grows else {
                    throw StratusError(.badRequest, "Cannot create or modify field '\(ClientText.excerpt(field))' in record type '\(ClientText.excerpt(name))' in production schema")
                }
                try checkName(field, recordType: name)
                let type = SchemaFieldType(valueType: value.type)
                admission.createdFields.append(SchemaField(name: field, type: type, indexes: type.defaultIndexes))
                continue
            }
            if declared.type.accepts(value.type) { continue }
            if let converted = convert(value, to: declared.type) {
                admission.fields[field] = converted
                continue
            }
            throw StratusError(.badRequest,
                "invalid attempt to set value type \(value.type) for field '\(ClientText.excerpt(field))' for type '\(ClientText.excerpt(name))', defined to be: \(declared.type)")
        }
        if !admission.createdFields.isEmpty { try checkSize(schema.fields.count + admission.createdFields.count, recordType: name, maxFields: maxFields) }
        return admission
    }

    private static func checkSize(_ count: Int, recordType: String, maxFields: Int) throws(StratusError) {
        guard count <= maxFields else {
            throw StratusError(.limitExceeded, "Record type '\(ClientText.excerpt(recordType))' would have \(count) fields with its system fields; the limit is \(maxFields)")
        }
    }

    /// Names starting with `___` belong to the system fields, which no record sets.
    private static func checkName(_ field: String, recordType: String) throws(StratusError) {
        guard !field.hasPrefix("___") else {
            throw StratusError(.badRequest, "Field '\(ClientText.excerpt(field))' of record type '\(ClientText.excerpt(recordType))': names starting with ___ are reserved for system fields")
        }
    }

    /// A value a client may have sent without `type` that the field's type reads exactly: an integer
    /// as a DOUBLE, a list of integers as a list of DOUBLE, an empty list as any list.
    private static func convert(_ value: FieldValue, to type: SchemaFieldType) -> FieldValue? {
        // A sealed value is never made from a plain one.
        if type.encrypted { return nil }
        let target: FieldType.Base = switch type.base {
        case .double: .double
        case .number: type.preferred == .double ? .double : .int64
        case .string: .string
        case .int64: .int64
        case .timestamp: .timestamp
        case .bytes: .bytes
        case .reference: .reference
        case .asset: .asset
        case .location: .location
        }
        switch value {
        case .int64(let number) where !type.isList && target == .double:
            return Double(exactly: number).map(FieldValue.double)
        case .list(_, let elements) where type.isList && elements.isEmpty:
            return .list(target, [])
        case .list(.int64, let elements) where type.isList && target == .double:
            var doubles: [FieldValue] = []
            for case .int64(let number) in elements {
                guard let double = Double(exactly: number) else { return nil }
                doubles.append(.double(double))
            }
            return doubles.count == elements.count ? .list(.double, doubles) : nil
        default:
            return nil
        }
    }
}
