/**
 * Snapshots (memory checkpoint and/or disk) of a sandbox, per execution attempt. A
 * snapshot is restorable only once its node's descriptor is recorded: `durable` when
 * every part is in the blob store (any node), `local` when the node kept it on its disk
 * only (pinned there).
 */
import { SpaceError } from "../core/errors.ts";
import { randomId, type NodeId } from "../core/ids.ts";
import type { SnapshotDescriptor } from "../contract/snapshot-descriptor.ts";
import type { Queryable } from "./db.ts";
import { columns, json, setClause } from "./sql.ts";

export const snapshotStates = [
  /** Being taken on the node. */
  "creating",
  /** Complete on the node's disk only. */
  "local",
  /** Parts being written to the blob store. */
  "uploading",
  /** Every part is in the blob store: restorable on any node. */
  "durable",
  "failed",
  "deleted",
  /** Claimed by the retention sweeper: its blobs and node copies are being deleted (never restorable again). */
  "reaping",
  /** Blobs and node copies deleted; the row stays as history. */
  "reaped",
] as const;
export type SnapshotState = (typeof snapshotStates)[number];
/** Not yet deleted (nor being reaped). */
export const liveSnapshotStates: readonly SnapshotState[] = ["creating", "local", "uploading", "durable"];
/** A restore may use it (once its descriptor is recorded). */
export const restorableSnapshotStates: readonly SnapshotState[] = ["local", "durable"];

/** Why it was taken: a suspend (E2B pause), a fork's checkpoint, or a named snapshot (kept until deleted). */
export type SnapshotPurpose = "suspend" | "fork" | "named";

export interface SnapshotPart {
  /** e.g. `memory`, `disk`, `metadata`. */
  kind: string;
  key: string;
  sizeBytes: number;
  sha256: string;
}

export interface Snapshot {
  id: string;
  sandboxId: string;
  executionId: string | null;
  attempt: number;
  kind: "full" | "memory" | "disk";
  state: SnapshotState;
  parts: SnapshotPart[];
  environment: string | null;
  nodeId: NodeId | null;
  sizeBytes: number | null;
  error: string | null;
  createdAt: Date;
  durableAt: Date | null;
  deletedAt: Date | null;
  purpose: SnapshotPurpose;
  name: string | null;
  /** The node's descriptor (with its wrapped data key), present once finished: what a restore hands back to a node. */
  descriptor: SnapshotDescriptor | null;
}

const COLUMN_NAMES = [
  "id", "sandbox_id", "execution_id", "attempt", "kind", "state", "parts", "environment", "node_id", "size_bytes", "error",
  "created_at", "durable_at", "deleted_at", "purpose", "name", "descriptor", "wrapped_key",
] as const;
const COLS = columns(COLUMN_NAMES);

/** The row as selected: the data key is its own column, the descriptor carries it. */
type SnapshotColumns = Omit<Snapshot, "descriptor"> & { descriptor: Omit<SnapshotDescriptor, "wrappedKey"> | null; wrappedKey: string | null };
const toSnapshot = ({ wrappedKey, descriptor, ...r }: SnapshotColumns): Snapshot => ({
  ...r,
  descriptor: descriptor ? { ...descriptor, ...(wrappedKey ? { wrappedKey } : {}) } : null,
});
const maybe = (r: SnapshotColumns | undefined): Snapshot | undefined => (r ? toSnapshot(r) : undefined);

export const newSnapshotId = () => `sn_${randomId(16)}`;

export async function createSnapshot(
  q: Queryable,
  input: {
    sandboxId: string;
    executionId?: string | null;
    attempt?: number;
    kind?: Snapshot["kind"];
    environment?: string | null;
    nodeId?: NodeId | null;
    id?: string;
    purpose?: SnapshotPurpose;
    name?: string | null;
  },
): Promise<Snapshot> {
  return toSnapshot(
    await q.one<SnapshotColumns>(
      `INSERT INTO snapshots (id, sandbox_id, execution_id, attempt, kind, environment, node_id, purpose, name)
       VALUES ($1, $2, $3, coalesce($4::int, (SELECT attempt FROM executions WHERE id = $3), 1), $5, $6, $7, $8, $9) RETURNING ${COLS}`,
      [
        input.id ?? newSnapshotId(), input.sandboxId, input.executionId ?? null, input.attempt ?? null, input.kind ?? "full",
        input.environment ?? null, input.nodeId ?? null, input.purpose ?? "suspend", input.name ?? null,
      ],
    ),
  );
}

export async function getSnapshot(q: Queryable, id: string): Promise<Snapshot> {
  return toSnapshot(await q.one<SnapshotColumns>(`SELECT ${COLS} FROM snapshots WHERE id = $1`, [id], `snapshot ${id}`));
}

export async function findSnapshot(q: Queryable, id: string): Promise<Snapshot | undefined> {
  return maybe(await q.maybeOne<SnapshotColumns>(`SELECT ${COLS} FROM snapshots WHERE id = $1`, [id]));
}

export async function listSnapshots(q: Queryable, sandboxId: string): Promise<Snapshot[]> {
  return (await q.query<SnapshotColumns>(`SELECT ${COLS} FROM snapshots WHERE sandbox_id = $1 ORDER BY created_at, id`, [sandboxId])).map(toSnapshot);
}

/** The newest snapshot of a sandbox in one of `states` (default: local or durable). */
export async function latestSnapshot(q: Queryable, sandboxId: string, states: readonly SnapshotState[] = restorableSnapshotStates): Promise<Snapshot | undefined> {
  return maybe(
    await q.maybeOne<SnapshotColumns>(
      `SELECT ${COLS} FROM snapshots WHERE sandbox_id = $1 AND state = ANY($2::text[]) ORDER BY created_at DESC, id DESC LIMIT 1`,
      [sandboxId, [...states]],
    ),
  );
}

/** The newest restorable snapshot of `purpose` of a sandbox (its descriptor recorded). */
export async function latestRestorableSnapshot(q: Queryable, sandboxId: string, purpose: SnapshotPurpose): Promise<Snapshot | undefined> {
  return maybe(
    await q.maybeOne<SnapshotColumns>(
      `SELECT ${COLS} FROM snapshots WHERE sandbox_id = $1 AND purpose = $2 AND state = ANY($3::text[]) AND descriptor IS NOT NULL
        ORDER BY created_at DESC, id DESC LIMIT 1`,
      [sandboxId, purpose, [...restorableSnapshotStates]],
    ),
  );
}

/** Restorable snapshots of a sandbox (every purpose), newest first. */
export async function listRestorableSnapshots(q: Queryable, sandboxId: string): Promise<Snapshot[]> {
  const rows = await q.query<SnapshotColumns>(
    `SELECT ${COLS} FROM snapshots WHERE sandbox_id = $1 AND state = ANY($2::text[]) ORDER BY created_at DESC, id DESC`,
    [sandboxId, [...restorableSnapshotStates]],
  );
  return rows.map(toSnapshot);
}

/** Which live snapshots of a sandbox `markSnapshotsDeleted` takes: all, or the one / the purpose given, minus `except`. */
export interface SnapshotDeleteFilter {
  snapshotId?: string;
  purpose?: SnapshotPurpose;
  except?: string;
}

/** Marks live snapshots of the sandbox deleted (see the filter); returns them. */
export async function markSnapshotsDeleted(q: Queryable, sandboxId: string, f: SnapshotDeleteFilter = {}): Promise<Snapshot[]> {
  const rows = await q.query<SnapshotColumns>(
    `UPDATE snapshots SET state = 'deleted', deleted_at = coalesce(deleted_at, now())
      WHERE sandbox_id = $1 AND state = ANY($2::text[]) AND ($3::text IS NULL OR id = $3)
        AND ($4::text IS NULL OR purpose = $4) AND ($5::text IS NULL OR id <> $5)
      RETURNING ${COLS}`,
    [sandboxId, [...liveSnapshotStates], f.snapshotId ?? null, f.purpose ?? null, f.except ?? null],
  );
  return rows.map(toSnapshot);
}

/** A failed attempt (only while live); the error is capped. */
export async function failSnapshot(q: Queryable, id: string, error: string): Promise<void> {
  await q.execute(`UPDATE snapshots SET state = 'failed', error = $2 WHERE id = $1 AND state = ANY($3::text[])`, [id, error.slice(0, 2000), [...liveSnapshotStates]]);
}

export interface NamedSnapshotQuery {
  tenantId: string;
  sandboxId?: string;
  name?: string;
  limit: number;
  /** The id of the last row of the previous page (keyset). */
  after?: string;
}

const NAMED = `FROM snapshots n JOIN sandboxes s ON s.id = n.sandbox_id
  WHERE s.tenant_id = $1 AND n.purpose = 'named' AND n.state = ANY($2::text[]) AND n.descriptor IS NOT NULL`;

/** Restorable named snapshots of a tenant's sandboxes (the tenant of the source sandbox), newest first. */
export async function listNamedSnapshots(q: Queryable, f: NamedSnapshotQuery): Promise<Snapshot[]> {
  const rows = await q.query<SnapshotColumns>(
    `SELECT ${columns(COLUMN_NAMES, "n")} ${NAMED}
        AND ($3::text IS NULL OR n.sandbox_id = $3) AND ($4::text IS NULL OR n.name = $4)
        AND ($5::text IS NULL OR (n.created_at, n.id) < (SELECT a.created_at, a.id FROM snapshots a WHERE a.id = $5))
      ORDER BY n.created_at DESC, n.id DESC LIMIT $6`,
    [f.tenantId, [...restorableSnapshotStates], f.sandboxId ?? null, f.name ?? null, f.after ?? null, f.limit],
  );
  return rows.map(toSnapshot);
}

/** A restorable named snapshot of the tenant by id or, else, by name (newest). */
export async function findNamedSnapshot(q: Queryable, tenantId: string, idOrName: string): Promise<Snapshot | undefined> {
  return maybe(
    await q.maybeOne<SnapshotColumns>(
      `SELECT ${columns(COLUMN_NAMES, "n")} ${NAMED} AND (n.id = $3 OR n.name = $3)
        ORDER BY (n.id = $3) DESC, n.created_at DESC, n.id DESC LIMIT 1`,
      [tenantId, [...restorableSnapshotStates], idOrName],
    ),
  );
}

export interface SnapshotPatch {
  state?: SnapshotState;
  parts?: SnapshotPart[];
  sizeBytes?: number | null;
  environment?: string | null;
  nodeId?: NodeId | null;
  error?: string | null;
  /** Stored without its data key (that is `wrappedKey`'s column). */
  descriptor?: Omit<SnapshotDescriptor, "wrappedKey"> | null;
  wrappedKey?: string | null;
}

/** Updates a snapshot; `durable_at` set on `durable`, `deleted_at` on `deleted`. With `from`, only from those states. */
export async function updateSnapshot(q: Queryable, id: string, patch: SnapshotPatch, opts: { from?: readonly SnapshotState[] } = {}): Promise<Snapshot> {
  const params: unknown[] = [id];
  const sets = setClause(
    { ...patch },
    {
      state: { col: "state" },
      parts: { col: "parts", json: true },
      sizeBytes: { col: "size_bytes" },
      environment: { col: "environment" },
      nodeId: { col: "node_id" },
      error: { col: "error" },
      descriptor: { col: "descriptor", json: true },
      wrappedKey: { col: "wrapped_key" },
    },
    params,
  );
  if (patch.state === "durable") sets.push("durable_at = coalesce(durable_at, now())");
  if (patch.state === "deleted") sets.push("deleted_at = coalesce(deleted_at, now())");
  if (!sets.length) return getSnapshot(q, id);
  let where = "id = $1";
  if (opts.from) {
    params.push([...opts.from]);
    where += ` AND state = ANY($${params.length}::text[])`;
  }
  const row = await q.maybeOne<SnapshotColumns>(`UPDATE snapshots SET ${sets.join(", ")} WHERE ${where} RETURNING ${COLS}`, params);
  if (row) return toSnapshot(row);
  const cur = await getSnapshot(q, id);
  throw new SpaceError("failed_precondition", `snapshot ${id} is ${cur.state}, expected ${opts.from?.join(" or ")}`, { details: { state: cur.state } });
}

/** Adds one part (e.g. after its upload) without rewriting the others. */
export async function addSnapshotPart(q: Queryable, id: string, part: SnapshotPart): Promise<Snapshot> {
  return toSnapshot(
    await q.one<SnapshotColumns>(
      `UPDATE snapshots SET parts = parts || $2::jsonb, size_bytes = coalesce(size_bytes, 0) + $3 WHERE id = $1 RETURNING ${COLS}`,
      [id, json([part]), part.sizeBytes],
      `snapshot ${id}`,
    ),
  );
}

// ------------------------------------------------------------------ retention

const HOLDABLE_NOT = ["reaping", "reaped"];

/**
 * A restore holds its source snapshot until it is done (release) or `until` passes (a
 * crashed holder's hold lapses). false when the sweeper has claimed it: it is being
 * deleted and must not be used.
 */
export async function holdSnapshot(q: Queryable, id: string, until: Date): Promise<boolean> {
  const n = await q.execute(
    `UPDATE snapshots SET holds = holds + 1, held_until = greatest(coalesce(held_until, $2), $2)
      WHERE id = $1 AND NOT (state = ANY($3::text[]))`,
    [id, until, HOLDABLE_NOT],
  );
  return n > 0;
}

export async function releaseSnapshot(q: Queryable, id: string): Promise<void> {
  await q.execute(`UPDATE snapshots SET holds = greatest(holds - 1, 0) WHERE id = $1`, [id]);
}

/** Not held: no holder, or every holder's deadline has passed. */
const unheld = (alias = "") => `(${alias}holds = 0 OR ${alias}held_until IS NULL OR ${alias}held_until < now())`;
const OLDER = (col: string, p: string) => `${col} < now() - (${p}::bigint * interval '1 millisecond')`;

/**
 * Marks restorable snapshots no restore can want any more deleted (older than
 * `minAgeMs`, not held): suspend snapshots superseded by a newer restorable suspend
 * snapshot of their sandbox or whose sandbox ended (killed, failed), and fork
 * checkpoints (a fork request frees its own; what is left was abandoned). The newest
 * suspend snapshot of a live sandbox and named snapshots are never touched.
 */
export async function expireSnapshots(q: Queryable, minAgeMs: number): Promise<string[]> {
  const rows = await q.query<{ id: string }>(
    `UPDATE snapshots s SET state = 'deleted', deleted_at = now()
      WHERE s.state IN ('local', 'durable') AND ${OLDER("s.created_at", "$1")} AND ${unheld("s.")}
        AND (s.purpose = 'fork'
          OR (s.purpose = 'suspend' AND EXISTS (
                SELECT 1 FROM snapshots n WHERE n.sandbox_id = s.sandbox_id AND n.purpose = 'suspend'
                   AND n.state IN ('local', 'durable') AND (n.created_at, n.id) > (s.created_at, s.id)))
          OR (s.purpose = 'suspend' AND EXISTS (SELECT 1 FROM sandboxes x WHERE x.id = s.sandbox_id AND x.state IN ('killed', 'failed'))))
      RETURNING s.id`,
    [minAgeMs],
  );
  return rows.map((r) => r.id);
}

/**
 * Suspend snapshots still `local` at least `minAgeMs` after they were taken, newest of a
 * sandbox that is suspended: their publication behind the pause was lost with its process
 * (a control plane restarted) or failed, so no other node can restore them yet.
 */
export async function listUnpublishedSuspendSnapshots(q: Queryable, minAgeMs: number, limit: number): Promise<Array<{ id: string; sandboxId: string; nodeId: NodeId }>> {
  return q.query(
    `SELECT s.id, s.sandbox_id AS "sandboxId", s.node_id AS "nodeId" FROM snapshots s JOIN sandboxes x ON x.id = s.sandbox_id
      WHERE s.state = 'local' AND s.purpose = 'suspend' AND s.node_id IS NOT NULL AND x.state = 'suspended' AND ${OLDER("s.created_at", "$1")}
        AND NOT EXISTS (SELECT 1 FROM snapshots n WHERE n.sandbox_id = s.sandbox_id AND n.purpose = 'suspend'
                          AND n.state IN ('local', 'durable') AND (n.created_at, n.id) > (s.created_at, s.id))
      ORDER BY s.created_at LIMIT $2`,
    [minAgeMs, limit],
  );
}

export interface ReapingSnapshot {
  id: string;
  sandboxId: string;
  nodeId: NodeId | null;
  parts: SnapshotPart[];
}

/**
 * Claims up to `limit` expired snapshots (deleted or failed at least `minAgeMs` ago, not
 * held) for deletion: they move to `reaping`, from which they only go forward.
 */
export async function claimExpiredSnapshots(q: Queryable, minAgeMs: number, limit: number): Promise<string[]> {
  const rows = await q.query<{ id: string }>(
    `UPDATE snapshots SET state = 'reaping' WHERE id IN (
       SELECT id FROM snapshots
        WHERE ((state = 'deleted' AND ${OLDER("coalesce(deleted_at, created_at)", "$1")}) OR (state = 'failed' AND ${OLDER("created_at", "$1")}))
          AND ${unheld()}
        ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED)
     RETURNING id`,
    [minAgeMs, limit],
  );
  return rows.map((r) => r.id);
}

/** Snapshots claimed for deletion and not finished (this sweep's claims and any a crashed sweeper left). */
export async function listReapingSnapshots(q: Queryable, limit: number): Promise<ReapingSnapshot[]> {
  return q.query<ReapingSnapshot>(
    `SELECT id, sandbox_id AS "sandboxId", node_id AS "nodeId", parts FROM snapshots WHERE state = 'reaping' ORDER BY created_at LIMIT $1`,
    [limit],
  );
}

export async function markSnapshotReaped(q: Queryable, id: string): Promise<void> {
  await q.execute(`UPDATE snapshots SET state = 'reaped' WHERE id = $1 AND state = 'reaping'`, [id]);
}

/** Snapshots whose data key is wrapped (encrypted at rest), with that wrapped key: what a key rotation re-wraps. */
export async function listWrappedSnapshotKeys(q: Queryable): Promise<Array<{ id: string; wrappedKey: string }>> {
  return q.query<{ id: string; wrappedKey: string }>(`SELECT id, wrapped_key AS "wrappedKey" FROM snapshots WHERE wrapped_key IS NOT NULL ORDER BY id`);
}

/** Replaces a snapshot's wrapped data key if it is still `from` (false: it changed meanwhile, or the row is gone). */
export async function replaceWrappedSnapshotKey(q: Queryable, id: string, from: string, to: string): Promise<boolean> {
  return (await q.execute(`UPDATE snapshots SET wrapped_key = $3 WHERE id = $1 AND wrapped_key = $2`, [id, from, to])) > 0;
}
