/// The bookkeeping of the prepared-statement registry (`PreparedStatements` carries it out under a
/// lock), pure: which statement texts are prepared under which names, how many texts may be, and
/// when every name moves to a new epoch.
///
/// A text is prepared when first seen, while fewer than `capacity` texts were prepared in the
/// process's lifetime (later texts run unprepared); its name is `stratus_<epoch>_<n>`, the n-th text
/// of the epoch. A failure that a preparation may have caused (`mayStickToName`) moves every name to
/// a new epoch, once per failing name (another call may have moved them already); after `maxEpochs`
/// moves every statement runs unprepared. `Types` is what a name carries beside it: the types its
/// values were bound with when the text was first seen.
public struct StatementRegistry<Types: Sendable>: Sendable {
    /// A text's statement: its name and the types of its values.
    public struct Named: Sendable {
        public var name: String
        public var types: Types
    }

    /// What the registry knows of a text.
    public enum Lookup: Sendable {
        /// Prepared under this name.
        case named(Named)
        /// Runs unprepared: the epochs ran out.
        case unprepared
        /// Not seen in this epoch: `register(_:types:)` it with its values' types.
        case unknown
    }

    /// How many statement texts are prepared at most in the process's lifetime.
    public let capacity: Int
    /// How many times names may move to a new epoch before statements run unprepared.
    public let maxEpochs: Int
    /// How many times the names moved.
    public private(set) var epoch = 0
    /// How many texts were prepared in every epoch so far.
    public private(set) var prepared = 0
    private var names: [String: Named] = [:]

    /// A registry preparing at most `capacity` texts (0: none), moving its names at most `maxEpochs` times.
    public init(capacity: Int, maxEpochs: Int) {
        self.capacity = max(0, capacity)
        self.maxEpochs = max(0, maxEpochs)
    }

    /// Texts prepared in this epoch.
    public var count: Int { names.count }
    /// The texts prepared in this epoch.
    public var texts: Set<String> { Set(names.keys) }

    /// What the registry knows of `sql`.
    public func lookup(_ sql: String) -> Lookup {
        guard epoch < maxEpochs else { return .unprepared }
        return names[sql].map(Lookup.named) ?? .unknown
    }

    /// The statement `sql` is prepared as, naming it when it is new and there is room; nil when it
    /// runs unprepared.
    public mutating func register(_ sql: String, types: Types) -> Named? {
        switch lookup(sql) {
        case .named(let named): return named
        case .unprepared: return nil
        case .unknown:
            guard prepared < capacity else { return nil }
            prepared += 1
            let named = Named(name: "stratus_\(epoch)_\(names.count)", types: types)
            names[sql] = named
            return named
        }
    }

    /// The statement `name` failed with `sqlState`: when a preparation may have caused it and the
    /// name is still current, every name moves to a new epoch, returned; otherwise nil.
    public mutating func failed(sqlState: String?, name: String) -> Int? {
        guard let sqlState, Self.mayStickToName.contains(sqlState) else { return nil }
        guard names.values.contains(where: { $0.name == name }) else { return nil }
        epoch += 1
        names = [:]
        return epoch
    }

    /// SQLSTATEs with which a preparation can fail while the text itself is sound: a lock not
    /// granted in time (a table being altered), a cached plan invalidated by a changed table, a
    /// prepared statement missing on the server, a dropped table, and a transaction already failed
    /// (writes and workers prepare statements inside their transactions: one prepared after an
    /// earlier statement of the transaction failed is refused for that reason alone). A statement
    /// timeout does not count: parsing waits for locks, and `lock_timeout` ends such a wait first,
    /// so a timed-out statement was executing.
    public static var mayStickToName: Set<String> { ["55P03", "0A000", "26000", "42P01", "25P02"] }
}
