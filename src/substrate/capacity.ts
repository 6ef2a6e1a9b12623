/**
 * Honest capacity (docs/capacity.md): a node admits sandboxes by what they use, not by a
 * multiple of their limits. Pure, so it is table-tested; Direct placement decides with it
 * and the store re-checks it under the node's row lock when it reserves (capacity-ledger).
 *
 * - Network slots: a hard limit, one per resident sandbox.
 * - CPU: a sandbox's vCPUs are its limit (cpu.max) and its share under contention
 *   (weights); admission counts a small request per vCPU, since an idle sandbox costs next
 *   to nothing.
 * - Memory: what the host really uses (total − MemAvailable at the last heartbeat), plus a
 *   working-set estimate for each sandbox placed since or still booting then, minus one
 *   for each that ended since; admitted up to a share of host memory, and refused
 *   outright while the node reports memory pressure (PSI), before the OOM killer would act.
 *   A node found past its target keeps its count until it is found clearly under it: it
 *   takes a sandbox in place of each that ended, up to the count it had then, below a
 *   harder limit, and none beyond.
 * - Disk: what the thin pool really holds at the last heartbeat, plus an estimate for each
 *   sandbox placed since, up to the pool less its reserve.
 *
 * What the store holds (`NodeHeld`) changes the moment a sandbox is reserved or ends, so
 * placement never waits for a heartbeat; the heartbeat reconciles the estimates with what
 * the node measured.
 */
import type { Config } from "../core/config.ts";
import type { Db } from "../store/db.ts";
import { heldByNode, reserveCapacity, type MemoryStanding, type NodeHeld, type PublishedNode } from "../store/capacity-ledger.ts";
import { BelievedRead, type Dated } from "./believed-read.ts";
import type { Capacity, PlacementNode, PlacementWork, RejectReason } from "./placement.ts";

export type { NodeHeld };

/** The settings of the model (SPACE_CAPACITY_*). */
export interface CapacitySettings {
  /** Milli-CPUs admission counts per sandbox vCPU. */
  cpuRequestMilli: number;
  /** Working set counted for a sandbox the node has not measured yet (MiB; at most its limit). */
  memoryRequestMib: number;
  /** Share of host memory (percent) that may be in use after an admission. */
  memoryTargetPercent: number;
  /** Memory pressure (PSI `some` avg10, percent) at or above which the node takes nothing. */
  memoryPressurePercent: number;
  /** Share of host memory (percent) past which a full node takes nothing, not even in place of one that ended. */
  memoryLimitPercent: number;
  /** Disk counted for a sandbox the pool has not measured yet (MiB; at most its disk). */
  diskRequestMib: number;
}

export const DEFAULT_CAPACITY: Readonly<CapacitySettings> = {
  cpuRequestMilli: 1,
  memoryRequestMib: 32,
  memoryTargetPercent: 85,
  memoryPressurePercent: 20,
  memoryLimitPercent: 92,
  diskRequestMib: 64,
};

/** The settings from SPACE_CAPACITY_*. */
export function capacitySettings(c: Pick<Config, "SPACE_CAPACITY_CPU_REQUEST_MILLI" | "SPACE_CAPACITY_MEMORY_REQUEST_MIB" | "SPACE_CAPACITY_MEMORY_TARGET_PERCENT" | "SPACE_CAPACITY_MEMORY_PRESSURE_PERCENT" | "SPACE_CAPACITY_MEMORY_LIMIT_PERCENT" | "SPACE_CAPACITY_DISK_REQUEST_MIB">): CapacitySettings {
  return {
    cpuRequestMilli: c.SPACE_CAPACITY_CPU_REQUEST_MILLI,
    memoryRequestMib: c.SPACE_CAPACITY_MEMORY_REQUEST_MIB,
    memoryTargetPercent: c.SPACE_CAPACITY_MEMORY_TARGET_PERCENT,
    memoryPressurePercent: c.SPACE_CAPACITY_MEMORY_PRESSURE_PERCENT,
    memoryLimitPercent: c.SPACE_CAPACITY_MEMORY_LIMIT_PERCENT,
    diskRequestMib: c.SPACE_CAPACITY_DISK_REQUEST_MIB,
  };
}

export const NOTHING_HELD: Readonly<NodeHeld> = { slots: 0, vcpu: 0, disk: 0 };

/** What a node measured at its last heartbeat (absent on a node that does not publish it). */
export interface NodeMeasured {
  /**
   * Sandboxes the memory measurement holds in full: resident (not stopped) and done booting.
   * Any other sandbox the store holds on the node is counted at its request on top.
   */
  settled?: number;
  /** Sandboxes whose disk is on the node. */
  sandboxes?: number;
  memoryAvailableMib?: number;
  memoryPressure?: number;
  /** What the thin pool holds (templates, snapshots and sandbox disks). */
  diskHeldMib?: number;
}

export interface CapacityNode {
  capacity: Capacity | null;
  measured: NodeMeasured;
  /**
   * The sandboxes it held when a heartbeat first found it past its memory target, until one
   * finds it clearly under (the store's `memory_full_slots`, `memoryStanding`): up to that
   * count, one ended is room for one new; beyond it, nothing.
   */
  memoryFullSlots?: number;
}

/** The node's use as the model estimates it now, in the node's own units. */
export function estimatedUse(n: CapacityNode, held: Readonly<NodeHeld>, s: Readonly<CapacitySettings>): Capacity | null {
  const cap = n.capacity;
  if (!cap) return null;
  const m = n.measured;
  const memory =
    m.memoryAvailableMib !== undefined
      ? cap.memoryMib - m.memoryAvailableMib + since(held.slots, m.settled) * s.memoryRequestMib
      : held.slots * s.memoryRequestMib;
  const disk = m.diskHeldMib !== undefined ? m.diskHeldMib + since(held.disk, m.sandboxes) * s.diskRequestMib : held.disk * s.diskRequestMib;
  return {
    networkSlots: held.slots,
    vcpu: (held.vcpu * s.cpuRequestMilli) / 1000,
    memoryMib: Math.max(0, memory),
    diskMib: Math.max(0, disk),
  };
}

/** Held now less what the node measured (module-level: a decision estimates every node, and a closure per call costs). */
function since(now: number, then: number | undefined): number {
  return now - (then ?? 0);
}

/** What one more sandbox of `w` adds to the estimate. */
export function requestOf(w: Pick<PlacementWork, "vcpu" | "memoryMib" | "diskMib">, s: Readonly<CapacitySettings>): Capacity {
  return {
    networkSlots: 1,
    vcpu: (w.vcpu * s.cpuRequestMilli) / 1000,
    memoryMib: Math.min(w.memoryMib, s.memoryRequestMib),
    diskMib: Math.min(w.diskMib, s.diskRequestMib),
  };
}

/** The budget admission fills, per resource. */
export function budgetOf(cap: Capacity, s: Readonly<CapacitySettings>): Capacity {
  return {
    networkSlots: cap.networkSlots,
    vcpu: cap.vcpu,
    memoryMib: (cap.memoryMib * s.memoryTargetPercent) / 100,
    diskMib: cap.diskMib,
  };
}

/** Whether the node takes one more sandbox of `w`, or the first resource that stands in the way. */
export function admits(n: CapacityNode, held: Readonly<NodeHeld>, w: PlacementWork, s: Readonly<CapacitySettings>): true | RejectReason {
  const use = estimatedUse(n, held, s);
  if (!use || !n.capacity) return true; // not published yet: the node's own admission decides
  // A memory limit beyond the whole node is never satisfiable there, however idle it is. A
  // vCPU limit beyond it is: cpu.max cannot give more than the host has (a template asking
  // 8 vCPUs still runs on a 2-core laptop, as it did under overcommit).
  if (w.memoryMib > n.capacity.memoryMib) return "no_memory";
  const budget = budgetOf(n.capacity, s);
  const req = requestOf(w, s);
  if (use.networkSlots + req.networkSlots > budget.networkSlots) return "no_network_slots";
  const memoryAfter = use.memoryMib + req.memoryMib;
  if (!inPlaceOfEnded(n.memoryFullSlots, held, memoryAfter <= (n.capacity.memoryMib * s.memoryLimitPercent) / 100)) {
    if ((n.measured.memoryPressure ?? 0) >= s.memoryPressurePercent) return "memory_pressure";
    // A full node grows again only once measured clearly under its target (memoryStanding).
    if (n.memoryFullSlots !== undefined || memoryAfter > budget.memoryMib) return "no_memory";
  }
  if (use.vcpu + req.vcpu > budget.vcpu) return "no_vcpu";
  if (budget.diskMib > 0 && use.diskMib + req.diskMib > budget.diskMib) return "no_disk";
  return true;
}

/**
 * A node past its memory target because its sandboxes grew after they were measured
 * (envd's code warming up, a workload's cache) is still full at the count it had: a
 * sandbox that ended there is room for a new one at once, as it would be at the target.
 * Not beyond that count, and not past the limit share of host memory. Memory pressure does
 * not stop it: pressure refuses growth, and this is turnover (a full node reclaims all the
 * time, so a pressure refusal would turn "at once" into "at the next quiet moment").
 */
function inPlaceOfEnded(memoryFullSlots: number | undefined, held: Readonly<NodeHeld>, underLimit: boolean): boolean {
  return memoryFullSlots !== undefined && held.slots + 1 <= memoryFullSlots && underLimit;
}

/**
 * How far under its memory target a node must be measured before it forgets its count and
 * grows again, in percent of its memory. Host memory in use moves by this much between two
 * heartbeats on a full node (kills' memory returned over seconds, page cache reclaimed),
 * so a node at its target would otherwise take a burst at one heartbeat and be past it at
 * the next.
 */
export const MEMORY_FULL_RELEASE_PERCENT = 1;

/**
 * Where host memory in use, as the node measured it, stands against its memory target
 * (`MemoryStanding`: `under` is by more than MEMORY_FULL_RELEASE_PERCENT); undefined when it
 * published no measurement. A heartbeat stores it with the node's count (store
 * capacity-ledger.ts `memoryFullSlotsAssignment`).
 */
export function memoryStanding(published: { capacity?: Readonly<Record<string, number>>; used?: Readonly<Record<string, number>> }, s: Readonly<CapacitySettings>): MemoryStanding | undefined {
  const cap = capacityOf(published.capacity ?? {});
  const available = measuredOf(published.used ?? {}).memoryAvailableMib;
  if (!cap || available === undefined) return undefined;
  const inUse = cap.memoryMib - available;
  const target = budgetOf(cap, s).memoryMib;
  if (inUse > target) return "past";
  return inUse < target - (cap.memoryMib * MEMORY_FULL_RELEASE_PERCENT) / 100 ? "under" : "near";
}

/** Reads what a node measured from the `used` it published (unknown keys ignored). */
export function measuredOf(used: Readonly<Record<string, number>>): NodeMeasured {
  const pick = (k: keyof NodeMeasured) => (typeof used[k] === "number" ? { [k]: used[k] } : {});
  return { ...pick("settled"), ...pick("sandboxes"), ...pick("memoryAvailableMib"), ...pick("memoryPressure"), ...pick("diskHeldMib") };
}

/** A node's published capacity as placement reads it; null until it publishes slots and memory. */
export function capacityOf(cap: Readonly<Record<string, number>>): Capacity | null {
  const num = (...keys: string[]) => {
    for (const k of keys) if (typeof cap[k] === "number") return cap[k];
    return undefined;
  };
  const networkSlots = num("networkSlots", "slots");
  const memoryMib = num("memoryMib");
  if (networkSlots === undefined || memoryMib === undefined) return null;
  return { vcpu: num("vcpu") ?? 0, memoryMib, diskMib: num("diskMib") ?? 0, networkSlots };
}

/**
 * Where capacity is reserved: the store, in the transaction that binds a sandbox to a
 * node. `held` is what placement ranks with; `reserve` re-checks each candidate, best
 * first, under that node's lock and binds the sandbox to the first that still admits it.
 */
export interface CapacityLedger {
  /**
   * What the store holds per node, dated (performance.now()) when the read began: a
   * placement made after that date is not in it. `fresh` reads through any belief.
   */
  held(signal: AbortSignal, opts?: { fresh?: boolean }): Promise<Dated<ReadonlyMap<string, NodeHeld>>>;
  reserve(
    sandboxId: string,
    candidates: readonly string[],
    admit: (node: CapacityNode, held: Readonly<NodeHeld>) => true | RejectReason,
    signal: AbortSignal,
  ): Promise<{ nodeId: string } | { rejected: Partial<Record<RejectReason, string[]>> }>;
}

/** The store's ledger (src/store/capacity-ledger.ts). */
export function storeCapacityLedger(db: Db): CapacityLedger {
  const nodeOf = (p: PublishedNode): CapacityNode => ({
    capacity: capacityOf(p.capacity),
    measured: measuredOf(p.used),
    ...(p.memoryFullSlots !== null ? { memoryFullSlots: p.memoryFullSlots } : {}),
  });
  return {
    held: async () => {
      const at = performance.now();
      return { at, value: await heldByNode(db) };
    },
    reserve: (sandboxId, candidates, admit) => reserveCapacity(db, sandboxId, candidates, (p, held) => admit(nodeOf(p), held)),
  };
}

/**
 * The ledger's `held` believed for up to `maxAgeMs` (SPACE_PLACEMENT_DIRECTORY_MAX_AGE_MS, the
 * directory's age): it counts every holding sandbox of the fleet, O(live sandboxes) per read,
 * which per create does not scale (docs/scale.md). Ranking on an older read is safe:
 * `reserve` re-checks the chosen node under its lock, the Direct substrate counts its own
 * placements since the read, and a refusal is decided again on a fresh read.
 */
export function believedCapacityLedger(inner: CapacityLedger, maxAgeMs: number, now?: () => number): CapacityLedger {
  const held = new BelievedRead(async (signal) => (await inner.held(signal, { fresh: true })).value, maxAgeMs, now);
  return {
    held: (signal, opts) => held.get(signal, opts),
    reserve: (...args) => inner.reserve(...args),
  };
}

/** The placement view of a node with the model's estimate as its use. */
export function withEstimate(n: PlacementNode, measured: NodeMeasured, held: Readonly<NodeHeld>, s: Readonly<CapacitySettings>): PlacementNode {
  return { ...n, used: estimatedUse({ capacity: n.capacity, measured }, held, s) };
}
