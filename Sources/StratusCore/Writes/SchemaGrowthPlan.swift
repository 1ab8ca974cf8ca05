/// What the schema makes of one save, decided from the record type's schema as the save's
/// transaction read it: the fields as stored (`SchemaAdmission`) and, when the save brings new types
/// or fields to development's schema, the growth. Development grows; production, once deployed
/// (enforced), refuses what its schema lacks; production before its first deploy is left alone.
///
/// Growers of one record type take turns through the type's growth lock (`lock`): a save that must
/// grow a type whose lock its attempt does not hold goes on without growing it, and the attempt is
/// run again holding the lock.
public struct SchemaGrowthPlan: Sendable, Hashable {
    /// The record's fields as stored.
    public var fields: [String: FieldValue]
    /// The record type as later saves of the same transaction must see it, when this save grows it.
    public var grown: RecordTypeSchema?
    /// What to do about the growth, when the save grows the schema.
    public var growth: Growth?

    /// A save's growth of the schema.
    public enum Growth: Sendable, Hashable {
        /// Add `added` to the schema's tables (with `fieldsOnly`, only its fields: the type exists)
        /// and append `event`, which tells of it.
        case grow(added: RecordTypeSchema, fieldsOnly: Bool, event: NewEvent)
        /// This attempt does not hold the record type's growth lock: run it again holding it.
        case needsLock(String)
    }

    /// The growth lock of a record type: the key of the advisory lock its growers take in turn.
    public static func lock(container: String, environment: Environment, recordType: String) -> String {
        ["schema", container, environment.rawValue, recordType].joined(separator: "/")
    }

    /// Decides a save of `record` in `database`, against its type's schema (`schema`, nil when the
    /// schema lacks it) and whether the environment is `enforced`; `held` are the growth locks the
    /// attempt holds. Throws the schema's refusal (`SchemaAdmission`).
    public static func decide(
        _ record: Record, schema: RecordTypeSchema?, enforced: Bool, database: DatabaseID, held: Set<String>, causation: Causation
    ) throws(StratusError) -> SchemaGrowthPlan {
        let environment = database.environment
        let grows = environment == .development
        guard grows || enforced else { return SchemaGrowthPlan(fields: record.fields) }
        let admission = try SchemaAdmission.admit(recordType: record.recordType, fields: record.fields, schema: schema, grows: grows)
        guard admission.changesSchema else { return SchemaGrowthPlan(fields: admission.fields) }
        let added = admission.createdType ?? RecordTypeSchema(name: record.recordType, fields: admission.createdFields)
        var grown = schema ?? RecordTypeSchema(name: record.recordType)
        if admission.createdType != nil { grown = added } else { grown.fields += admission.createdFields }
        let lock = lock(container: database.container, environment: environment, recordType: record.recordType)
        guard held.contains(lock) else { return SchemaGrowthPlan(fields: admission.fields, grown: grown, growth: .needsLock(lock)) }
        let event = NewEvent(
            zoneKey: SchemaChanged.key(container: database.container, environment: environment), zoneSequence: nil,
            payload: SchemaChanged(container: database.container, environment: environment, cause: .save, added: [added]), causation: causation)
        return SchemaGrowthPlan(
            fields: admission.fields, grown: grown, growth: .grow(added: added, fieldsOnly: admission.createdType == nil, event: event))
    }

    /// Creates a plan.
    public init(fields: [String: FieldValue], grown: RecordTypeSchema? = nil, growth: Growth? = nil) {
        self.fields = fields
        self.grown = grown
        self.growth = growth
    }
}
