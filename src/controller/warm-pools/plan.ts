/**
 * What one reconcile of a pool should do, from what it observed (pure, table-tested):
 * which slots to forget, retire, fail or unreserve, which idle members to suspend or
 * resume (idle-policy.ts), how many members to create, and the status to write. The
 * reconciler (reconciler.ts) loads, calls this, then converges.
 */
import type { Capacity, EnvironmentBinding, GateMode } from "../../substrate/placement.ts";
import type { WarmSlot } from "../../store/warm-pools.ts";
import { idleMoves, type IdleMember, type IdleSpec } from "./idle-policy.ts";

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
  /** Published capacity and use (absent: not published; only unconditional idle policies act). */
  capacity?: Capacity | null;
  used?: Capacity | null;
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
  /** Slots whose suspend or resume runs in this process now. */
  moving: ReadonlySet<string>;
  idle: IdleSpec;
  /** A node whose members moved more recently than this is not judged on its published memory yet. */
  idleSettleMs: number;
  now: Date;
  /** A `creating` slot older than this with no create in flight is failed (its creator died). */
  creatingTimeoutMs: number;
  /** A reservation (Native admission) older than this goes back to ready. */
  reservationTtlMs: number;
  /** Members older than this are replaced. */
  maxAgeMs: number;
  /** Members created concurrently per pool. */
  maxParallelCreates: number;
  /**
   * Refills yield to a burst of adoptions: none starts while the pool's latest adoption is
   * more recent than `quietMs`, for at most `maxDeferMs` after `shortSince` (when this
   * leader first deferred). A refill is a cold create (~270 ms of CPU on a 2-core node);
   * started during a burst it takes the cores the adoptions' first commands wait for.
   */
  refill: { quietMs: number; maxDeferMs: number; shortSince: Date | null };
}

export interface Plan {
  /** Slot rows to delete (history of adoptions, failures, members whose sandbox is gone). */
  forget: string[];
  /** ready → retiring (then killed and forgotten). */
  retire: Array<{ slotId: string; reason: RetireReason }>;
  /** retiring slots whose sandbox must be killed, then forgotten. */
  kill: Array<{ slotId: string; sandboxId: string | null }>;
  /** creating | suspending | resuming → failed: no process is moving it any more. */
  fail: string[];
  /** reserved → ready, or → suspended for a suspended member. */
  unreserve: Array<{ slotId: string; to: "ready" | "suspended" }>;
  /** suspending | resuming left behind by a process that died: → the state its sandbox is in. */
  settle: Array<{ slotId: string; from: "suspending" | "resuming"; to: "ready" | "suspended" }>;
  /** ready → suspending → suspended (idle policy). */
  suspend: string[];
  /** suspended → resuming → ready (idle policy). */
  resume: string[];
  /** Members to start now. */
  create: number;
  /** Members wanted but held back: the pool's adoptions are not quiet yet (`refill`). */
  deferred: number;
  status: PoolStatus;
}

export interface PoolStatus {
  size: number;
  /** Running members ready to adopt. */
  ready: number;
  /** Suspended members (adopted after a restore on their node). */
  suspended: number;
  /** Members being suspended or resumed. */
  moving: number;
  creating: number;
  reserved: number;
  retiring: number;
  templateId: string | null;
  buildId: string | null;
  /** Ready when `ready + suspended + moving >= size`; the reason says what is missing. */
  conditions: Array<{ type: "Ready"; status: boolean; reason: string }>;
}

/** Sandbox states in which a member still holds something to kill. */
const LIVE = new Set(["creating", "running", "suspending", "suspended", "resuming"]);

export function planPool(i: PlanInput): Plan {
  const plan: Plan = { forget: [], retire: [], kill: [], fail: [], unreserve: [], settle: [], suspend: [], resume: [], create: 0, deferred: 0, status: emptyStatus(i) };
  const t = i.target;
  const keep: WarmSlot[] = [];
  let creating = 0;
  let reserved = 0;
  let moving = 0;
  let lastAdoption = 0;
  const busyNodes = new Set<string>();
  for (const s of i.slots) {
    const sb = s.sandboxId ? i.sandboxes.get(s.sandboxId) : undefined;
    const ours = sb !== undefined && sb.tenantId === i.poolTenant;
    switch (s.state) {
      case "adopted": {
        const at = s.adoptedAt ?? s.updatedAt;
        lastAdoption = Math.max(lastAdoption, new Date(at).getTime());
        // History once its sandbox was handed over (or vanished) and the refill's quiet window
        // it dates has passed; a fresh claim may still be checking it.
        if ((!ours && age(i.now, at) >= i.refill.quietMs) || age(i.now, at) > 60_000) plan.forget.push(s.id);
        break;
      }
      case "failed":
      case "retiring":
        plan.kill.push({ slotId: s.id, sandboxId: ours && LIVE.has(sb.state) ? s.sandboxId : null });
        break;
      case "reserved":
        if (!ours || (sb.state !== "running" && sb.state !== "suspended")) plan.forget.push(s.id);
        else if (age(i.now, s.updatedAt) > i.reservationTtlMs) plan.unreserve.push({ slotId: s.id, to: sb.state === "suspended" ? "suspended" : "ready" });
        else reserved++;
        break;
      case "creating":
        if (i.inflight.has(s.id)) creating++;
        else if (age(i.now, s.createdAt) > i.creatingTimeoutMs) plan.fail.push(s.id);
        else creating++; // another leader's create may still finish (it moves the slot itself)
        break;
      case "suspending":
      case "resuming":
        if (sb?.nodeId) busyNodes.add(sb.nodeId);
        if (i.moving.has(s.id)) moving++;
        else if (!ours) plan.forget.push(s.id);
        else if (sb.state === "running" || sb.state === "suspended") plan.settle.push({ slotId: s.id, from: s.state, to: sb.state === "running" ? "ready" : "suspended" });
        else if (age(i.now, s.updatedAt) > i.creatingTimeoutMs) plan.fail.push(s.id);
        else moving++; // another leader's move may still finish
        break;
      case "ready":
      case "suspended": {
        const want = s.state === "ready" ? "running" : "suspended";
        if (!ours || sb.state !== want) {
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
  const retiredExcess = Math.max(0, Math.min(keep.length + creating + moving - size, keep.length));
  const byNewest = [...keep].sort((a, b) => (b.readyAt ? new Date(b.readyAt).getTime() : 0) - (a.readyAt ? new Date(a.readyAt).getTime() : 0));
  for (const s of byNewest.slice(0, retiredExcess)) plan.retire.push({ slotId: s.id, reason: "excess" });
  const idle = byNewest.slice(retiredExcess);
  const ready = idle.filter((s) => s.state === "ready").length;
  const suspended = idle.length - ready;
  if (t) {
    const wanted = Math.max(0, Math.min(size - idle.length - moving - creating, i.maxParallelCreates - creating));
    const now = i.now.getTime();
    const { quietMs, maxDeferMs, shortSince } = i.refill;
    const defer = now - lastAdoption < quietMs && (shortSince === null || now - shortSince.getTime() < maxDeferMs);
    if (defer) plan.deferred = wanted;
    else plan.create = wanted;
    const members: IdleMember[] = idle.map((s) => ({
      slotId: s.id,
      state: s.state as "ready" | "suspended",
      nodeId: i.sandboxes.get(s.sandboxId!)!.nodeId,
      memoryMib: i.sandboxes.get(s.sandboxId!)!.memoryMib,
      movedAt: new Date(s.updatedAt),
      readyAt: s.readyAt ? new Date(s.readyAt) : null,
    }));
    const moves = idleMoves(i.idle, members, i.nodes, { now: i.now, settleMs: i.idleSettleMs, busyNodes });
    plan.suspend = moves.suspend;
    plan.resume = moves.resume;
  }
  plan.status = {
    ...emptyStatus(i),
    ready,
    suspended,
    moving,
    creating,
    reserved,
    retiring: plan.retire.length + plan.kill.length,
    conditions: [condition(t, ready + suspended + moving, creating)],
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

/**
 * The size a pool holds now: its `size`, grown for a burst to its demand (the creates its
 * members could have served in the demand window, `recentCreates`) up to `maxSize`, and
 * back as they age out of the window (the excess retires, newest first). A burst that found
 * the pool short is what grows it: the next one finds members where the last went cold.
 */
export function burstSize(size: number, maxSize: number | null, demand: number): number {
  if (maxSize === null || maxSize <= size) return size;
  return Math.min(maxSize, Math.max(size, demand));
}

/** Pure: Ready when the pool holds its size (running or suspended members); the reason names what is missing. */
export function condition(t: PoolTarget | null, ready: number, creating: number): PoolStatus["conditions"][number] {
  if (!t) return { type: "Ready", status: false, reason: "PoolDeletedOrUnresolved" };
  if (ready >= t.size) return { type: "Ready", status: true, reason: t.size === 0 ? "Empty" : "Full" };
  return { type: "Ready", status: false, reason: creating > 0 ? "Refilling" : "Short" };
}

function emptyStatus(i: PlanInput): PoolStatus {
  return {
    size: i.target?.size ?? 0,
    ready: 0,
    suspended: 0,
    moving: 0,
    creating: 0,
    reserved: 0,
    retiring: 0,
    templateId: i.target?.templateId ?? null,
    buildId: i.target?.buildId ?? null,
    conditions: [],
  };
}

const age = (now: Date, t: Date) => now.getTime() - new Date(t).getTime();
