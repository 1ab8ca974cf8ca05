/// Expiring records in SQL: every reader compares `records.expires_at` with the database's clock,
/// so a record is gone from the moment it expires, whether or not `stratus-gc` has deleted it yet.
enum RecordExpirySQL {
    /// Now in milliseconds since 1970: the start of the statement's transaction, so every statement
    /// of one snapshot (a sync page and its token) agrees on it.
    static let now = "(extract(epoch from now()) * 1000)::bigint"
    /// The condition a live (not expired) row of `records` meets.
    static let live = "(expires_at IS NULL OR expires_at > \(now))"
}
