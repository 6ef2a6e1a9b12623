-- Direct fleet: drain mode, verification and the reason behind a node's status.
ALTER TABLE nodes ADD COLUMN drain_mode text CHECK (drain_mode IN ('gentle', 'forced'));
ALTER TABLE nodes ADD COLUMN verified_at timestamptz;
ALTER TABLE nodes ADD COLUMN status_reason text;
ALTER TABLE nodes ADD COLUMN status_changed_at timestamptz NOT NULL DEFAULT now();
CREATE INDEX nodes_status ON nodes (status, last_heartbeat_at);
