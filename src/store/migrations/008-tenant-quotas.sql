-- Per-tenant quotas and create rate limits (issues 24, 27): a NULL column means the
-- process's default (SPACE_QUOTA_*, SPACE_RATE_LIMIT_*). No row = every default.
CREATE TABLE tenant_quotas (
  tenant_id              text PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
  sandboxes              integer CHECK (sandboxes >= 0),
  vcpu                   integer CHECK (vcpu >= 0),
  memory_mib             integer CHECK (memory_mib >= 0),
  disk_mib               integer CHECK (disk_mib >= 0),
  snapshots              integer CHECK (snapshots >= 0),
  creates_per_s          double precision CHECK (creates_per_s >= 0),
  create_burst           integer CHECK (create_burst >= 1),
  key_creates_per_s      double precision CHECK (key_creates_per_s >= 0),
  key_create_burst       integer CHECK (key_create_burst >= 1),
  updated_at             timestamptz NOT NULL DEFAULT now()
);

-- Token buckets of the create rate limiter, one row per tenant or API key, refilled from
-- the database clock (so every API replica sees the same bucket).
CREATE TABLE rate_buckets (
  key        text PRIMARY KEY,
  tokens     double precision NOT NULL,
  allowed    boolean NOT NULL,
  updated_at timestamptz NOT NULL
);

-- The quota sums run over a tenant's live sandboxes.
CREATE INDEX sandboxes_tenant_state ON sandboxes (tenant_id, state);
