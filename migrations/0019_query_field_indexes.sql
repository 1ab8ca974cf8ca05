-- Field indexes of the query index (docs/query-index.md "Field indexes"): a record type's QUERYABLE
-- or SORTABLE scalar field gets a B-tree of its own on query_index.records, partial to its
-- container, environment and record type, so a range on the field and a sort by it read one page of
-- the index instead of every record of the type. `stratus schema import|deploy|reset|build-indexes`
-- build them (CREATE INDEX CONCURRENTLY: writes and the indexer go on meanwhile) and drop the ones the
-- schema no longer asks for. This table names them; the indexes themselves are PostgreSQL's.
CREATE TABLE query_index.field_indexes (
    container    text NOT NULL,
    environment  text NOT NULL,
    record_type  text NOT NULL,
    field_name   text NOT NULL,
    index_name   text NOT NULL UNIQUE,
    PRIMARY KEY (container, environment, record_type, field_name)
);
