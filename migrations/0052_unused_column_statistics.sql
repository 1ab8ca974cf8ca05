-- Planner statistics that no statement is planned with are no longer gathered (docs/benchmarks.md,
-- "Statistics nobody plans with"). The workers analyse `records` and the query index after every
-- burst of writes (`PlannerStatistics`), and these were most of each analysis.
--
-- The documents: a record's fields (`records.fields`), its wire form's head (`records.wire_head`)
-- and the query index's copy of the record (`query_index.records.record`) are read and written
-- whole, and every condition on them is on an expression of them (a field's value, the expiry),
-- which a column's statistics do not describe. Their most common values and histograms compared
-- every sampled document with the others: about half of an analysis of `records` and a quarter of
-- one of the query index.
ALTER TABLE records ALTER COLUMN fields SET STATISTICS 0, ALTER COLUMN wire_head SET STATISTICS 0;
ALTER TABLE query_index.records ALTER COLUMN record SET STATISTICS 0;

-- The sort keys of the query index's partial indexes: PostgreSQL's planner takes an expression's
-- statistics only from an index without a predicate (a partial index's rows are not the table's),
-- so the statistics of these expression columns were computed at every analysis and never read.
-- The modification and creation orders' keys (columns 8 to 10), and each field index's (columns 5
-- to 7: the field's value and the two tie breakers; `QueryFieldIndexes` sets them on the indexes it
-- builds from now on).
ALTER INDEX query_index.query_index_records_modified
    ALTER COLUMN 8 SET STATISTICS 0, ALTER COLUMN 9 SET STATISTICS 0, ALTER COLUMN 10 SET STATISTICS 0;
ALTER INDEX query_index.query_index_records_created
    ALTER COLUMN 8 SET STATISTICS 0, ALTER COLUMN 9 SET STATISTICS 0, ALTER COLUMN 10 SET STATISTICS 0;
DO $$
DECLARE
    field_index text;
BEGIN
    FOR field_index IN
        SELECT f.index_name FROM query_index.field_indexes f
        WHERE to_regclass(format('query_index.%I', f.index_name)) IS NOT NULL
    LOOP
        EXECUTE format('ALTER INDEX query_index.%I ALTER COLUMN 5 SET STATISTICS 0, ALTER COLUMN 6 SET STATISTICS 0, '
                       || 'ALTER COLUMN 7 SET STATISTICS 0', field_index);
    END LOOP;
END
$$;
