/// What makes an import run again after it stopped (killed, or failed part-way) finish the load
/// instead of doing it twice: a record already in the target as the import would write it is left
/// alone — no new change tag, no second event, no second copy of its assets.
public enum ArchiveResume {
    /// Whether `existing`, the target's record of the name, is the archived record as the import
    /// writes it (`input`, created by `creator`): the same type, creator, parent, share,
    /// expiration (when the archive names one) and fields, an asset holding bytes of the same size
    /// and checksum (its receipt is the target's own). `checksum` gives the `fileChecksum` the import
    /// stores an archived asset's bytes with, by the archive's receipt (nil: not in the archive).
    public static func isLoaded(_ input: RecordInput, creator: String, existing: Record, checksum: (String) -> String?) -> Bool {
        guard existing.recordType == input.recordType, existing.created.userRecordName == creator,
              existing.parent == (input.parent ?? nil), existing.share == (input.share ?? nil),
              Set(existing.fields.keys) == Set(input.fields.keys)
        else { return false }
        if case .some(let expiration) = input.expirationDate, existing.expirationDate != expiration { return false }
        return input.fields.allSatisfy { name, value in existing.fields[name].map { same(value, $0, checksum) } ?? false }
    }

    private static func same(_ archived: FieldValue, _ stored: FieldValue, _ checksum: (String) -> String?) -> Bool {
        switch (archived, stored) {
        case (.asset(let archived), .asset(let stored)):
            guard let receipt = archived["receipt"]?.stringValue, let expected = checksum(receipt) else { return false }
            return stored["fileChecksum"]?.stringValue == expected && stored["size"] == archived["size"]
        case (.list(.asset, let archived), .list(.asset, let stored)):
            return archived.count == stored.count && zip(archived, stored).allSatisfy { same($0, $1, checksum) }
        default:
            return archived == stored
        }
    }

    /// Whether a test-only pause (`STRATUS_TEST_EXPORT_PAUSE_AFTER_RECORDS`,
    /// `STRATUS_TEST_IMPORT_PAUSE_AFTER_RECORDS`) stops an export or import once it has written
    /// `records` records, so that a test can kill the process half-way every time.
    public static func pauses(records: Int, pauseAfterRecords: Int?) -> Bool {
        guard let pauseAfterRecords, pauseAfterRecords >= 0 else { return false }
        return records >= pauseAfterRecords
    }
}
