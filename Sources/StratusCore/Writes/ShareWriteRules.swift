/// Where share records may be saved and how they tie to their roots, decided from what the write's
/// transaction read and saved. What a share's participants may change is `ShareRules`.
public enum ShareWriteRules {
    /// Refuses a share record saved anywhere but a custom zone of the private database.
    public static func checkPlace(_ recordName: String, scope: DatabaseScope, zone: ZoneID) throws(StratusError) {
        guard scope == .private, !zone.isDefaultZone else {
            throw StratusError(.badRequest, "Share record '\(ClientText.excerpt(recordName))': shares live in a custom zone of the private database")
        }
    }

    /// A refusal of `ShareRules`, for the share record `recordName`.
    public static func refused(_ recordName: String, _ error: StratusError) -> StratusError {
        StratusError(error.code, "Share record '\(ClientText.excerpt(recordName))': \(error.reason)")
    }

    /// Refuses a new share `recordName` in a zone that has shares of the other kind (`others`, the
    /// zone's shares and those saved before it in the transaction): a zone is shared whole or by
    /// hierarchies, never both (as CloudKit has it).
    public static func checkKind(_ recordName: String, others: [String], zoneName: String) throws(StratusError) {
        let zoneWide = ShareRecord.isZoneWide(recordName)
        guard others.contains(where: { ShareRecord.isZoneWide($0) != zoneWide && $0 != recordName }) else { return }
        throw StratusError(.badRequest, zoneWide
            ? "Zone '\(ClientText.excerpt(zoneName))' has record shares; a zone-wide share cannot join them"
            : "Zone '\(ClientText.excerpt(zoneName))' is shared whole (\(ShareRecord.zoneShareName)); it takes no record shares")
    }

    /// Refuses a record pointing its `share` field at `share` when `other`, another record of the
    /// same transaction, already roots it: a share has one root record.
    public static func checkOneRoot(_ recordName: String, share: String, other: String?) throws(StratusError) {
        guard let other, ExactName(other) != ExactName(recordName) else { return }
        throw StratusError(.badRequest,
            "Record '\(ClientText.excerpt(recordName))' points at share '\(ClientText.excerpt(share))', which '\(ClientText.excerpt(other))' already roots; a share has one root record")
    }

    /// The refusal of a hierarchy share saved with no root: none named by its `forRecord`, none
    /// saved in the same request pointing its share field at it, none stored.
    public static func missingRoot(_ share: String) -> StratusError {
        StratusError(.badRequest,
            "Share record '\(ClientText.excerpt(share))' needs its root record: name it in forRecord, or save it in the same request with its share field pointing at the share")
    }

    /// The root a record's `forRecord` names: only a hierarchy share (`cloudkit.share`, not the
    /// zone-wide share) takes the key, and its root is a record of the share's own zone.
    public static func forRecordRoot(_ recordName: String, recordType: String, forRecord: ShareRootName, zone: ZoneID) throws(StratusError) -> String {
        guard ShareRecord.isShare(recordType) else {
            throw StratusError(.badRequest, "Record '\(ClientText.excerpt(recordName))': forRecord is a key of share records (\(ShareRecord.recordType)) only")
        }
        guard !ShareRecord.isZoneWide(recordName) else {
            throw StratusError(.badRequest, "Share record '\(ClientText.excerpt(recordName))' shares its whole zone; it has no root record to name in forRecord")
        }
        if let zoneName = forRecord.zoneName, zoneName != zone.zoneName {
            throw StratusError(.badRequest,
                "Share record '\(ClientText.excerpt(recordName))': forRecord names a record of zone '\(ClientText.excerpt(zoneName))'; a share's root record is in the share's own zone '\(ClientText.excerpt(zone.zoneName))'")
        }
        return forRecord.recordName
    }

    /// The root a hierarchy share is written with: the record its `forRecord` names (`named`), the
    /// record of the same request whose share field points at it (`pointedBy`), or the root it has
    /// (`stored`). Two different roots are refused (a share has one root, which never changes), and
    /// none at all is `missingRoot`.
    public static func root(share: String, named: String?, pointedBy: String?, stored: String?) throws(StratusError) -> String {
        guard let named else {
            guard let root = pointedBy ?? stored else { throw missingRoot(share) }
            return root
        }
        if let pointedBy, ExactName(pointedBy) != ExactName(named) {
            throw StratusError(.badRequest,
                "Share record '\(ClientText.excerpt(share))' names '\(ClientText.excerpt(named))' in forRecord, but '\(ClientText.excerpt(pointedBy))' points its share field at it; a share has one root record")
        }
        if let stored, ExactName(stored) != ExactName(named) {
            throw StratusError(.badRequest,
                "Share record '\(ClientText.excerpt(share))' names '\(ClientText.excerpt(named))' in forRecord, but its root record is '\(ClientText.excerpt(stored))'; a share's root record does not change")
        }
        return named
    }

    /// Refuses the root a share's `forRecord` names when it does not exist (neither stored nor saved
    /// in the same request), or when another share already has it as its root (`rootedBy`: the
    /// shares rooted at it, stored or saved in the same request; the share itself may be among them).
    public static func checkNamedRoot(share: String, root: String, exists: Bool, rootedBy: [String]) throws(StratusError) {
        guard exists else {
            throw StratusError(.badRequest,
                "Share record '\(ClientText.excerpt(share))' names '\(ClientText.excerpt(root))' in forRecord, which does not exist in the share's zone")
        }
        if let other = rootedBy.first(where: { ExactName($0) != ExactName(share) }) {
            throw StratusError(.badRequest,
                "Share record '\(ClientText.excerpt(share))' names '\(ClientText.excerpt(root))' in forRecord, which share '\(ClientText.excerpt(other))' already shares; a record has one share")
        }
    }

    /// Refuses `root` pointing at the existing share `share`, whose stored root is `storedRoot`,
    /// unless it is that root.
    public static func checkStoredRoot(_ root: String, share: String, storedRoot: String?) throws(StratusError) {
        guard let storedRoot, ExactName(storedRoot) == ExactName(root) else {
            throw StratusError(.badRequest, "Record '\(ClientText.excerpt(root))' points at share '\(ClientText.excerpt(share))', which has another root record")
        }
    }
}

/// The root record a share's `forRecord` names, as sent: its name, and the zone its `zoneID` names
/// (nil when not sent).
public struct ShareRootName: Sendable, Hashable {
    public var recordName: String
    public var zoneName: String?

    public init(recordName: String, zoneName: String? = nil) {
        self.recordName = recordName
        self.zoneName = zoneName
    }
}
