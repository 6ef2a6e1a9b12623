/**
 * Nodes: registration (upsert by id), heartbeats publishing capacity, environments and
 * template inventory, and liveness (ready → unavailable after a grace without heartbeat).
 * `draining` and `fenced` are operator decisions: heartbeats and re-registration keep them.
 */
import { SpaceError } from "../core/errors.ts";
import type { NodeId } from "../core/ids.ts";
import type { Queryable } from "./db.ts";
import { columns, json, setClause } from "./sql.ts";
import { memoryFullSlotsAssignment, type MemoryStanding } from "./capacity-ledger.ts";

export const nodeStatuses = [
  /** Heartbeating; takes new sandboxes. */
  "ready",
  /** Missed heartbeats for longer than the grace; takes nothing. */
  "unavailable",
  /** Operator drain: keeps its sandboxes, takes no new ones. */
  "draining",
  /** Operator fence: considered dead; its sandboxes are recovered elsewhere. */
  "fenced",
] as const;
export type NodeStatus = (typeof nodeStatuses)[number];

export interface NodeRecord {
  id: NodeId;
  name: string;
  address: string;
  nodeGroup: string;
  labels: Record<string, string>;
  status: NodeStatus;
  /** e.g. {vcpu, memoryMib, diskMib, slots}. */
  capacity: Record<string, number>;
  used: Record<string, number>;
  usableEnvironments: string[];
  /** Template inventory, as published by node-ctl. */
  templates: unknown[];
  substrate: "direct" | "kubernetes";
  version: string;
  lastHeartbeatAt: Date;
  registeredAt: Date;
  updatedAt: Date;
}

const COLS = columns([
  "id", "name", "address", "node_group", "labels", "status", "capacity", "used", "usable_environments", "templates",
  "substrate", "version", "last_heartbeat_at", "registered_at", "updated_at",
]);

export interface NodeRegistration {
  id: NodeId;
  name: string;
  address: string;
  nodeGroup?: string;
  labels?: Record<string, string>;
  capacity?: Record<string, number>;
  used?: Record<string, number>;
  usableEnvironments?: string[];
  templates?: unknown[];
  substrate?: "direct" | "kubernetes";
  version?: string;
}

/** Registers or re-registers a node; an unavailable node becomes ready, drain/fence are kept. */
export async function registerNode(q: Queryable, r: NodeRegistration): Promise<NodeRecord> {
  return q.one<NodeRecord>(
    `INSERT INTO nodes (id, name, address, node_group, labels, capacity, used, usable_environments, templates, substrate, version)
     VALUES ($1, $2, $3, $4, $5::jsonb, $6::jsonb, $7::jsonb, $8::text[], $9::jsonb, $10, $11)
     ON CONFLICT (id) DO UPDATE SET
       name = EXCLUDED.name, address = EXCLUDED.address, node_group = EXCLUDED.node_group, labels = EXCLUDED.labels,
       capacity = EXCLUDED.capacity, used = EXCLUDED.used, usable_environments = EXCLUDED.usable_environments,
       templates = EXCLUDED.templates, substrate = EXCLUDED.substrate, version = EXCLUDED.version,
       status = CASE WHEN nodes.status IN ('draining', 'fenced') THEN nodes.status ELSE 'ready' END,
       last_heartbeat_at = now(), updated_at = now()
     RETURNING ${COLS}`,
    [
      r.id, r.name, r.address, r.nodeGroup ?? "default", json(r.labels ?? {}), json(r.capacity ?? {}), json(r.used ?? {}),
      r.usableEnvironments ?? [], json(r.templates ?? []), r.substrate ?? "direct", r.version ?? "",
    ],
  );
}

export interface NodeHeartbeat {
  capacity?: Record<string, number>;
  used?: Record<string, number>;
  /** A complete inventory replaces the list; omit when the inventory is unavailable (changes nothing). */
  usableEnvironments?: string[];
  templates?: unknown[];
  labels?: Record<string, string>;
  address?: string;
  /** Where what it measured stands against its memory target (capacity.ts `memoryStanding`); absent = not measured, changes nothing. */
  memoryStanding?: MemoryStanding | undefined;
}

/**
 * Records a heartbeat and what it publishes. not_found when the node is unknown (it must
 * register again). An unavailable node becomes ready again.
 */
export async function heartbeatNode(q: Queryable, id: NodeId, hb: NodeHeartbeat = {}): Promise<NodeRecord> {
  const { memoryStanding, ...published } = hb;
  const params: unknown[] = [id];
  const sets = setClause(
    published,
    {
      capacity: { col: "capacity", json: true },
      used: { col: "used", json: true },
      templates: { col: "templates", json: true },
      labels: { col: "labels", json: true },
      usableEnvironments: { col: "usable_environments" },
      address: { col: "address" },
    },
    params,
  );
  if (memoryStanding !== undefined) sets.push(memoryFullSlotsAssignment(params, "$1", memoryStanding));
  sets.push("last_heartbeat_at = now()", "updated_at = now()", "status = CASE WHEN status = 'unavailable' THEN 'ready' ELSE status END");
  return q.one<NodeRecord>(`UPDATE nodes SET ${sets.join(", ")} WHERE id = $1 RETURNING ${COLS}`, params, `node ${id}`);
}

/** ready nodes silent for longer than `graceMs` become unavailable; returns those changed. */
export async function markUnavailableNodes(q: Queryable, graceMs: number): Promise<NodeRecord[]> {
  return q.query<NodeRecord>(
    `UPDATE nodes SET status = 'unavailable', updated_at = now()
      WHERE status = 'ready' AND last_heartbeat_at < now() - $1 * interval '1 millisecond' RETURNING ${COLS}`,
    [graceMs],
  );
}

/** Operator status change (drain, fence, back to ready). */
export async function setNodeStatus(q: Queryable, id: NodeId, status: NodeStatus): Promise<NodeRecord> {
  return q.one<NodeRecord>(`UPDATE nodes SET status = $2, updated_at = now() WHERE id = $1 RETURNING ${COLS}`, [id, status], `node ${id}`);
}

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The node, or not_found (also for a string that is not a uuid). */
export async function getNode(q: Queryable, id: string): Promise<NodeRecord> {
  const n = UUID_RE.test(id) ? await q.maybeOne<NodeRecord>(`SELECT ${COLS} FROM nodes WHERE id = $1`, [id]) : undefined;
  if (!n) throw new SpaceError("not_found", `node ${id} not found`);
  return n;
}

export async function findNodeByName(q: Queryable, name: string): Promise<NodeRecord | undefined> {
  return q.maybeOne<NodeRecord>(`SELECT ${COLS} FROM nodes WHERE name = $1 ORDER BY registered_at DESC LIMIT 1`, [name]);
}

/** What placement reads of a node: no timestamps or version (a directory snapshot reads every node each second). */
export type PlacementNodeRow = Pick<NodeRecord, "id" | "name" | "address" | "nodeGroup" | "labels" | "status" | "capacity" | "used" | "usableEnvironments" | "templates"> & {
  /** Its count when found past its memory target (capacity-ledger.ts `memoryFullSlotsAssignment`). */
  memoryFullSlots: number | null;
};
const PLACEMENT_COLS = columns(["id", "name", "address", "node_group", "labels", "status", "capacity", "used", "usable_environments", "templates", "memory_full_slots"]);

/** One node as placement reads it; undefined when there is none of that id. */
export async function findPlacementNode(q: Queryable, id: string): Promise<PlacementNodeRow | undefined> {
  return UUID_RE.test(id) ? q.maybeOne<PlacementNodeRow>(`SELECT ${PLACEMENT_COLS} FROM nodes WHERE id = $1`, [id]) : undefined;
}

/** Every node of `substrate` as placement reads it, by id (placement breaks ties by listing order). */
export async function listPlacementNodes(q: Queryable, substrate: NodeRecord["substrate"]): Promise<PlacementNodeRow[]> {
  return q.query<PlacementNodeRow>(`SELECT ${PLACEMENT_COLS} FROM nodes WHERE substrate = $1 ORDER BY id`, [substrate]);
}

export async function listNodes(q: Queryable, f: { status?: readonly NodeStatus[]; nodeGroup?: string } = {}): Promise<NodeRecord[]> {
  const params: unknown[] = [];
  const where: string[] = [];
  if (f.status) {
    params.push([...f.status]);
    where.push(`status = ANY($${params.length}::text[])`);
  }
  if (f.nodeGroup !== undefined) {
    params.push(f.nodeGroup);
    where.push(`node_group = $${params.length}`);
  }
  return q.query<NodeRecord>(`SELECT ${COLS} FROM nodes ${where.length ? `WHERE ${where.join(" AND ")}` : ""} ORDER BY name, id`, params);
}

/**
 * The execution environments nodes in `status` report for `templateId` in their template
 * inventory, each once, in the order of the first node (by name, id) reporting it. Read in
 * the database: a create asks this, and shipping every node row to ask it costs O(fleet).
 */
export async function templateEnvironmentsOnNodes(q: Queryable, templateId: string, status: readonly NodeStatus[]): Promise<string[]> {
  const rows = await q.query<{ environment: string }>(
    `SELECT e.environment FROM (
       SELECT t->>'environment' AS environment, min(n.name) AS first_name, min(n.id::text) AS first_id
         FROM nodes n, jsonb_array_elements(CASE WHEN jsonb_typeof(n.templates) = 'array' THEN n.templates ELSE '[]'::jsonb END) t
        WHERE n.status = ANY($2::text[]) AND jsonb_typeof(t) = 'object'
          AND t->'templateId' = to_jsonb($1::text) AND jsonb_typeof(t->'environment') = 'string' AND t->>'environment' <> ''
        GROUP BY 1) e
     ORDER BY e.first_name, e.first_id`,
    [templateId, [...status]],
  );
  return rows.map((r) => r.environment);
}

/** Absent = ok. */
export async function deleteNode(q: Queryable, id: NodeId): Promise<void> {
  await q.execute(`DELETE FROM nodes WHERE id = $1`, [id]);
}
