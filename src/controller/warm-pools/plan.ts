/**
 * What one reconcile of a pool should do, from what it observed (pure, table-tested):
 * which slots to forget, retire, fail or unreserve, how many members to create, and the
 * status to write. The reconciler (reconciler.ts) loads, calls this, then converges.
 */
import type { EnvironmentBinding, GateMode } from "../../substrate/placement.ts";
import type { WarmSlot } from "../../store/warm-pools.ts";

/**
 * Why a member leaves its pool without being adopted.
 * - pool_deleted: the pool is gone (or its template no longer resolves).
 * - build_changed: the release moved to another build; old members are never adopted.
 * - shape_changed / template_changed: the pool's spec changed under the member.
 * - node_not_ready: its node is draining, fenced or unavailable (never adopted there).
 * - environment_not_usable: gate `on` and its node does not publish the build's environment.
 * - excess: the pool holds more than its size.
 * - expiring: close to the 24 h sandbox lifetime; replaced by a fresh one.
 */
export type RetireReason =
  | "pool_deleted"
  | "build_changed"
  | "shape_changed"
  | "template_changed"
  | "node_not_ready"
  | "environment_not_usable"
  | "excess"
  | "expiring";

export interface PoolTarget {
  size: number;
  vcpu: number;
  memoryMib: number;
  diskMib: number;
  templateId: string;
  buildId: string | null;
}

export interface MemberSandbox {
  state: string;
  tenantId: string;
  nodeId: string | null;
  templateId: string | null;
  vcpu: number;
  memoryMib: number;
  diskMib: number;
}

export interface NodeView {
  status: string;
  usableEnvironments: readonly string[];
}

export interface PlanInput {
  /** null: the pool is gone or unresolvable; every member drains. */
  target: PoolTarget | null;
  slots: readonly WarmSlot[];
  sandboxes: ReadonlyMap<string, MemberSandbox>;
  /** The node directory; a node missing here is unknown (its members stay). */
  nodes: ReadonlyMap<string, NodeView>;
  gate: GateMode;
  binding: EnvironmentBinding;
  poolTenant: string;
  /** Slots whose create runs in this process now. */
  inflight: ReadonlySet<string>;
  now: Date;
  /** A `creating` slot older than this with no create in flight is failed (its creator died). */
  creatingTimeoutMs: number;
  /** A reservation (Native admission) older than this goes back to ready. */
  reservationTtlMs: number;
  /** Members older than this are replaced. */
  maxAgeMs: number;
  /** Members created concurrently per pool. */
  maxParallelCreates: number;
}

export interface Plan {
  /** Slot rows to delete (history of adoptions, failures, members whose sandbox is gone). */
  forget: string[];
  /** ready → retiring (then killed and forgotten). */
  retire: Array<{ slotId: string; reason: RetireReason }>;
  /** retiring slots whose sandbox must be killed, then forgotten. */
  kill: Array<{ slotId: string; sandboxId: string | null }>;
  /** creating → failed: no creator. */
  fail: string[];
  /** reserved → ready. */
  unreserve: string[];
  /** Members to start now. */
  create: number;
  status: PoolStatus;
}

export interface PoolStatus {
  size: number;
  ready: number;
  creating: number;
  reserved: number;
  retiring: number;
  templateId: string | null;
  buildId: string | null;
  /** Ready when `ready >= size`; the reason says what is missing. */
  conditions: Array<{ type: "Ready"; status: boolean; reason: string }>;
}

const LIVE = new Set(["creating", "running"]);

export function planPool(i: PlanInput): Plan {
  const plan: Plan = { forget: [], retire: [], kill: [], fail: [], unreserve: [], create: 0, status: emptyStatus(i) };
  const t = i.target;
  const keep: WarmSlot[] = [];
  let creating = 0;
  let reserved = 0;
  for (const s of i.slots) {
    const sb = s.sandboxId ? i.sandboxes.get(s.sandboxId) : undefined;
    const ours = sb !== undefined && sb.tenantId === i.poolTenant;
    switch (s.state) {
      case "adopted":
        // History once its sandbox was handed over (or vanished); a fresh claim may still be checking it.
        if (!ours || age(i.now, s.adoptedAt ?? s.updatedAt) > 60_000) plan.forget.push(s.id);
        break;
      case "failed":
        plan.kill.push({ slotId: s.id, sandboxId: ours && LIVE.has(sb.state) ? s.sandboxId : null });
        break;
      case "retiring":
        plan.kill.push({ slotId: s.id, sandboxId: ours && LIVE.has(sb.state) ? s.sandboxId : null });
        break;
      case "reserved":
        if (!ours) plan.forget.push(s.id);
        else if (age(i.now, s.updatedAt) > i.reservationTtlMs) plan.unreserve.push(s.id);
        else reserved++;
        break;
      case "creating":
        if (i.inflight.has(s.id)) creating++;
        else if (age(i.now, s.createdAt) > i.creatingTimeoutMs) plan.fail.push(s.id);
        else creating++; // another leader's create may still finish (it moves the slot itself)
        break;
      case "ready": {
        if (!ours || sb.state !== "running") {
          // Killed (timeout, lost node) or handed over outside a claim: nothing to adopt.
          plan.forget.push(s.id);
          break;
        }
        const reason = retireReason(i, s, sb);
        if (reason) plan.retire.push({ slotId: s.id, reason });
        else keep.push(s);
        break;
      }
    }
  }
  const size = t?.size ?? 0;
  // Newest extras leave first: the oldest are adopted first anyway.
  const retiredExcess = Math.max(0, Math.min(keep.length + creating - size, keep.length));
  if (retiredExcess > 0) {
    const byNewest = [...keep].sort((a, b) => (b.readyAt ? new Date(b.readyAt).getTime() : 0) - (a.readyAt ? new Date(a.readyAt).getTime() : 0));
    for (const s of byNewest.slice(0, retiredExcess)) plan.retire.push({ slotId: s.id, reason: "excess" });
  }
  const ready = keep.length - retiredExcess;
  if (t) plan.create = Math.max(0, Math.min(size - ready - creating, i.maxParallelCreates - creating));
  plan.status = {
    ...emptyStatus(i),
    ready,
    creating,
    reserved,
    retiring: plan.retire.length + plan.kill.length,
    conditions: [condition(t, ready, creating)],
  };
  return plan;
}

function retireReason(i: PlanInput, s: WarmSlot, sb: MemberSandbox): RetireReason | null {
  const t = i.target;
  if (!t) return "pool_deleted";
  if (sb.templateId !== t.templateId) return "template_changed";
  if ((s.buildId ?? null) !== t.buildId) return "build_changed";
  if (sb.vcpu !== t.vcpu || sb.memoryMib !== t.memoryMib || sb.diskMib !== t.diskMib) return "shape_changed";
  const node = sb.nodeId ? i.nodes.get(sb.nodeId) : undefined;
  if (node) {
    // A node the directory lacks keeps its members (behaviours.md C: it goes back to the pool).
    if (node.status !== "ready") return "node_not_ready";
    if (i.gate === "on" && i.binding.kind === "bound" && !node.usableEnvironments.includes(i.binding.environment)) return "environment_not_usable";
  }
  if (age(i.now, s.createdAt) > i.maxAgeMs) return "expiring";
  return null;
}

/** Pure: Ready when the pool holds its size; the reason names what is missing. */
export function condition(t: PoolTarget | null, ready: number, creating: number): PoolStatus["conditions"][number] {
  if (!t) return { type: "Ready", status: false, reason: "PoolDeletedOrUnresolved" };
  if (ready >= t.size) return { type: "Ready", status: true, reason: t.size === 0 ? "Empty" : "Full" };
  return { type: "Ready", status: false, reason: creating > 0 ? "Refilling" : "Short" };
}

function emptyStatus(i: PlanInput): PoolStatus {
  return {
    size: i.target?.size ?? 0,
    ready: 0,
    creating: 0,
    reserved: 0,
    retiring: 0,
    templateId: i.target?.templateId ?? null,
    buildId: i.target?.buildId ?? null,
    conditions: [],
  };
}

const age = (now: Date, t: Date) => now.getTime() - new Date(t).getTime();
