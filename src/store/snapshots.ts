/** Snapshots (memory checkpoint and/or disk) of a sandbox, per execution attempt. */
import { SpaceError } from "../core/errors.ts";
import { randomId, type NodeId } from "../core/ids.ts";
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
] as const;
export type SnapshotState = (typeof snapshotStates)[number];

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
}

const COLS = columns([
  "id", "sandbox_id", "execution_id", "attempt", "kind", "state", "parts", "environment", "node_id", "size_bytes", "error",
  "created_at", "durable_at", "deleted_at",
]);

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
  },
): Promise<Snapshot> {
  return q.one<Snapshot>(
    `INSERT INTO snapshots (id, sandbox_id, execution_id, attempt, kind, environment, node_id)
     VALUES ($1, $2, $3, coalesce($4::int, (SELECT attempt FROM executions WHERE id = $3), 1), $5, $6, $7) RETURNING ${COLS}`,
    [input.id ?? newSnapshotId(), input.sandboxId, input.executionId ?? null, input.attempt ?? null, input.kind ?? "full", input.environment ?? null, input.nodeId ?? null],
  );
}

export async function getSnapshot(q: Queryable, id: string): Promise<Snapshot> {
  return q.one<Snapshot>(`SELECT ${COLS} FROM snapshots WHERE id = $1`, [id], `snapshot ${id}`);
}

export async function listSnapshots(q: Queryable, sandboxId: string): Promise<Snapshot[]> {
  return q.query<Snapshot>(`SELECT ${COLS} FROM snapshots WHERE sandbox_id = $1 ORDER BY created_at, id`, [sandboxId]);
}

/** The newest snapshot of a sandbox in one of `states` (default: local or durable). */
export async function latestSnapshot(q: Queryable, sandboxId: string, states: readonly SnapshotState[] = ["local", "durable"]): Promise<Snapshot | undefined> {
  return q.maybeOne<Snapshot>(
    `SELECT ${COLS} FROM snapshots WHERE sandbox_id = $1 AND state = ANY($2::text[]) ORDER BY created_at DESC, id DESC LIMIT 1`,
    [sandboxId, [...states]],
  );
}

export interface SnapshotPatch {
  state?: SnapshotState;
  parts?: SnapshotPart[];
  sizeBytes?: number | null;
  environment?: string | null;
  nodeId?: NodeId | null;
  error?: string | null;
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
  const row = await q.maybeOne<Snapshot>(`UPDATE snapshots SET ${sets.join(", ")} WHERE ${where} RETURNING ${COLS}`, params);
  if (row) return row;
  const cur = await getSnapshot(q, id);
  throw new SpaceError("failed_precondition", `snapshot ${id} is ${cur.state}, expected ${opts.from?.join(" or ")}`, { details: { state: cur.state } });
}

/** Adds one part (e.g. after its upload) without rewriting the others. */
export async function addSnapshotPart(q: Queryable, id: string, part: SnapshotPart): Promise<Snapshot> {
  return q.one<Snapshot>(
    `UPDATE snapshots SET parts = parts || $2::jsonb, size_bytes = coalesce(size_bytes, 0) + $3 WHERE id = $1 RETURNING ${COLS}`,
    [id, json([part]), part.sizeBytes],
    `snapshot ${id}`,
  );
}
