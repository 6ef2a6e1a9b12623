-- Waits on a sandbox row (a connect during a suspend, a retried create during the first
-- attempt) wake on a change made by any process: every insert, update or delete of a
-- sandbox row sends NOTIFY space_sandbox_changes with its id (delivered at COMMIT).
CREATE FUNCTION space_notify_sandbox_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('space_sandbox_changes', CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END);
  RETURN NULL;
END;
$$;
CREATE TRIGGER sandboxes_notify_change AFTER INSERT OR UPDATE OR DELETE ON sandboxes
  FOR EACH ROW EXECUTE FUNCTION space_notify_sandbox_change();
