/**
 * Capacity reservations (docs/capacity.md): what a node holds is what the `sandboxes` rows
 * bound to it hold, so a reservation is the row's `node_id`, written in the transaction
 * that checks the node still admits it, and it is freed the moment the row leaves a
 * holding state (killed — the node's kill done —, suspended, stopped, failed). The check runs under the node row's
 * lock (`FOR NO KEY UPDATE`), so concurrent placements on one node — from any API
 * replica — are serialised for those two statements only and can never overfill it;
 * placements on other nodes never wait.
 */
import type { Queryable, Db } from "./db.ts";
import type { SandboxState } from "./sandboxes.ts";
import { quotaStates } from "./tenant-quotas.ts";
import { SpaceError } from "../core/errors.ts";

/**
 * What the store holds on one node: sandboxes placed there, by what they hold
 * (`slots`: resident, holding an address and memory; `vcpu`: vCPUs of those that can run;
 * `disk`: sandboxes whose disk is on the node, stopped ones included).
 */
export interface NodeHeld {
  slots: number;
  vcpu: number;
  disk: number;
}

/** A node's row as the admission check reads it: what it published, and its count when found full. */
export interface PublishedNode {
  capacity: Record<string, number>;
  used: Record<string, number>;
  /** `memory_full_slots`: see `memoryFullSlotsAssignment`. */
  memoryFullSlots: number | null;
}

/**
 * Resident on its node: an address, memory (the quota's states, frozen in memory included,
 * and `killing`: the node holds it until its kill is done, when the row becomes `killed`).
 */
export const slotStates: readonly SandboxState[] = [...quotaStates, "killing"];
/** Can run, so its vCPUs count (a frozen sandbox runs nothing). */
export const cpuStates: readonly SandboxState[] = slotStates.filter((s) => s !== "paused");
/** Its disk is on the node (stopped sandboxes keep their rootfs). */
export const diskStates: readonly SandboxState[] = [...slotStates, "stopped"];

interface HeldRow {
  node_id: string;
  slots: number;
  vcpu: number;
  disk: number;
}

const HELD = `
  SELECT node_id::text AS node_id,
         count(*) FILTER (WHERE state = ANY($1::text[]))::int AS slots,
         coalesce(sum(vcpu) FILTER (WHERE state = ANY($2::text[])), 0)::int AS vcpu,
         count(*)::int AS disk
    FROM sandboxes
   WHERE node_id IS NOT NULL AND state = ANY($3::text[])`;
const heldParams = () => [[...slotStates], [...cpuStates], [...diskStates]];

/**
 * Where a node's measured memory stands against its target (substrate capacity.ts
 * `memoryStanding`): `past` it, clearly `under` it, or `near` it (under, within the margin).
 */
export type MemoryStanding = "past" | "near" | "under";

/**
 * The `SET` term a heartbeat writes `memory_full_slots` with (`nodeParam`: the node id's
 * placeholder): found past its memory target, the node keeps the count it had when first
 * found so, or takes the sandboxes holding a slot there now; clearly under, it forgets it;
 * near, it keeps what it had (a count, or none).
 */
export function memoryFullSlotsAssignment(params: unknown[], nodeParam: string, standing: MemoryStanding): string {
  if (standing === "under") return "memory_full_slots = NULL";
  if (standing === "near") return "memory_full_slots = memory_full_slots";
  params.push([...slotStates]);
  return `memory_full_slots = coalesce(memory_full_slots, (SELECT count(*)::int FROM sandboxes WHERE node_id = ${nodeParam} AND state = ANY($${params.length}::text[])))`;
}

/** What the store holds on every node that holds anything. */
export async function heldByNode(q: Queryable): Promise<Map<string, NodeHeld>> {
  const rows = await q.query<HeldRow>(`${HELD} GROUP BY node_id`, heldParams());
  return new Map(rows.map((r) => [r.node_id, { slots: r.slots, vcpu: r.vcpu, disk: r.disk }]));
}

/**
 * Binds `sandboxId` to the first candidate that admits it now, under that node's lock.
 * The sandbox itself never counts against its own placement (a restore re-placed on the
 * node it left).
 */
export async function reserveCapacity<R extends string>(
  db: Db,
  sandboxId: string,
  candidates: readonly string[],
  admit: (node: PublishedNode, held: Readonly<NodeHeld>) => true | R,
): Promise<{ nodeId: string } | { rejected: Partial<Record<R | "unavailable", string[]>> }> {
  const rejected: Partial<Record<R | "unavailable", string[]>> = {};
  for (const nodeId of candidates) {
    const placed = await db.transaction(async (tx) => {
      const node = await tx.maybeOne<PublishedNode>(
        `SELECT capacity, used, memory_full_slots AS "memoryFullSlots" FROM nodes WHERE id = $1 AND status = 'ready' FOR NO KEY UPDATE`,
        [nodeId],
      );
      if (!node) return "unavailable" as const;
      const row = await tx.maybeOne<HeldRow>(`${HELD} AND node_id = $4 AND id <> $5 GROUP BY node_id`, [...heldParams(), nodeId, sandboxId]);
      const verdict = admit({ capacity: node.capacity ?? {}, used: node.used ?? {}, memoryFullSlots: node.memoryFullSlots }, row ?? { slots: 0, vcpu: 0, disk: 0 });
      if (verdict !== true) return verdict;
      const n = await tx.execute(`UPDATE sandboxes SET node_id = $2, generation = generation + 1, updated_at = now() WHERE id = $1`, [sandboxId, nodeId]);
      if (n === 0) throw new SpaceError("not_found", `sandbox ${sandboxId} was removed while it was being placed`);
      return true;
    });
    if (placed === true) return { nodeId };
    (rejected[placed] ??= []).push(nodeId);
  }
  return { rejected };
}
