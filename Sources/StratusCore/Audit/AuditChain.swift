/// Checks the audit log's hash chain, entry by entry in sequence order, so a log of any length is
/// verified in pages without holding it: the first entry that was changed, removed, inserted or
/// moved is named.
public struct AuditChain: Sendable {
    /// Where the chain breaks: the first entry that is not what was appended, and why.
    public struct Break: Error, Equatable, Sendable, CustomStringConvertible {
        /// The sequence number of the first bad entry.
        public var sequence: Int64
        public var reason: String

        public var description: String { "entry \(sequence): \(reason)" }
    }

    /// The sequence number the next entry must have.
    public private(set) var nextSequence: Int64 = 1
    /// The hash of the last entry checked (`AuditEntry.genesisHash` before the first).
    public private(set) var lastHash: [UInt8] = AuditEntry.genesisHash

    public init() {}

    /// How many entries were checked.
    public var count: Int64 { nextSequence - 1 }

    /// Checks the next entry (in sequence order) against the ones before it.
    public mutating func check(_ entry: AuditEntry) throws(Break) {
        guard entry.sequence == nextSequence else {
            if entry.sequence > nextSequence {
                throw Break(sequence: nextSequence, reason: "it is missing (the next entry is \(entry.sequence)): entries were removed")
            }
            throw Break(sequence: entry.sequence, reason: "it comes after entry \(nextSequence - 1): entries were reordered")
        }
        guard entry.computedHash == entry.hash else {
            throw Break(sequence: entry.sequence, reason: "its contents do not match its hash: it was changed after it was appended")
        }
        guard entry.previousHash == lastHash else {
            throw Break(
                sequence: entry.sequence,
                reason: "its previous hash is not the hash of entry \(entry.sequence - 1): an earlier entry was replaced or the entries were reordered")
        }
        nextSequence += 1
        lastHash = entry.hash
    }

    /// Checks, after the last entry, the head the log keeps (the sequence and hash of its latest
    /// entry): entries removed from the end leave the head ahead of them.
    public func checkHead(sequence: Int64, hash: [UInt8]) throws(Break) {
        guard sequence == count else {
            if sequence > count {
                throw Break(sequence: count + 1, reason: "it is missing (the head names entry \(sequence)): entries were removed from the end")
            }
            throw Break(sequence: sequence + 1, reason: "the head names entry \(sequence) as the latest: entries were added around the log")
        }
        guard hash == lastHash else {
            throw Break(sequence: sequence, reason: "its hash is not the hash the head keeps: the latest entry was replaced")
        }
    }
}
