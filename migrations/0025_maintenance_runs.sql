-- Maintenance runs: each `reindex` and each worker `replay`, started from the CLI or the console,
-- records itself here while it works: its state, the events it has read and the event id it has
-- reached of the log's last id when it began, and when it last reported. The console's progress is
-- read from these rows (written by the run itself, never estimated), and the partial unique index
-- refuses a second run of the same kind (`lock_key`) while one runs, whichever process started it.
CREATE TABLE maintenance_runs (
    id           bigserial   PRIMARY KEY,
    -- `reindex` or `replay`.
    kind         text        NOT NULL CHECK (kind IN ('reindex', 'replay')),
    -- The worker a replay rebuilds; `query-index` for a reindex.
    subject      text        NOT NULL,
    -- Runs with the same key never run at once: a reindex and a replay of stratus-indexer both
    -- build a query index generation (`query-index`); a replay of another worker is keyed by it.
    lock_key     text        NOT NULL,
    state        text        NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'finished', 'failed')),
    -- Who started it: `cli`, or `console:<operator login>`.
    started_by   text        NOT NULL,
    events       bigint      NOT NULL DEFAULT 0,
    position     bigint      NOT NULL DEFAULT 0,
    target       bigint      NOT NULL DEFAULT 0,
    started_at   timestamptz NOT NULL DEFAULT now(),
    -- The last progress or heartbeat: a run that stops reporting (its process ended) is stale.
    reported_at  timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    -- Why a failed run failed (an operator-readable message, never SQL or secrets).
    error        text
);
CREATE UNIQUE INDEX maintenance_runs_one_running ON maintenance_runs (lock_key) WHERE state = 'running';
CREATE INDEX maintenance_runs_recent ON maintenance_runs (id DESC);
