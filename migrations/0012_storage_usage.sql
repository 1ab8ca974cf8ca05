-- The bytes of records each user keeps, for the per-user storage quota (STRATUS_USER_QUOTA_BYTES):
-- a record counts the length of its fields as stored (octet_length(fields::text)) against its
-- owner — in the public database against its creator. Every write changes the total in the same
-- transaction as the records; writers add to one of 16 rows per user (`shard`, picked at random by
-- each transaction) so that concurrent writers of one user seldom touch the same row. The total is
-- the sum of the user's rows; a row alone may be negative.
--
-- Assets (issue #16) will add their bytes to the same rows in the transaction that stores them.
CREATE TABLE storage_usage (
    container    text NOT NULL,
    environment  text NOT NULL,
    owner        text NOT NULL,
    shard        smallint NOT NULL,
    bytes        bigint NOT NULL,
    PRIMARY KEY (container, environment, owner, shard)
);

-- Records stored before this migration count from now on. Stop every stratus-api of the previous
-- release first: its writes would not be counted.
INSERT INTO storage_usage (container, environment, owner, shard, bytes)
SELECT container, environment, CASE WHEN scope = 'public' THEN created_by ELSE owner END, 0, sum(octet_length(fields::text))
FROM records
GROUP BY 1, 2, 3;
