-- Warm pools (issue 10): a target size per template (and resource shape), reconciled by
-- the controller leader into warm_pool_slots (001), adopted atomically by creates.
CREATE TABLE warm_pools (
  name        text PRIMARY KEY,                 -- the template ref as configured (alias or id)
  tenant_id   text REFERENCES tenants(id) ON DELETE CASCADE, -- whose ref; NULL = platform/public, any tenant adopts
  size        integer NOT NULL CHECK (size >= 0 AND size <= 1000),
  vcpu        integer NOT NULL CHECK (vcpu > 0),
  memory_mib  integer NOT NULL CHECK (memory_mib >= 64),
  disk_mib    integer NOT NULL CHECK (disk_mib >= 64),
  source      text NOT NULL DEFAULT 'api' CHECK (source IN ('api', 'config')),
  template_id text,                             -- resolved by the last reconcile
  build_id    text,                             -- the build members must come from (the release's current build)
  status      jsonb NOT NULL DEFAULT '{}',      -- written by the reconciler only when it changes
  created_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX warm_pools_template ON warm_pools (template_id);

-- Why a slot failed or retires (operators), and the tenant a Native admission reserved it for.
ALTER TABLE warm_pool_slots ADD COLUMN reason text;
ALTER TABLE warm_pool_slots ADD COLUMN reserved_for text;
ALTER TABLE warm_pool_slots DROP CONSTRAINT IF EXISTS warm_pool_slots_state_check;
ALTER TABLE warm_pool_slots ADD CONSTRAINT warm_pool_slots_state_check
  CHECK (state IN ('creating', 'ready', 'reserved', 'adopted', 'failed', 'retiring'));
CREATE INDEX warm_pool_slots_sandbox ON warm_pool_slots (sandbox_id);
CREATE INDEX warm_pool_slots_ready ON warm_pool_slots (pool, ready_at) WHERE state = 'ready';
