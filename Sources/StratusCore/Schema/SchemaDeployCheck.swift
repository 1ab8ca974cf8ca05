/// Why a schema may not replace another: what would be lost. A deploy (development to production),
/// and an import (a file to development), may only add.
public enum SchemaChangeProblem: Sendable, Hashable, CustomStringConvertible {
    /// A record type the target has and the new schema has not.
    case deletedRecordType(String)
    /// A field the target has and the new schema's record type has not.
    case deletedField(recordType: String, field: String)
    /// A field whose type the new schema changes.
    case changedType(recordType: String, field: String, from: SchemaFieldType, to: SchemaFieldType)

    public var description: String {
        switch self {
        case .deletedRecordType(let type): "record type \(type) would be deleted"
        case .deletedField(let type, let field): "field \(field) of record type \(type) would be deleted"
        case .changedType(let type, let field, let from, let to): "field \(field) of record type \(type) would change type from \(from) to \(to)"
        }
    }
}

extension Schema {
    /// Every problem with replacing `current` by this schema, in name order; empty when the change
    /// only adds (record types, fields, index flags, roles and grants may change freely).
    public func problems(replacing current: Schema) -> [SchemaChangeProblem] {
        var problems: [SchemaChangeProblem] = []
        for type in current.normalized.recordTypes {
            guard let replacement = recordType(named: type.name) else {
                problems.append(.deletedRecordType(type.name))
                continue
            }
            for field in type.fields {
                guard let new = replacement.field(named: field.name) else {
                    problems.append(.deletedField(recordType: type.name, field: field.name))
                    continue
                }
                if new.type != field.type {
                    problems.append(.changedType(recordType: type.name, field: field.name, from: field.type, to: new.type))
                }
            }
        }
        return problems
    }
}
