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

/// What a schema adds to another that it may replace: shown before an operator confirms a deploy.
public enum SchemaAddition: Sendable, Hashable, CustomStringConvertible {
    /// A record type the target lacks.
    case recordType(String)
    /// A field the target's record type lacks.
    case field(recordType: String, field: String, type: SchemaFieldType)
    /// A field whose index flags change.
    case indexes(recordType: String, field: String, from: FieldIndexes, to: FieldIndexes)
    /// A role the target lacks.
    case role(String)
    /// A record type whose grants change.
    case grants(recordType: String)

    public var description: String {
        switch self {
        case .recordType(let type): "record type \(type) would be added"
        case .field(let type, let field, let fieldType): "field \(field) (\(fieldType)) would be added to record type \(type)"
        case .indexes(let type, let field, let from, let to):
            "field \(field) of record type \(type) would change indexes from \(Self.words(from)) to \(Self.words(to))"
        case .role(let role): "role \(role) would be created"
        case .grants(let type): "the grants of record type \(type) would change"
        }
    }

    static func words(_ indexes: FieldIndexes) -> String {
        indexes.isEmpty ? "none" : indexes.schemaWords.joined(separator: " ")
    }
}

extension Schema {
    /// Everything this schema adds to or changes in `current` without losing anything (the other
    /// half of `problems(replacing:)`), in name order.
    public func additions(to current: Schema) -> [SchemaAddition] {
        let current = current.normalized
        var additions: [SchemaAddition] = normalized.roles.filter { !current.roles.contains($0) }.map { .role($0) }
        for type in normalized.recordTypes {
            guard let old = current.recordType(named: type.name) else {
                additions.append(.recordType(type.name))
                continue
            }
            for field in type.fields {
                guard let before = old.field(named: field.name) else {
                    additions.append(.field(recordType: type.name, field: field.name, type: field.type))
                    continue
                }
                if before.indexes != field.indexes {
                    additions.append(.indexes(recordType: type.name, field: field.name, from: before.indexes, to: field.indexes))
                }
            }
            if Set(old.grants) != Set(type.grants) { additions.append(.grants(recordType: type.name)) }
        }
        return additions
    }
}
