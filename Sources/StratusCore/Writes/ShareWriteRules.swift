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

    /// The refusal of a hierarchy share saved with no root: none saved in the same request, none stored.
    public static func missingRoot(_ share: String) -> StratusError {
        StratusError(.badRequest,
            "Share record '\(ClientText.excerpt(share))' needs its root record in the same request: a record whose share field points at it")
    }

    /// Refuses `root` pointing at the existing share `share`, whose stored root is `storedRoot`,
    /// unless it is that root.
    public static func checkStoredRoot(_ root: String, share: String, storedRoot: String?) throws(StratusError) {
        guard let storedRoot, ExactName(storedRoot) == ExactName(root) else {
            throw StratusError(.badRequest, "Record '\(ClientText.excerpt(root))' points at share '\(ClientText.excerpt(share))', which has another root record")
        }
    }
}
