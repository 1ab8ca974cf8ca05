/// The per-user storage quota (`WriteLimits.userQuotaBytes`): whether a transaction that changed a
/// user's stored bytes may commit, and which record to blame when it may not.
public enum StorageQuota {
    /// Whether a transaction that changed a user's stored bytes by `change` must have the user's
    /// total checked: only when there is a quota and the change adds bytes (a transaction that frees
    /// bytes always passes).
    public static func needsCheck(quota: Int64, change: Int64) -> Bool { quota > 0 && change > 0 }

    /// The refusal of a transaction that brought a user's stored bytes to `total` (read in the
    /// transaction, its own change included) by adding `change`, when `total` passes `quota`;
    /// nil when it does not. `applied` holds the transaction's records in the order written, each
    /// with what it changed its user's bytes by: the record blamed is the first at which the running
    /// total passes the quota (else the last that added bytes, else the last).
    public static func refusal(
        quota: Int64, total: Int64, change: Int64, applied: [(recordName: String, bytes: Int64)]
    ) -> (recordName: String, error: StratusError)? {
        guard quota > 0, total > quota else { return nil }
        var running = total - change
        var blamed = applied.last { $0.bytes > 0 } ?? applied.last ?? ("", 0)
        for entry in applied {
            running += entry.bytes
            if entry.bytes > 0, running > quota {
                blamed = entry
                break
            }
        }
        return (blamed.recordName, StratusError(.quotaExceeded,
            "Record '\(ClientText.excerpt(blamed.recordName))' would bring the user's stored records to \(max(running, total)) bytes; the storage quota is \(quota) bytes per user"))
    }
}
