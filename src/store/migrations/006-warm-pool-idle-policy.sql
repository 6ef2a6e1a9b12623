-- Warm pools (issue 10): what idle members do (running, suspended, or suspended while their
-- node is short of memory) and the free-memory share below which a node counts as short.
-- Slots gain suspending → suspended → resuming (a suspended member is still the pool's).
ALTER TABLE warm_pools ADD COLUMN idle_policy text NOT NULL DEFAULT 'running'
  CHECK (idle_policy IN ('running', 'suspended', 'suspend_when_memory_short'));
ALTER TABLE warm_pools ADD COLUMN min_free_memory_percent integer NOT NULL DEFAULT 20
  CHECK (min_free_memory_percent >= 0 AND min_free_memory_percent <= 100);
ALTER TABLE warm_pool_slots DROP CONSTRAINT IF EXISTS warm_pool_slots_state_check;
ALTER TABLE warm_pool_slots ADD CONSTRAINT warm_pool_slots_state_check
  CHECK (state IN ('creating', 'ready', 'reserved', 'adopted', 'failed', 'retiring', 'suspending', 'suspended', 'resuming'));
CREATE INDEX warm_pool_slots_suspended ON warm_pool_slots (pool, ready_at) WHERE state = 'suspended';
