-- A user's deletion is a job (docs/operations.md, "Deleting a user"): one row per user being deleted
-- or deleted, naming the step it has reached (`UserDeletion.Step`) and how far into it, so a job
-- killed part-way is taken up where it stopped by running it again. Each step is idempotent.
CREATE TABLE user_deletions (
    container         text NOT NULL,
    user_record_name  text NOT NULL,
    step              text NOT NULL,
    zones_deleted     integer NOT NULL DEFAULT 0,
    records_deleted   bigint NOT NULL DEFAULT 0,
    shares_left       integer NOT NULL DEFAULT 0,
    assets_deleted    integer NOT NULL DEFAULT 0,
    events_redacted   bigint NOT NULL DEFAULT 0,
    requested_by      text NOT NULL,
    requested_at      timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz,
    PRIMARY KEY (container, user_record_name)
);
