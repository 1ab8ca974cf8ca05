-- The audit log: every administrative action of the admin CLI and the console, append-only and
-- hash-chained (docs/operations.md, "Audit log"). Each entry's hash covers its fields and the hash
-- of the entry before it (`AuditEntry.canonical`), so changing, removing or reordering a past entry
-- is found by `stratus audit verify`.
CREATE TABLE audit_log (
    sequence bigint PRIMARY KEY CHECK (sequence > 0),
    recorded_at timestamptz NOT NULL,
    channel text NOT NULL,
    actor text NOT NULL,
    origin text NOT NULL,
    request_id text NOT NULL,
    action text NOT NULL,
    container text NOT NULL,
    subject text NOT NULL,
    details text NOT NULL,
    previous_hash bytea NOT NULL CHECK (octet_length(previous_hash) = 32),
    hash bytea NOT NULL CHECK (octet_length(hash) = 32)
);

-- The filters of `stratus audit` and the console page, newest first.
CREATE INDEX audit_log_container ON audit_log (container, sequence);
CREATE INDEX audit_log_actor ON audit_log (actor, sequence);
CREATE INDEX audit_log_action ON audit_log (action, sequence);

-- The head: the sequence and hash of the latest entry, one row. An appender locks it (FOR UPDATE),
-- so appenders in any number of processes take their turns and each links to the one before; and
-- entries removed from the end leave the head ahead of the log, which verification reports.
CREATE TABLE audit_head (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    sequence bigint NOT NULL,
    hash bytea NOT NULL CHECK (octet_length(hash) = 32)
);
INSERT INTO audit_head (only_row, sequence, hash) VALUES (true, 0, '\x0000000000000000000000000000000000000000000000000000000000000000');

-- Entries are never changed or removed: the application's statements that would are refused.
-- (Someone who can disable the trigger can still change the table; verification finds that.)
CREATE FUNCTION audit_log_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit log is append-only: % is refused', TG_OP USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log FOR EACH ROW EXECUTE FUNCTION audit_log_refuse_change();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log FOR EACH STATEMENT EXECUTE FUNCTION audit_log_refuse_change();
