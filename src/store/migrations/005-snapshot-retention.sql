-- Snapshot retention. A restore holds its source snapshot (holds > 0, until held_until:
-- a crashed holder's hold lapses) so the retention sweeper never deletes what a restore
-- is using. The sweeper claims an expired row (reaping) before deleting its blobs and
-- node copies, then finishes forward (reaped): a claimed row is never restorable again.
ALTER TABLE snapshots DROP CONSTRAINT snapshots_state_check;
ALTER TABLE snapshots ADD CONSTRAINT snapshots_state_check
  CHECK (state IN ('creating', 'local', 'uploading', 'durable', 'failed', 'deleted', 'reaping', 'reaped'));
ALTER TABLE snapshots
  ADD COLUMN holds      integer NOT NULL DEFAULT 0,
  ADD COLUMN held_until timestamptz;
CREATE INDEX snapshots_retention ON snapshots (state, created_at) WHERE state IN ('deleted', 'failed', 'reaping');
