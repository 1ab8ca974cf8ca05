/// The public database's security roles as they apply to writes: records belong to their creators.
/// A caller creates a record of a type when a role it holds has CREATE on the type, and changes,
/// deletes or binds (with a reference that has an action) a record when a role it holds has WRITE
/// on the record's type, by default only `_creator`. Anywhere else every write is allowed.
public enum PublicWriteAccess {
    /// Whether `user` (nil: a caller with only the API token) may `permission` a record of
    /// `recordType` created by `creator` (nil: creating one), by the type's grants (`schema`; nil:
    /// the schema lacks the type, which then has CloudKit's default grants). `roles` are the user's
    /// custom roles, nil while not read: the answer is nil when it depends on them, and the caller
    /// reads them and asks again.
    public static func permits(
        _ permission: SchemaPermission, recordType: String, schema: RecordTypeSchema?, creator: String?, user: String?, roles: Set<String>?
    ) -> Bool? {
        let type = schema ?? RecordTypeSchema(name: recordType, grants: RecordTypeSchema.defaultGrants)
        if type.permits(permission, to: RoleHolder(userRecordName: user), creator: creator) { return true }
        guard type.grantsCustomRoles, let user else { return false }
        guard let roles else { return nil }
        return type.permits(permission, to: RoleHolder(userRecordName: user, roles: roles), creator: creator)
    }

    /// Whether a saved record's reference binds its target, which then must be the writer's to
    /// change: a reference with an action (VALIDATE blocks the target's deletion, DELETE_SELF ties
    /// the referrer's life to it) to another record.
    public static func binds(_ reference: Reference, from recordName: String) -> Bool {
        reference.action != .none && reference.recordName != recordName
    }

    /// The refusal of a change or delete of `recordName`, of `recordType`, created by another user.
    public static func changeDenied(_ recordName: String, recordType: String) -> StratusError {
        StratusError(.accessDenied,
            "Record '\(ClientText.excerpt(recordName))' belongs to another user: in the public database the security roles of record type '\(ClientText.excerpt(recordType))' let only its creator (and roles granted WRITE) change or delete it")
    }

    /// The refusal of the creation of `recordName`, of `recordType`, by a user without CREATE.
    public static func createDenied(_ recordName: String, recordType: String) -> StratusError {
        StratusError(.accessDenied,
            "Record '\(ClientText.excerpt(recordName))' cannot be created: in the public database no security role this user holds has CREATE on record type '\(ClientText.excerpt(recordType))'")
    }

    /// The refusal of a reference (`field` of `recordName`) that binds another user's record.
    public static func bindingDenied(field: String, recordName: String, reference: Reference) -> StratusError {
        StratusError(.accessDenied,
            "Field '\(field)' of record '\(ClientText.excerpt(recordName))' refers with \(reference.action.rawValue) to '\(ClientText.excerpt(reference.recordName))', which belongs to another user: in the public database such references may point only at your own records")
    }
}

/// What references with an action require of a write, whatever the database.
public enum ReferenceRules {
    /// Whether a saved record's reference needs a live target: a VALIDATE reference to another
    /// record (a record referring to itself is its own target).
    public static func needsLiveTarget(_ reference: Reference, from recordName: String) -> Bool {
        reference.action == .validate && reference.recordName != recordName
    }

    /// The refusal of a save whose VALIDATE reference (`field` of `recordName`) points at a record
    /// that does not exist.
    public static func missingTarget(field: String, recordName: String, target: String) -> StratusError {
        StratusError(.validatingReferenceError,
            "Field '\(field)' of record '\(ClientText.excerpt(recordName))' refers to '\(ClientText.excerpt(target))', which does not exist")
    }

    /// The refusal of a delete of `recordName`, which `referrer` (not deleted with it) points at with VALIDATE.
    public static func deleteBlocked(_ recordName: String, referrer: String) -> StratusError {
        StratusError(.validatingReferenceError,
            "Record '\(ClientText.excerpt(recordName))' cannot be deleted: '\(ClientText.excerpt(referrer))' refers to it with VALIDATE")
    }
}
