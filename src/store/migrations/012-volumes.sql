-- Volumes (issue 26): persistent storage that outlives sandboxes. A volume lives on one
-- node at a time (node_id; NULL until it is first needed) as a btrfs subvolume with its
-- own quota. `token` authorises the volume content API (E2B hands it out on every GET,
-- so it is kept, like a sandbox's envd access token).
CREATE TABLE volumes (
  id          text PRIMARY KEY CHECK (id ~ '^vol_[a-z0-9]{16}$'),
  tenant_id   text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
  name        text NOT NULL,
  token       text NOT NULL UNIQUE,
  size_mib    integer NOT NULL CHECK (size_mib > 0),
  node_id     uuid,
  created_at  timestamptz NOT NULL DEFAULT now(),
  UNIQUE (tenant_id, name)
);

-- Which volumes a sandbox was created with (kept for the sandbox's life and after: the
-- record snapshots and forks read). A volume is in use while a sandbox holding it is
-- not killed or failed; read-write holders are exclusive.
CREATE TABLE sandbox_volumes (
  sandbox_id  text NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
  volume_id   text NOT NULL REFERENCES volumes (id) ON DELETE CASCADE,
  path        text NOT NULL,
  read_only   boolean NOT NULL,
  PRIMARY KEY (sandbox_id, path)
);
CREATE INDEX sandbox_volumes_volume ON sandbox_volumes (volume_id);

ALTER TABLE tenant_quotas ADD COLUMN volumes integer CHECK (volumes >= 0);
ALTER TABLE tenant_quotas ADD COLUMN volume_mib integer CHECK (volume_mib >= 0);
