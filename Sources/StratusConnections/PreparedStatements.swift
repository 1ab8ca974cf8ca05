import Logging
import PostgresNIO
import Synchronization

/// The hot read statements of a process, run as named server-side prepared statements: PostgreSQL
/// parses each once per connection instead of at every call, and once a statement's generic plan
/// is as good as the ones made for its values (PostgreSQL decides after five executions), it stops
/// planning it too. For a sync page that is about 1.5 ms of a 2.4 ms statement.
///
/// A statement's name is derived from its text, so one text is one statement on every connection.
/// Only so many texts are prepared (`capacity`, for the process's lifetime; later ones run as
/// before), because a connection keeps what it prepared until it closes and the texts of some
/// statements (a query's) follow what clients ask. A statement that fails in a way its
/// preparation may have caused (a lock not granted while it was parsed, a plan invalidated by a
/// schema change) moves every name to a new epoch, since the client library keeps a failed
/// preparation's error for the name for the connection's lifetime; after `maxEpochs` such
/// failures statements run unprepared. A statement timeout does not count: parsing waits for
/// locks, and `lock_timeout` ends such a wait first, so a timed-out statement was executing.
public final class PreparedStatements: Sendable {
    /// A text's statement: its name and the types its values were bound with when it was first
    /// seen (what PostgreSQL is told when a connection prepares it; a null value's type is left to
    /// PostgreSQL to infer from where the value is used). So a value that may be nil must be bound
    /// with the type its place gives it (`$n::int[]` takes `[Int32]`, not `[Int]`): a first call
    /// with nil fixes the inferred type for every later call on that connection, and a later value
    /// of another type is refused (SQLSTATE 42804; `QueryIndexStore`'s generations).
    typealias Named = StatementRegistry<[PostgresDataType]>.Named

    /// Which texts are prepared under which names (`StatementRegistry`).
    private let state: Mutex<StatementRegistry<[PostgresDataType]>>
    /// How many statement texts are prepared at most.
    public let capacity: Int
    /// How many times names may move to a new epoch before statements run unprepared.
    public let maxEpochs: Int

    /// A registry preparing at most `capacity` texts (0: none).
    public init(capacity: Int = 256, maxEpochs: Int = 64) {
        let registry = StatementRegistry<[PostgresDataType]>(capacity: capacity, maxEpochs: maxEpochs)
        self.capacity = registry.capacity
        self.maxEpochs = registry.maxEpochs
        self.state = Mutex(registry)
    }

    /// The statement `query` is prepared as, or nil when it runs unprepared.
    func named(_ query: PostgresQuery) -> Named? {
        switch state.withLock({ $0.lookup(query.sql) }) {
        case .named(let named): return named
        case .unprepared: return nil
        case .unknown:
            // The client library keeps the values' types to itself; they are read once per text.
            guard let types = Self.types(of: query.binds) else { return nil }
            return state.withLock { $0.register(query.sql, types: types) }
        }
    }

    /// The PostgreSQL types of `binds`, in order, or nil when they cannot be read (the statement
    /// then runs unprepared, as it would without this registry).
    static func types(of binds: PostgresBindings) -> [PostgresDataType]? {
        guard let metadata = Mirror(reflecting: binds).descendant("metadata") else { return nil }
        var types: [PostgresDataType] = []
        for child in Mirror(reflecting: metadata).children {
            guard let type = Mirror(reflecting: child.value).descendant("dataType") as? PostgresDataType else { return nil }
            types.append(type)
        }
        return types.count == binds.count ? types : nil
    }

    /// Forgets every name after a failure that may be a preparation's: the next call of each text
    /// prepares it again under a new name.
    func failed(_ error: any Error, name: String, logger: Logger) {
        let sqlState = PostgresErrors.sqlState(error)
        if let moved = state.withLock({ $0.failed(sqlState: sqlState, name: name) }) {
            logger.notice("prepared statements renamed after a failure", metadata: ["sqlState": "\(sqlState ?? "")", "epoch": "\(moved)"])
        }
    }

    /// Texts prepared so far in this epoch (tests and metrics).
    package var count: Int { state.withLock { $0.count } }

    /// The texts prepared so far in this epoch (tests).
    package var texts: Set<String> { state.withLock { $0.texts } }
}

/// A prepared statement whose name and text are the calling task's: the client library takes both
/// from the statement's type, so one type serves every text.
private struct NamedStatement: PostgresPreparedStatement {
    struct Text: Sendable {
        var named: PreparedStatements.Named
        var sql: String
    }

    @TaskLocal static var text = Text(named: .init(name: "", types: []), sql: "")
    static var name: String { text.named.name }
    static var sql: String { text.sql }
    static var bindingDataTypes: [PostgresDataType] { text.named.types }

    typealias Row = PostgresRow
    var bindings: PostgresBindings

    func makeBindings() -> PostgresBindings { bindings }
    func decodeRow(_ row: PostgresRow) -> PostgresRow { row }
}

/// The rows of a statement run through `PreparedStatements`.
package typealias PreparedRows = AsyncThrowingMapSequence<PostgresRowSequence, PostgresRow>

extension PostgresConnection {
    /// Runs `query` as a prepared statement of `statements` (or as an unnamed one once the
    /// registry prepares no more). Use it for statements whose text is one of a few per call site;
    /// the values are bound as always.
    package func query(_ query: PostgresQuery, preparedIn statements: PreparedStatements, logger: Logger) async throws -> PreparedRows {
        guard let named = statements.named(query) else {
            return try await self.query(query, logger: logger).map { $0 }
        }
        do {
            return try await NamedStatement.$text.withValue(.init(named: named, sql: query.sql)) {
                try await self.execute(NamedStatement(bindings: query.binds), logger: logger)
            }
        } catch {
            statements.failed(error, name: named.name, logger: logger)
            throw error
        }
    }
}
