-- Database change tokens as snapshots (docs/decisions.md, "A database token is a snapshot").
--
-- Every row a database's change history reports carries `changed_xid`: the transaction that last
-- changed it, set to `pg_current_xact_id()` by the statement that already writes the row:
--   zones                 every write of a zone (creation, deletion, re-creation, a write of its
--                         records, which moves its change counter; a share saved or deleted);
--   shares                a share's row written (how a participant gains or loses access);
--   shared_zone_tracking  the share fan-out told the participant of a change, or of access lost.
-- `zones/changes` and `changes/database` hand out the snapshot they read in
-- (`pg_current_snapshot()`); a row was changed after a token iff the token's snapshot does not see
-- its `changed_xid`. No writer waits for anything new, and no row is written that was not before.
--
-- No index: the zone row's update on every record write stays HOT (a sync reads a database's zones
-- by the primary key, as it did before). Rows written before this migration carry 0, which every
-- snapshot sees: a token is only ever issued after this migration commits.
ALTER TABLE zones ADD COLUMN changed_xid xid8 NOT NULL DEFAULT '0';
ALTER TABLE zones ALTER COLUMN changed_xid SET DEFAULT pg_current_xact_id();
ALTER TABLE shares ADD COLUMN changed_xid xid8 NOT NULL DEFAULT '0';
ALTER TABLE shares ALTER COLUMN changed_xid SET DEFAULT pg_current_xact_id();
ALTER TABLE shared_zone_tracking ADD COLUMN changed_xid xid8 NOT NULL DEFAULT '0';
ALTER TABLE shared_zone_tracking ALTER COLUMN changed_xid SET DEFAULT pg_current_xact_id();

-- Whether a row stamped by transaction `changed` was changed after a snapshot (its xmin, xmax and
-- transactions in progress): the snapshot does not see the transaction. Written by hand rather than
-- with `pg_visible_in_snapshot`, as a first sync starts from the snapshot that sees nothing (0:0:),
-- which `pg_snapshot` cannot hold. Inlined into the statements that call it.
CREATE FUNCTION changed_after(changed xid8, xmin xid8, xmax xid8, in_progress xid8[]) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN changed >= xmin AND (changed >= xmax OR changed = ANY (in_progress));
