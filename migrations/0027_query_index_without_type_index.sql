-- The query index's type index (migration 0005) is a prefix of both ordered indexes: every key it
-- holds, (generation, container, environment, scope, owner, record_type, zone_name) under the same
-- NOT deleted predicate, leads query_index_records_modified and query_index_records_created too, so
-- any condition it serves either of them serves as well. No statement's plan chose it over them;
-- every row written to the index (a save, a rebuild's replay) still paid for its upkeep: about 5 %
-- of a rebuild's time (docs/benchmarks.md, "A redundant index dropped").
DROP INDEX IF EXISTS query_index.query_index_records_type;
