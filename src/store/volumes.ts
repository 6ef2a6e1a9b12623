/**
 * Volumes and the record of which sandboxes mount them (migration 012). A volume is in use
 * while a sandbox that mounts it is neither killed nor failed; a read-write mount is
 * exclusive. Attaching locks the volume rows (in id order, so two creates never deadlock)
 * inside the transaction that records the mounts, so two API replicas cannot both hand
 * out the one read-write mount.
 */
import { randomBytes } from "node:crypto";
import { SpaceError, conflict, notFound } from "../core/errors.ts";
import { randomId, type TenantId } from "../core/ids.ts";
import type { Db, Queryable } from "./db.ts";
import { columns, isUniqueViolation } from "./sql.ts";
import { lockQuotaLimits, quotaExceeded, volumeUsage, type QuotaLimits } from "./tenant-quotas.ts";
import type { SandboxState } from "./sandboxes.ts";

export interface Volume {
  id: string;
  tenantId: TenantId;
  name: string;
  /** Bearer token of the volume content API. */
  token: string;
  sizeMib: number;
  /** The node that holds it; null until it is first needed. */
  nodeId: string | null;
  createdAt: Date;
}

/** One volume a sandbox mounts. */
export interface VolumeMount {
  volumeId: string;
  name: string;
  path: string;
  readOnly: boolean;
  sizeMib: number;
  nodeId: string | null;
}

/** States in which a sandbox no longer holds its volumes (the node has unmounted them). */
export const releasedStates: readonly SandboxState[] = ["killed", "failed"];

const COLS = columns(["id", "tenant_id", "name", "token", "size_mib", "node_id", "created_at"]);

export const newVolumeId = () => `vol_${randomId(16)}`;
const newVolumeToken = () => `vt_${randomBytes(24).toString("base64url")}`;

/** Creates a volume (under `id` when the caller chose it) within the tenant's volume quotas; `already_exists` for a name it has. */
export async function createVolume(db: Db, input: { tenantId: TenantId; name: string; sizeMib: number; id?: string; quotas?: QuotaLimits }): Promise<Volume> {
  try {
    return await db.transaction(async (tx) => {
      const limits = input.quotas ? await lockQuotaLimits(tx, input.tenantId, input.quotas) : null;
      if (limits) {
        const u = await volumeUsage(tx, input.tenantId);
        if (u.volumes + 1 > limits.volumes) throw quotaExceeded("volumes", u.volumes, 1, limits.volumes);
        if (u.volumeMib + input.sizeMib > limits.volumeMib) throw quotaExceeded("volumeMib", u.volumeMib, input.sizeMib, limits.volumeMib);
      }
      return tx.one<Volume>(
        `INSERT INTO volumes (id, tenant_id, name, token, size_mib) VALUES ($1, $2, $3, $4, $5) RETURNING ${COLS}`,
        [input.id ?? newVolumeId(), input.tenantId, input.name, newVolumeToken(), input.sizeMib],
      );
    });
  } catch (e) {
    if (isUniqueViolation(e)) throw new SpaceError("already_exists", `volume '${input.name}' already exists`);
    throw e;
  }
}

/** The tenant's volume by id; undefined for another tenant's or an unknown one. */
export async function getVolume(q: Queryable, tenantId: TenantId, id: string): Promise<Volume | undefined> {
  return q.maybeOne<Volume>(`SELECT ${COLS} FROM volumes WHERE tenant_id = $1 AND id = $2`, [tenantId, id]);
}

export async function getVolumeByName(q: Queryable, tenantId: TenantId, name: string): Promise<Volume | undefined> {
  return q.maybeOne<Volume>(`SELECT ${COLS} FROM volumes WHERE tenant_id = $1 AND name = $2`, [tenantId, name]);
}

/** Any tenant's volume by id (the control plane's own moves). */
export async function volumeById(q: Queryable, id: string): Promise<Volume | undefined> {
  return q.maybeOne<Volume>(`SELECT ${COLS} FROM volumes WHERE id = $1`, [id]);
}

/** The volume a content-API token opens, if `id` is that volume. */
export async function volumeForToken(q: Queryable, id: string, token: string): Promise<Volume | undefined> {
  return q.maybeOne<Volume>(`SELECT ${COLS} FROM volumes WHERE id = $1 AND token = $2`, [id, token]);
}

export async function listVolumes(q: Queryable, tenantId: TenantId): Promise<Volume[]> {
  return q.query<Volume>(`SELECT ${COLS} FROM volumes WHERE tenant_id = $1 ORDER BY created_at, id`, [tenantId]);
}

/** Every volume on `nodeId` (a drain moves the unattached ones away). */
export async function volumesOnNode(q: Queryable, nodeId: string): Promise<Volume[]> {
  return q.query<Volume>(`SELECT ${COLS} FROM volumes WHERE node_id = $1 ORDER BY id`, [nodeId]);
}

/** The sandboxes holding the volume now (not killed or failed). */
export async function volumeHolders(q: Queryable, volumeId: string): Promise<{ sandboxId: string; readOnly: boolean }[]> {
  return q.query<{ sandboxId: string; readOnly: boolean }>(
    `SELECT sv.sandbox_id AS "sandboxId", sv.read_only AS "readOnly"
       FROM sandbox_volumes sv JOIN sandboxes s ON s.id = sv.sandbox_id
      WHERE sv.volume_id = $1 AND NOT (s.state = ANY($2::text[]))
      ORDER BY sv.sandbox_id`,
    [volumeId, [...releasedStates]],
  );
}

/** Deletes the tenant's volume unless a sandbox holds it (`failed_precondition` naming them). Returns what was deleted. */
export async function deleteVolume(db: Db, tenantId: TenantId, id: string): Promise<Volume> {
  return db.transaction(async (tx) => {
    const v = await tx.maybeOne<Volume>(`SELECT ${COLS} FROM volumes WHERE tenant_id = $1 AND id = $2 FOR UPDATE`, [tenantId, id]);
    if (!v) throw notFound(`volume ${id} not found`);
    const holders = await volumeHolders(tx, id);
    if (holders.length) {
      throw conflict(`volume ${id} is in use by sandbox${holders.length > 1 ? "es" : ""} ${holders.map((h) => h.sandboxId).join(", ")}; kill them first`);
    }
    await tx.execute(`DELETE FROM volumes WHERE id = $1`, [id]);
    return v;
  });
}

/**
 * Records the mounts of a new sandbox (its row exists), refusing with `conflict` a
 * read-write mount of a volume another sandbox holds, and a read-only one of a volume held
 * read-write. Returns the mounts with their volumes' nodes.
 */
export async function attachVolumes(
  db: Db,
  tenantId: TenantId,
  sandboxId: string,
  mounts: readonly { name: string; path: string; readOnly: boolean }[],
): Promise<VolumeMount[]> {
  if (!mounts.length) return [];
  return db.transaction(async (tx) => {
    const byName = new Map<string, Volume>();
    for (const name of [...new Set(mounts.map((m) => m.name))].sort()) {
      const v = await tx.maybeOne<Volume>(`SELECT ${COLS} FROM volumes WHERE tenant_id = $1 AND name = $2 FOR UPDATE`, [tenantId, name]);
      if (!v) throw notFound(`volume '${name}' not found`);
      byName.set(name, v);
    }
    const out: VolumeMount[] = [];
    for (const m of mounts) {
      const v = byName.get(m.name)!;
      const holders = (await volumeHolders(tx, v.id)).filter((h) => h.sandboxId !== sandboxId);
      const writer = holders.find((h) => !h.readOnly);
      if (writer) throw conflict(`volume '${m.name}' is mounted read-write by sandbox ${writer.sandboxId}`);
      if (!m.readOnly && holders.length) {
        throw conflict(`volume '${m.name}' is mounted by sandbox ${holders[0]!.sandboxId}; a read-write mount needs it to itself (mount it read-only with '${m.name}:ro')`);
      }
      await tx.execute(`INSERT INTO sandbox_volumes (sandbox_id, volume_id, path, read_only) VALUES ($1, $2, $3, $4)`, [sandboxId, v.id, m.path, m.readOnly]);
      out.push({ volumeId: v.id, name: v.name, path: m.path, readOnly: m.readOnly, sizeMib: v.sizeMib, nodeId: v.nodeId });
    }
    return out;
  });
}

/** The volumes a sandbox was created with (also after it ended: the record snapshots and forks read). */
export async function volumeMountsOf(q: Queryable, sandboxId: string): Promise<VolumeMount[]> {
  return q.query<VolumeMount>(
    `SELECT v.id AS "volumeId", v.name, sv.path, sv.read_only AS "readOnly", v.size_mib AS "sizeMib", v.node_id AS "nodeId"
       FROM sandbox_volumes sv JOIN volumes v ON v.id = sv.volume_id
      WHERE sv.sandbox_id = $1 ORDER BY sv.path`,
    [sandboxId],
  );
}

/** The mounts of each of `sandboxIds` (a list answer's); a sandbox with none is absent. */
export async function volumeMountsBySandbox(q: Queryable, sandboxIds: readonly string[]): Promise<Map<string, VolumeMount[]>> {
  const out = new Map<string, VolumeMount[]>();
  if (!sandboxIds.length) return out;
  const rows = await q.query<VolumeMount & { sandboxId: string }>(
    `SELECT sv.sandbox_id AS "sandboxId", v.id AS "volumeId", v.name, sv.path, sv.read_only AS "readOnly", v.size_mib AS "sizeMib", v.node_id AS "nodeId"
       FROM sandbox_volumes sv JOIN volumes v ON v.id = sv.volume_id
      WHERE sv.sandbox_id = ANY($1::text[]) ORDER BY sv.sandbox_id, sv.path`,
    [[...sandboxIds]],
  );
  for (const { sandboxId, ...m } of rows) out.set(sandboxId, [...(out.get(sandboxId) ?? []), m]);
  return out;
}

/**
 * Puts a volume on `nodeId` when it is on no node yet (or already there); returns the node
 * it is on, which the caller compares with its own.
 */
export async function claimVolumeNode(q: Queryable, id: string, nodeId: string): Promise<string> {
  const r = await q.maybeOne<{ nodeId: string }>(
    `UPDATE volumes SET node_id = $2 WHERE id = $1 AND (node_id IS NULL OR node_id = $2) RETURNING node_id AS "nodeId"`,
    [id, nodeId],
  );
  if (r) return r.nodeId;
  const v = await q.one<{ nodeId: string }>(`SELECT node_id AS "nodeId" FROM volumes WHERE id = $1`, [id], `volume ${id}`);
  return v.nodeId;
}

/** Moves a volume from one node to another (after its data was received there); false when it is no longer on `from`. */
export async function moveVolumeNode(q: Queryable, id: string, from: string, to: string): Promise<boolean> {
  return (await q.execute(`UPDATE volumes SET node_id = $3 WHERE id = $1 AND node_id = $2`, [id, from, to])) === 1;
}

/** What the fleet holds: volumes and their summed size (the usage gauges). */
export async function volumeTotals(q: Queryable): Promise<{ volumes: number; sizeMib: number; mounted: number }> {
  const r = await q.one<{ volumes: unknown; sizeMib: unknown; mounted: unknown }>(
    `SELECT count(*)::int AS volumes, coalesce(sum(size_mib), 0)::bigint AS "sizeMib",
            (SELECT count(DISTINCT sv.volume_id)::int FROM sandbox_volumes sv JOIN sandboxes s ON s.id = sv.sandbox_id
              WHERE NOT (s.state = ANY($1::text[]))) AS mounted
       FROM volumes`,
    [[...releasedStates]],
  );
  return { volumes: Number(r.volumes), sizeMib: Number(r.sizeMib), mounted: Number(r.mounted) };
}
