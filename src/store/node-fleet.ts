/**
 * The Direct fleet's node queries (beside nodes.ts, which `space up`'s in-process node
 * uses): registration admission (conflicts checked under a row lock, nothing stored on
 * refusal), heartbeats checked against the registered address, drain and fence, and
 * liveness that keeps an operator's drain across an outage.
 */
import { SpaceError } from "../core/errors.ts";
import type { NodeId } from "../core/ids.ts";
import type { Queryable } from "./db.ts";
import type { NodeRecord, NodeStatus } from "./nodes.ts";
import { columns, json } from "./sql.ts";
import { memoryFullSlotsAssignment, type MemoryStanding } from "./capacity-ledger.ts";

export type DrainMode = "gentle" | "forced";

export interface FleetNode extends NodeRecord {
  /** Set while the node is draining (kept across an unavailable spell). */
  drainMode: DrainMode | null;
  /** When the control plane last called the node back and it answered with its id. */
  verifiedAt: Date | null;
  /** Why the status is what it is (operator note, liveness reason). */
  statusReason: string | null;
  statusChangedAt: Date;
  /** Its count while past its memory target (capacity-ledger.ts `memoryFullSlotsAssignment`). */
  memoryFullSlots: number | null;
}

const COLS = columns([
  "id",
  "name",
  "address",
  "node_group",
  "labels",
  "status",
  "capacity",
  "used",
  "usable_environments",
  "templates",
  "substrate",
  "version",
  "last_heartbeat_at",
  "registered_at",
  "updated_at",
  "drain_mode",
  "verified_at",
  "status_reason",
  "status_changed_at",
  "memory_full_slots",
]);

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export async function findFleetNode(
  q: Queryable,
  id: string,
  opts: { forUpdate?: boolean } = {},
): Promise<FleetNode | undefined> {
  if (!UUID_RE.test(id)) return undefined;
  return q.maybeOne<FleetNode>(`SELECT ${COLS} FROM nodes WHERE id = $1 ${opts.forUpdate ? "FOR UPDATE" : ""}`, [id]);
}

export async function getFleetNode(q: Queryable, id: string): Promise<FleetNode> {
  const n = await findFleetNode(q, id);
  if (!n) throw new SpaceError("not_found", `node ${id} not found`);
  return n;
}

export async function listFleetNodes(q: Queryable): Promise<Array<FleetNode & { residentSandboxes: number }>> {
  return q.query<FleetNode & { residentSandboxes: number }>(
    `SELECT ${COLS},
            (SELECT count(*)::int FROM sandboxes s WHERE s.node_id = nodes.id
               AND s.state IN ('creating','running','pausing','paused','suspending','resuming','stopping','stopped')) AS "residentSandboxes"
       FROM nodes ORDER BY node_group, name, id`,
  );
}

export interface FleetRegistration {
  id: NodeId;
  name: string;
  address: string;
  nodeGroup: string;
  labels: Record<string, string>;
  capacity?: Record<string, number>;
  used?: Record<string, number>;
  usableEnvironments?: string[];
  templates?: unknown[];
  version?: string;
}

/**
 * Why a registration cannot be admitted, or null. Checked before the call-back (so a
 * conflicting node is refused fast) and again under the row lock when storing.
 * - 409 (already_exists): the id belongs to a node of another name, or the name to
 *   another node that is still ready; a kubernetes node with this id.
 * - 403 (permission_denied): the node is fenced.
 */
export async function registrationConflict(
  q: Queryable,
  r: FleetRegistration,
  existing: FleetNode | undefined,
): Promise<SpaceError | null> {
  if (existing) {
    if (existing.substrate !== "direct") {
      return new SpaceError("already_exists", `node id ${r.id} is registered as a ${existing.substrate} node`);
    }
    if (existing.name !== r.name) {
      return new SpaceError(
        "already_exists",
        `node id ${r.id} is registered as '${existing.name}', not '${r.name}': two nodes share a node-id file (delete one's node-id, or DELETE /admin/api/v1/nodes/${r.id})`,
      );
    }
    if (existing.status === "fenced") {
      return new SpaceError(
        "permission_denied",
        `node ${r.id} (${r.name}) is fenced: registration refused until an operator readies it`,
      );
    }
  }
  const other = await q.maybeOne<{ id: string }>(
    `SELECT id FROM nodes WHERE name = $1 AND id <> $2 AND status = 'ready' LIMIT 1`,
    [r.name, r.id],
  );
  if (other)
    return new SpaceError(
      "already_exists",
      `node name '${r.name}' is held by ready node ${other.id}; names are unique among ready nodes`,
    );
  return null;
}

/**
 * Stores an admitted registration (insert, or update of the same node, e.g. at a new
 * address). draining/fenced are kept; unavailable → ready (or draining when a drain was
 * requested). Run inside a transaction after `registrationConflict` under FOR UPDATE.
 */
export async function upsertRegistration(q: Queryable, r: FleetRegistration, verified: boolean): Promise<FleetNode> {
  return q.one<FleetNode>(
    `INSERT INTO nodes (id, name, address, node_group, labels, capacity, used, usable_environments, templates, substrate, version, verified_at)
     VALUES ($1, $2, $3, $4, $5::jsonb, $6::jsonb, $7::jsonb, $8::text[], $9::jsonb, 'direct', $10, CASE WHEN $11 THEN now() END)
     ON CONFLICT (id) DO UPDATE SET
       name = EXCLUDED.name, address = EXCLUDED.address, node_group = EXCLUDED.node_group, labels = EXCLUDED.labels,
       capacity = EXCLUDED.capacity, used = EXCLUDED.used, usable_environments = EXCLUDED.usable_environments,
       templates = EXCLUDED.templates, version = EXCLUDED.version,
       verified_at = CASE WHEN $11 THEN now() ELSE nodes.verified_at END,
       status = CASE WHEN nodes.status IN ('draining', 'fenced') THEN nodes.status
                     WHEN nodes.drain_mode IS NOT NULL THEN 'draining' ELSE 'ready' END,
       status_reason = CASE WHEN nodes.status = 'unavailable' THEN NULL ELSE nodes.status_reason END,
       status_changed_at = CASE WHEN nodes.status = 'unavailable' THEN now() ELSE nodes.status_changed_at END,
       last_heartbeat_at = now(), updated_at = now()
     RETURNING ${COLS}`,
    [
      r.id,
      r.name,
      r.address,
      r.nodeGroup,
      json(r.labels),
      json(r.capacity ?? {}),
      json(r.used ?? {}),
      r.usableEnvironments ?? [],
      json(r.templates ?? []),
      r.version ?? "",
      verified,
    ],
  );
}

export interface FleetHeartbeat {
  /** The address the node believes it is registered at; must match. */
  address: string;
  capacity?: Record<string, number>;
  used?: Record<string, number>;
  /** A complete inventory replaces the list; absent = inventory unavailable (changes nothing). */
  usableEnvironments?: string[];
  templates?: unknown[];
  /** Where what it measured stands against its memory target (capacity.ts `memoryStanding`); absent = not measured, changes nothing. */
  memoryStanding?: MemoryStanding | undefined;
}

/**
 * A node's heartbeat. Refused: unknown node (404: register again), fenced (403), an
 * address other than the registered one (409: register again, which re-verifies).
 * unavailable → ready (or draining when a drain is pending).
 */
export async function recordHeartbeat(q: Queryable, id: string, hb: FleetHeartbeat): Promise<FleetNode> {
  const n = await findFleetNode(q, id);
  if (!n) throw new SpaceError("not_found", `node ${id} is not registered: register again`);
  if (n.status === "fenced")
    throw new SpaceError("permission_denied", `node ${id} (${n.name}) is fenced: its writes are refused`);
  if (n.address !== hb.address) {
    throw new SpaceError(
      "already_exists",
      `node ${id} is registered at ${n.address}, heartbeat says ${hb.address}: register again (with verify) to change the address`,
    );
  }
  const params: unknown[] = [id, json(hb.capacity ?? n.capacity), json(hb.used ?? n.used), json(hb.templates ?? n.templates)];
  let more = "";
  if (hb.usableEnvironments) {
    params.push(hb.usableEnvironments);
    more = `, usable_environments = $${params.length}::text[]`;
  }
  if (hb.memoryStanding !== undefined) more += `, ${memoryFullSlotsAssignment(params, "$1::uuid", hb.memoryStanding)}`;
  return q.one<FleetNode>(
    `UPDATE nodes SET capacity = $2::jsonb, used = $3::jsonb, templates = $4::jsonb ${more},
            last_heartbeat_at = now(), updated_at = now(),
            status = CASE WHEN status = 'unavailable' THEN (CASE WHEN drain_mode IS NOT NULL THEN 'draining' ELSE 'ready' END) ELSE status END,
            status_reason = CASE WHEN status = 'unavailable' THEN NULL ELSE status_reason END,
            status_changed_at = CASE WHEN status = 'unavailable' THEN now() ELSE status_changed_at END
      WHERE id = $1 RETURNING ${COLS}`,
    params,
    `node ${id}`,
  );
}

/**
 * ready and draining nodes silent for longer than `graceMs` become unavailable (a drain
 * request survives in drain_mode). Returns those changed.
 */
export async function markSilentNodesUnavailable(q: Queryable, graceMs: number): Promise<FleetNode[]> {
  return q.query<FleetNode>(
    `UPDATE nodes SET status = 'unavailable', updated_at = now(), status_changed_at = now(),
            status_reason = 'no heartbeat since ' || to_char(last_heartbeat_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
      WHERE status IN ('ready', 'draining') AND substrate = 'direct'
        AND last_heartbeat_at < now() - $1 * interval '1 millisecond'
      RETURNING ${COLS}`,
    [graceMs],
  );
}

/** Operator status changes. ready clears a drain; drain keeps a fence out (fence wins). */
export async function setFleetNodeStatus(
  q: Queryable,
  id: string,
  status: Extract<NodeStatus, "ready" | "draining" | "fenced">,
  opts: { drainMode?: DrainMode; reason?: string } = {},
): Promise<FleetNode> {
  const n = await findFleetNode(q, id);
  if (!n) throw new SpaceError("not_found", `node ${id} not found`);
  if (status === "draining" && n.status === "fenced") {
    throw new SpaceError("failed_precondition", `node ${id} is fenced; ready it before draining`);
  }
  // An unavailable node stays unavailable; the drain applies when it heartbeats again.
  const effective = status === "draining" && n.status === "unavailable" ? "unavailable" : status;
  return q.one<FleetNode>(
    `UPDATE nodes SET status = $2, drain_mode = $3, status_reason = $4, updated_at = now(),
            status_changed_at = CASE WHEN status = $2 THEN status_changed_at ELSE now() END
      WHERE id = $1 RETURNING ${COLS}`,
    [
      id,
      effective,
      status === "draining" ? (opts.drainMode ?? "gentle") : status === "fenced" ? n.drainMode : null,
      opts.reason ?? null,
    ],
    `node ${id}`,
  );
}
