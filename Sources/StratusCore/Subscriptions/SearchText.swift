/// The token side of CONTAINS_ALL_TOKENS / CONTAINS_ANY_TOKENS in memory.
///
/// The query index matches `to_tsquery` of `RecordQuery.tokens` against `to_tsvector` of the
/// text under the generation's text search configuration (`simple` unless a rebuild chose
/// another). In memory a text's tokens are `RecordQuery.tokens` of it — the same lower-cased runs
/// of letters and digits the query is made of — with no stop words and no stemming, as `simple`
/// has neither; a token of 2,047 bytes or more is dropped, as PostgreSQL drops such words.
/// PostgreSQL's parser keeps some runs together that this splits (`john@example.com`,
/// `example.com`, `1.5`, `v1.2.3`, `/usr/bin` are single lexemes there), so a query token such as
/// `example` matches that text here but not in the index; `docs/query-index.md` lists the
/// differences.
enum SearchText {
    /// The most text of one record that full-text search indexes, in UTF-8 bytes (the indexer's too).
    static let maxSearchBytes = SearchDocument.maxBytes

    /// PostgreSQL ignores words of this many bytes or more (`MAXSTRLEN`).
    static let maxTokenBytes = 2_047

    /// The distinct tokens of a text.
    static func tokens(_ text: String) -> Set<String> {
        Set(RecordQuery.tokens(text).lazy.filter { $0.utf8.count < maxTokenBytes })
    }

    /// The tokens of a record's search document (what `___all` searches), as the indexer builds it.
    static func documentTokens(_ record: Record, policy: IndexPolicy) -> Set<String> {
        tokens(SearchDocument.text(of: record, policy: policy))
    }

    /// Whether a token set satisfies the query's tokens: all of them, or any.
    static func satisfies(_ document: Set<String>, _ wanted: [String], all: Bool) -> Bool {
        all ? wanted.allSatisfy(document.contains) : wanted.contains(where: document.contains)
    }
}
