-- Workers' checkpoints, one partition per worker. Each worker's transaction reads its checkpoint
-- row of the zone and writes it back under SERIALIZABLE, which watches what it read by index page:
-- with every worker's rows in one index, the rows of the four workers for one zone (a small or new
-- deployment's zones fit on one page) shared a page, so the four workers applying the same event
-- at once each read the page the others then wrote, and all but one failed and ran the event
-- again, with a back-off. In its own partition (its own index) a worker's reads and writes meet no
-- other worker's. Names not listed (a renamed or test worker) share the default partition.
ALTER TABLE worker_checkpoints RENAME TO worker_checkpoints_unpartitioned;
ALTER TABLE worker_checkpoints_unpartitioned RENAME CONSTRAINT worker_checkpoints_pkey TO worker_checkpoints_unpartitioned_pkey;

-- The same columns and defaults, and the same key (which holds the partition key).
CREATE TABLE worker_checkpoints (LIKE worker_checkpoints_unpartitioned INCLUDING DEFAULTS, PRIMARY KEY (worker, zone_key))
    PARTITION BY LIST (worker);

CREATE TABLE worker_checkpoints_indexer PARTITION OF worker_checkpoints FOR VALUES IN ('stratus-indexer');
CREATE TABLE worker_checkpoints_subscriptions PARTITION OF worker_checkpoints FOR VALUES IN ('stratus-subscriptions');
CREATE TABLE worker_checkpoints_gc PARTITION OF worker_checkpoints FOR VALUES IN ('stratus-gc');
CREATE TABLE worker_checkpoints_shares PARTITION OF worker_checkpoints FOR VALUES IN ('stratus-shares');
CREATE TABLE worker_checkpoints_other PARTITION OF worker_checkpoints DEFAULT;

INSERT INTO worker_checkpoints SELECT * FROM worker_checkpoints_unpartitioned;

DROP TABLE worker_checkpoints_unpartitioned;
