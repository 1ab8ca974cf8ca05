-- Containers as tenants: an operator suspends a container (`stratus container suspend`, the
-- console) and every request for it is refused (ACCESS_DENIED) until it is resumed; its data stays.
-- A suspension or resumption notifies `stratus_access` (migration 0026), so every API process
-- forgets the access it kept and the next request reads the container's state.
ALTER TABLE containers ADD COLUMN suspended_at timestamptz;

CREATE TRIGGER containers_suspension_change AFTER UPDATE OF suspended_at ON containers
    FOR EACH ROW WHEN (OLD.suspended_at IS DISTINCT FROM NEW.suspended_at)
    EXECUTE FUNCTION notify_access_change();
