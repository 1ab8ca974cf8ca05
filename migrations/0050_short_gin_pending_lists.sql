-- The query index's two GIN indexes (the search vector and the fields' containment) collect new
-- entries in a pending list, up to 4 MB by default, until a vacuum or an insert past the limit
-- merges them into the index. Every search reads the whole list: right after a bulk load of 100,000
-- records a full-text query's statement took 4.9 ms against 3.8 once the list was merged
-- (docs/benchmarks.md). With at most 256 kB pending, the writer that passes the limit (the indexer)
-- merges the list in small batches as it goes, and a search reads at most 32 pages of it.
ALTER INDEX query_index.query_index_records_search SET (gin_pending_list_limit = 256);
ALTER INDEX query_index.query_index_records_fields SET (gin_pending_list_limit = 256);
