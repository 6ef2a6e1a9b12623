-- SPACE schema v1. Postgres is the source of truth for desired state (ARCHITECTURE.md §4).
-- Runs unchanged on Postgres 15 and PGlite. Timestamps are timestamptz, set by the
-- database clock (now()) so that leases and staleness never depend on host clocks.

-- Tenants: the isolation boundary (a tenant never sees another's rows).
CREATE TABLE tenants (
  id          text PRIMARY KEY,
  name        text NOT NULL UNIQUE,
  created_at  timestamptz NOT NULL DEFAULT now(),
  disabled_at timestamptz
);

-- API keys (E2B `X-API-Key`). Only the sha256 of the secret is stored; `prefix` is the
-- first characters, for display ("e2b_1a2b…").
CREATE TABLE api_keys (
  id           text PRIMARY KEY,
  tenant_id    text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  name         text NOT NULL DEFAULT '',
  hash         text NOT NULL UNIQUE,
  prefix       text NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT now(),
  last_used_at timestamptz,
  revoked_at   timestamptz
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id);

-- Scoped bearer tokens (Native API, admin). Hash only, like api_keys.
CREATE TABLE tokens (
  id           text PRIMARY KEY,
  tenant_id    text REFERENCES tenants(id) ON DELETE CASCADE, -- NULL = cluster (admin) token
  name         text NOT NULL DEFAULT '',
  hash         text NOT NULL UNIQUE,
  prefix       text NOT NULL,
  scopes       text[] NOT NULL DEFAULT '{}',
  created_at   timestamptz NOT NULL DEFAULT now(),
  expires_at   timestamptz,
  last_used_at timestamptz,
  revoked_at   timestamptz
);
CREATE INDEX tokens_tenant ON tokens (tenant_id);

-- Templates: tenant_id NULL = a platform template; public = visible to every tenant.
CREATE TABLE templates (
  id         text PRIMARY KEY,
  tenant_id  text REFERENCES tenants(id) ON DELETE CASCADE,
  name       text NOT NULL,
  public     boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  deleted_at timestamptz
);
CREATE UNIQUE INDEX templates_tenant_name ON templates (coalesce(tenant_id, ''), name) WHERE deleted_at IS NULL;

-- Builds: one immutable rootfs of a template. `environment` is the execution-environment
-- digest the build was made in (its binding), `digest` the content digest of the rootfs.
CREATE TABLE builds (
  id              text PRIMARY KEY,
  template_id     text NOT NULL REFERENCES templates(id) ON DELETE CASCADE,
  status          text NOT NULL DEFAULT 'waiting'
                  CHECK (status IN ('waiting', 'building', 'ready', 'failed')),
  spec            jsonb NOT NULL DEFAULT '{}',   -- dockerfile/steps, start_cmd, ready_cmd…
  vcpu            integer,
  memory_mib      integer,
  disk_mib        integer,
  rootfs_size_mib integer,
  environment     text,
  digest          text,
  logs            text NOT NULL DEFAULT '',
  error           text,
  created_at      timestamptz NOT NULL DEFAULT now(),
  started_at      timestamptz,
  finished_at     timestamptz
);
CREATE INDEX builds_template ON builds (template_id, created_at);

-- Releases: alias (+ tag) → build. tenant_id NULL = a platform alias visible to all.
CREATE TABLE releases (
  id          text PRIMARY KEY,
  tenant_id   text REFERENCES tenants(id) ON DELETE CASCADE,
  template_id text NOT NULL REFERENCES templates(id) ON DELETE CASCADE,
  alias       text NOT NULL,
  tag         text NOT NULL DEFAULT 'default',
  build_id    text NOT NULL REFERENCES builds(id) ON DELETE CASCADE,
  created_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX releases_alias_tag ON releases (coalesce(tenant_id, ''), alias, tag);

-- Sandboxes: desired state + generation (bumped on every transition).
CREATE TABLE sandboxes (
  id                    text PRIMARY KEY CHECK (id ~ '^[a-z0-9]{20}$'),
  seq                   bigserial NOT NULL UNIQUE,
  tenant_id             text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  template_id           text,
  build_id              text,
  alias                 text,
  state                 text NOT NULL DEFAULT 'creating' CHECK (state IN (
                          'creating', 'running', 'pausing', 'paused', 'suspending', 'suspended',
                          'resuming', 'stopping', 'stopped', 'killing', 'killed', 'failed')),
  generation            integer NOT NULL DEFAULT 1,
  node_id               uuid,
  address               text,
  vcpu                  integer NOT NULL,
  memory_mib            integer NOT NULL,
  disk_mib              integer NOT NULL,
  metadata              jsonb NOT NULL DEFAULT '{}',
  env_vars              jsonb NOT NULL DEFAULT '{}',   -- secrets: never logged
  envd_access_token     text,
  traffic_access_token  text,
  secure                boolean NOT NULL DEFAULT false,
  allow_internet_access boolean NOT NULL DEFAULT true,
  network               jsonb NOT NULL DEFAULT '{}',
  lifecycle             jsonb NOT NULL DEFAULT '{"onTimeout":"kill","autoResume":false}',
  failure_code          text,
  failure_message       text,
  started_at            timestamptz,
  end_at                timestamptz,
  created_at            timestamptz NOT NULL DEFAULT now(),
  updated_at            timestamptz NOT NULL DEFAULT now(),
  killed_at             timestamptz
);
CREATE INDEX sandboxes_tenant_list ON sandboxes (tenant_id, created_at, seq);
CREATE INDEX sandboxes_state ON sandboxes (state);
CREATE INDEX sandboxes_end_at ON sandboxes (end_at) WHERE state IN ('running', 'paused');
CREATE INDEX sandboxes_node ON sandboxes (node_id);

-- Executions: one per activation attempt of a sandbox on a node.
CREATE TABLE executions (
  id         text PRIMARY KEY,
  sandbox_id text NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
  node_id    uuid,
  attempt    integer NOT NULL,
  state      text NOT NULL DEFAULT 'pending'
             CHECK (state IN ('pending', 'starting', 'running', 'stopping', 'ended', 'failed')),
  error      text,
  created_at timestamptz NOT NULL DEFAULT now(),
  started_at timestamptz,
  ended_at   timestamptz,
  UNIQUE (sandbox_id, attempt)
);
CREATE INDEX executions_node ON executions (node_id) WHERE state IN ('pending', 'starting', 'running', 'stopping');

-- Snapshots (memory checkpoint and/or disk), per execution attempt. `parts` lists the
-- blobs ({kind, key, sizeBytes, sha256}); durable_at is set once they are in the blob store.
CREATE TABLE snapshots (
  id           text PRIMARY KEY,
  sandbox_id   text NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
  execution_id text REFERENCES executions(id) ON DELETE SET NULL,
  attempt      integer NOT NULL DEFAULT 1,
  kind         text NOT NULL DEFAULT 'full' CHECK (kind IN ('full', 'memory', 'disk')),
  state        text NOT NULL DEFAULT 'creating'
               CHECK (state IN ('creating', 'local', 'uploading', 'durable', 'failed', 'deleted')),
  parts        jsonb NOT NULL DEFAULT '[]',
  environment  text,
  node_id      uuid,
  size_bytes   bigint,
  error        text,
  created_at   timestamptz NOT NULL DEFAULT now(),
  durable_at   timestamptz,
  deleted_at   timestamptz
);
CREATE INDEX snapshots_sandbox ON snapshots (sandbox_id, created_at);

-- Nodes: registration and what they publish (capacity, environments, template inventory).
CREATE TABLE nodes (
  id                  uuid PRIMARY KEY,
  name                text NOT NULL,
  address             text NOT NULL,
  node_group          text NOT NULL DEFAULT 'default',
  labels              jsonb NOT NULL DEFAULT '{}',
  status              text NOT NULL DEFAULT 'ready'
                      CHECK (status IN ('ready', 'unavailable', 'draining', 'fenced')),
  capacity            jsonb NOT NULL DEFAULT '{}',
  used                jsonb NOT NULL DEFAULT '{}',
  usable_environments text[] NOT NULL DEFAULT '{}',
  templates           jsonb NOT NULL DEFAULT '[]',
  substrate           text NOT NULL DEFAULT 'direct' CHECK (substrate IN ('direct', 'kubernetes')),
  version             text NOT NULL DEFAULT '',
  last_heartbeat_at   timestamptz NOT NULL DEFAULT now(),
  registered_at       timestamptz NOT NULL DEFAULT now(),
  updated_at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX nodes_name ON nodes (name);

-- Public operations (Native API): queued → claimed → succeeded | failed.
CREATE TABLE operations (
  id              text PRIMARY KEY,
  tenant_id       text REFERENCES tenants(id) ON DELETE CASCADE,
  kind            text NOT NULL,
  target_id       text,
  request         jsonb NOT NULL DEFAULT '{}',
  request_hash    text NOT NULL,
  idempotency_key text,
  state           text NOT NULL DEFAULT 'queued' CHECK (state IN ('queued', 'claimed', 'succeeded', 'failed')),
  claimed_by      text,
  claim_count     integer NOT NULL DEFAULT 0,
  claimed_at      timestamptz,
  heartbeat_at    timestamptz,
  queued_at       timestamptz NOT NULL DEFAULT now(),
  succeeded_at    timestamptz,
  failed_at       timestamptz,
  deadline_at     timestamptz,
  result          jsonb,
  failure_code    text CHECK (failure_code IS NULL OR failure_code IN
                  ('invalid_request', 'not_found', 'conflict', 'unavailable', 'deadline_exceeded', 'internal')),
  failure_message text,
  seq             bigserial NOT NULL UNIQUE
);
CREATE UNIQUE INDEX operations_idempotency ON operations (tenant_id, idempotency_key);
CREATE INDEX operations_pending ON operations (queued_at, seq) WHERE state IN ('queued', 'claimed');
CREATE INDEX operations_tenant ON operations (tenant_id, seq);
CREATE INDEX operations_target ON operations (target_id);

-- Commands run in sandboxes (Native API); idempotent by key like operations.
CREATE TABLE commands (
  id              text PRIMARY KEY,
  tenant_id       text REFERENCES tenants(id) ON DELETE CASCADE,
  sandbox_id      text NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
  operation_id    text REFERENCES operations(id) ON DELETE SET NULL,
  idempotency_key text,
  pid             integer,
  cmd             jsonb NOT NULL,          -- {cmd, args, cwd, envs, user, stdin, tag…}
  state           text NOT NULL DEFAULT 'queued'
                  CHECK (state IN ('queued', 'running', 'exited', 'failed', 'killed')),
  exit_code       integer,
  error           text,
  output_bytes    bigint NOT NULL DEFAULT 0,
  output_chunks   integer NOT NULL DEFAULT 0,
  created_at      timestamptz NOT NULL DEFAULT now(),
  started_at      timestamptz,
  ended_at        timestamptz
);
CREATE UNIQUE INDEX commands_idempotency ON commands (sandbox_id, idempotency_key);
CREATE INDEX commands_sandbox ON commands (sandbox_id, created_at);

-- Command output as append-only chunks: (command, seq) is the page cursor, `offset_bytes`
-- the position of the chunk in the command's combined output.
CREATE TABLE command_output (
  command_id   text NOT NULL REFERENCES commands(id) ON DELETE CASCADE,
  seq          integer NOT NULL,
  stream       text NOT NULL CHECK (stream IN ('stdout', 'stderr', 'pty')),
  offset_bytes bigint NOT NULL,
  data         bytea NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (command_id, seq)
);

-- Warm pools: pre-created sandboxes waiting to be adopted.
CREATE TABLE warm_pool_slots (
  id         text PRIMARY KEY,
  pool       text NOT NULL,
  build_id   text,
  sandbox_id text REFERENCES sandboxes(id) ON DELETE SET NULL,
  node_id    uuid,
  state      text NOT NULL DEFAULT 'creating'
             CHECK (state IN ('creating', 'ready', 'adopted', 'failed', 'retiring')),
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  ready_at   timestamptz,
  adopted_at timestamptz
);
CREATE INDEX warm_pool_slots_pool ON warm_pool_slots (pool, state);

-- Leases (leader election and other singletons): held until expires_at (database clock).
CREATE TABLE leases (
  name        text PRIMARY KEY,
  holder      text NOT NULL,
  expires_at  timestamptz NOT NULL,
  acquired_at timestamptz NOT NULL DEFAULT now(),
  renewed_at  timestamptz NOT NULL DEFAULT now(),
  epoch       bigint NOT NULL DEFAULT 1   -- +1 on every change of holder (fencing token)
);

-- Cluster-wide settings: substrate, bootstrap secrets (hashed), schema facts.
CREATE TABLE cluster (
  key        text PRIMARY KEY,
  value      jsonb NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now()
);
