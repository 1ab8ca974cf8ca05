-- A database's change history as positions (docs/decisions.md, "A database token is a position").
--
-- Every transaction that changes a zone's row (its creation, deletion, re-creation, or a write of
-- its records that moves its change counter) stamps the row with a new `database_position`, drawn
-- by `next_database_position` from one sequence while the transaction holds a shared advisory lock
-- on its database until it ends. `zones/changes` and `changes/database` take the position a
-- database has reached with `database_position_reached`, which waits for that lock exclusively: by
-- then every writer of the database that drew a position so far has committed (or rolled back),
-- and every later writer draws a greater one. So a token holding a position p, with the zones whose
-- positions lie in (p, reached] read after it, misses no change however transactions commit, and
-- stays the same size whatever the number of zones.
--
-- The lock is shared among writers (they never wait for each other on it); only a reader waits, for
-- the writers of that one database in flight at that moment, and writers arriving meanwhile queue
-- behind it for as long as it takes to read the sequence.
CREATE SEQUENCE database_positions;

CREATE FUNCTION next_database_position(database_key text) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('database-position/' || database_key, 0));
    RETURN nextval('database_positions');
END
$$;

CREATE FUNCTION database_position_reached(database_key text) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    reached bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('database-position/' || database_key, 0));
    SELECT CASE WHEN is_called THEN last_value ELSE 0 END INTO reached FROM database_positions;
    RETURN reached;
END
$$;

-- Every existing zone gets a position of its own (a page boundary never falls between equals).
ALTER TABLE zones ADD COLUMN database_position bigint;
UPDATE zones SET database_position = nextval('database_positions');
-- No default: a writer that does not draw a position fails instead of hiding a change.
ALTER TABLE zones ALTER COLUMN database_position SET NOT NULL;

-- The shared database's change history: for every participant and every owner's zone they hold
-- or held, the position of the zone's last change in their shared database, under the key of that
-- shared database (`container/environment/shared/participant`). Triggers stamp it from the two
-- tables the shared database is read from, so no writer can forget it: an accepted participant's
-- row of a share written or removed (an acceptance, a removal, a share's or its zone's deletion,
-- which cascade), and the share fan-out's tracking (a change the participant is told of).
CREATE TABLE shared_database_changes (
    container          text   NOT NULL,
    environment        text   NOT NULL,
    -- The participant.
    user_record_name   text   NOT NULL,
    -- The owner's zone (in the owner's private database).
    owner              text   NOT NULL,
    zone_name          text   NOT NULL,
    database_position  bigint NOT NULL,
    PRIMARY KEY (container, environment, user_record_name, owner, zone_name)
);

-- A page of a participant's history, in position order.
CREATE INDEX shared_database_changes_position ON shared_database_changes (container, environment, user_record_name, database_position);

-- Stamps ($1 container, $2 environment, $3 participant, $4 owner, $5 zone name) with a new position.
CREATE FUNCTION stamp_shared_database_change(text, text, text, text, text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO shared_database_changes (container, environment, user_record_name, owner, zone_name, database_position)
    VALUES ($1, $2, $3, $4, $5, next_database_position($1 || '/' || $2 || '/shared/' || $3))
    ON CONFLICT ON CONSTRAINT shared_database_changes_pkey DO UPDATE SET database_position = EXCLUDED.database_position;
END
$$;

-- Stamps the shared database of a row's participant for the row's zone: the row as it was
-- (TG_ARGV[0] = 'old') or as it is.
CREATE FUNCTION shared_database_row_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    changed record;
BEGIN
    IF TG_ARGV[0] = 'old' THEN changed := OLD; ELSE changed := NEW; END IF;
    PERFORM stamp_shared_database_change(changed.container, changed.environment, changed.user_record_name, changed.owner, changed.zone_name);
    RETURN NULL;
END
$$;

-- A row of a participant who accepted, written or removed: the zone joined or left their shared
-- database (a share's writes replace its rows, so an unchanged participant is stamped too).
CREATE TRIGGER share_participants_held_before AFTER UPDATE OR DELETE ON share_participants
    FOR EACH ROW WHEN (OLD.acceptance_status = 'ACCEPTED' AND OLD.type <> 'OWNER' AND OLD.user_record_name IS NOT NULL AND OLD.scope = 'private')
    EXECUTE FUNCTION shared_database_row_changed('old');
CREATE TRIGGER share_participants_held_after AFTER INSERT OR UPDATE ON share_participants
    FOR EACH ROW WHEN (NEW.acceptance_status = 'ACCEPTED' AND NEW.type <> 'OWNER' AND NEW.user_record_name IS NOT NULL AND NEW.scope = 'private')
    EXECUTE FUNCTION shared_database_row_changed('new');

-- The fan-out told the participant of a change (an event applied again leaves the row as it was:
-- no change to tell of).
CREATE TRIGGER shared_zone_tracking_inserted AFTER INSERT ON shared_zone_tracking
    FOR EACH ROW WHEN (NEW.scope = 'private')
    EXECUTE FUNCTION shared_database_row_changed('new');
CREATE TRIGGER shared_zone_tracking_moved AFTER UPDATE ON shared_zone_tracking
    FOR EACH ROW WHEN (NEW.scope = 'private' AND (OLD.active IS DISTINCT FROM NEW.active OR OLD.change_sequence IS DISTINCT FROM NEW.change_sequence))
    EXECUTE FUNCTION shared_database_row_changed('new');

-- What the shared databases hold today, each at a position of its own.
INSERT INTO shared_database_changes (container, environment, user_record_name, owner, zone_name, database_position)
SELECT container, environment, user_record_name, owner, zone_name, nextval('database_positions')
FROM (
    SELECT container, environment, user_record_name, owner, zone_name FROM share_participants
    WHERE acceptance_status = 'ACCEPTED' AND type <> 'OWNER' AND user_record_name IS NOT NULL AND scope = 'private'
    UNION
    SELECT container, environment, user_record_name, owner, zone_name FROM shared_zone_tracking WHERE scope = 'private'
) AS held;
