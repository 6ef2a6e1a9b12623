/** Warm-pool slots: pre-created sandboxes per pool, adopted by creates (one adopter wins). */
import { randomId, type NodeId } from "../core/ids.ts";
import type { Queryable } from "./db.ts";
import { columns, setClause } from "./sql.ts";

export const warmSlotStates = ["creating", "ready", "adopted", "failed", "retiring"] as const;
export type WarmSlotState = (typeof warmSlotStates)[number];

export interface WarmPoolSlot {
  id: string;
  pool: string;
  buildId: string | null;
  sandboxId: string | null;
  nodeId: NodeId | null;
  state: WarmSlotState;
  createdAt: Date;
  updatedAt: Date;
  readyAt: Date | null;
  adoptedAt: Date | null;
}

const COLS = columns(["id", "pool", "build_id", "sandbox_id", "node_id", "state", "created_at", "updated_at", "ready_at", "adopted_at"]);

export async function createWarmSlot(q: Queryable, input: { pool: string; buildId?: string | null; sandboxId?: string | null; nodeId?: NodeId | null }): Promise<WarmPoolSlot> {
  return q.one<WarmPoolSlot>(`INSERT INTO warm_pool_slots (id, pool, build_id, sandbox_id, node_id) VALUES ($1, $2, $3, $4, $5) RETURNING ${COLS}`, [
    `wp_${randomId(16)}`,
    input.pool,
    input.buildId ?? null,
    input.sandboxId ?? null,
    input.nodeId ?? null,
  ]);
}

export async function updateWarmSlot(
  q: Queryable,
  id: string,
  patch: { state?: WarmSlotState; sandboxId?: string | null; nodeId?: NodeId | null },
): Promise<WarmPoolSlot> {
  const params: unknown[] = [id];
  const sets = [...setClause({ ...patch }, { state: { col: "state" }, sandboxId: { col: "sandbox_id" }, nodeId: { col: "node_id" } }, params), "updated_at = now()"];
  if (patch.state === "ready") sets.push("ready_at = coalesce(ready_at, now())");
  return q.one<WarmPoolSlot>(`UPDATE warm_pool_slots SET ${sets.join(", ")} WHERE id = $1 RETURNING ${COLS}`, params, `warm slot ${id}`);
}

/**
 * Adopts one ready slot of `pool` (optionally only on `nodeIds`), oldest first; concurrent
 * adopters never get the same slot. undefined when none is ready.
 */
export async function adoptWarmSlot(q: Queryable, pool: string, opts: { nodeIds?: readonly string[] } = {}): Promise<WarmPoolSlot | undefined> {
  return q.maybeOne<WarmPoolSlot>(
    `UPDATE warm_pool_slots SET state = 'adopted', adopted_at = now(), updated_at = now()
      WHERE id = (SELECT id FROM warm_pool_slots WHERE pool = $1 AND state = 'ready'
                    AND ($2::uuid[] IS NULL OR node_id = ANY($2::uuid[]))
                  ORDER BY ready_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
      RETURNING ${COLS}`,
    [pool, opts.nodeIds ? [...opts.nodeIds] : null],
  );
}

export async function listWarmSlots(q: Queryable, pool?: string, states?: readonly WarmSlotState[]): Promise<WarmPoolSlot[]> {
  return q.query<WarmPoolSlot>(
    `SELECT ${COLS} FROM warm_pool_slots WHERE ($1::text IS NULL OR pool = $1) AND ($2::text[] IS NULL OR state = ANY($2::text[])) ORDER BY created_at, id`,
    [pool ?? null, states ? [...states] : null],
  );
}

/** Counts per state of one pool. */
export async function countWarmSlots(q: Queryable, pool: string): Promise<Partial<Record<WarmSlotState, number>>> {
  const rows = await q.query<{ state: WarmSlotState; n: number }>(`SELECT state, count(*)::int AS n FROM warm_pool_slots WHERE pool = $1 GROUP BY state`, [pool]);
  return Object.fromEntries(rows.map((r) => [r.state, r.n]));
}

/** Absent = ok. */
export async function deleteWarmSlot(q: Queryable, id: string): Promise<void> {
  await q.execute(`DELETE FROM warm_pool_slots WHERE id = $1`, [id]);
}
