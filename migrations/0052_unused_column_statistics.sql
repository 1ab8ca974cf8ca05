-- Planner statistics that no statement is planned with are no longer gathered. A record's fields
-- (`records.fields`), its wire form's head (`records.wire_head`) and the query index's copy of the
-- record (`query_index.records.record`) are read and written whole, and every condition on them is
-- on an expression of them (a field's value, the expiry), which the column's statistics do not
-- describe; the expressions the query index's indexes hold keep theirs. Their histograms and most
-- common values compared every sampled document with every other: about half of each analysis of
-- `records` and a quarter of each of the query index (docs/benchmarks.md, "Statistics nobody
-- plans with"), which the workers run after every burst of writes (`PlannerStatistics`).
ALTER TABLE records ALTER COLUMN fields SET STATISTICS 0, ALTER COLUMN wire_head SET STATISTICS 0;
ALTER TABLE query_index.records ALTER COLUMN record SET STATISTICS 0;
