-- The query index partitioned by generation (docs/query-index.md, "Generations and rebuilds"): a
-- rebuild loads its new generation into a partition of its own that holds only its primary key,
-- builds the generation's other indexes once the load is done (a build sorts once, where keeping
-- every index up to date row by row cost most of a rebuild's time), and drops the retired
-- generation's partition instead of deleting its rows one by one.
--
-- The existing table becomes the default partition as it is (its rows, its indexes and its field
-- indexes are not copied or rebuilt): it holds the generations from before this migration, and any
-- row written for a generation whose partition has gone (a writer whose snapshot predates a swap).
-- The next rebuild's generation gets a partition of its own, and its swap deletes the retired
-- generations' rows from the default partition.
--
-- Every statement names `query_index.records` as before; PostgreSQL routes each row to its
-- generation's partition and reads only the generation a query names. Storage settings
-- (autovacuum, a GIN index's pending list) belong to the partitions and their indexes.

ALTER TABLE query_index.records RENAME TO records_default;
ALTER INDEX query_index.records_pkey RENAME TO records_default_pkey;

CREATE TABLE query_index.records (LIKE query_index.records_default INCLUDING DEFAULTS) PARTITION BY LIST (generation);
ALTER TABLE query_index.records ADD CONSTRAINT records_pkey
    PRIMARY KEY (generation, container, environment, scope, owner, zone_name, record_name);
-- The key's index of the default partition is the existing one (attaching finds it; nothing is built).
ALTER TABLE query_index.records ATTACH PARTITION query_index.records_default DEFAULT;
