-- What the control plane keeps to restore a snapshot: the node's descriptor (template,
-- parent subvolume identity, source sandbox), the data key wrapped by the cluster key
-- (absent = parts are plaintext), why it was taken and its optional name.
ALTER TABLE snapshots
  ADD COLUMN descriptor  jsonb,
  ADD COLUMN wrapped_key text,
  ADD COLUMN purpose     text NOT NULL DEFAULT 'suspend' CHECK (purpose IN ('suspend', 'fork', 'named')),
  ADD COLUMN name        text;
CREATE INDEX snapshots_restorable ON snapshots (sandbox_id, created_at DESC) WHERE state IN ('local', 'durable');
