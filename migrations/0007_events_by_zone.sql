-- records/query reports how many events of the queried zones the indexer has yet to apply: a count
-- of a zone's events above the indexer's checkpoint, which this index turns into a range scan.
CREATE INDEX events_zone_id ON events (zone_key, id);
