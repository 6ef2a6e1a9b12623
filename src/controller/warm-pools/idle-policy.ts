/**
 * What a pool's idle members do (pure, table-tested): stay running, stay suspended (a
 * memory checkpoint kept on their node; a same-node restore is a few hundred ms), or be
 * suspended only while their node is short of memory and restored once it is not.
 *
 * Memory is counted as placement counts it (src/substrate/placement.ts): a node's budget is
 * its published memory × the memory overcommit, used by what its resident sandboxes
 * requested (a running member counts like any sandbox; a suspended one is no longer
 * resident). Node heartbeats publish `used` every few seconds, so a node whose members
 * moved recently is left alone until its published figure can reflect the move.
 */
import { DEFAULT_OVERCOMMIT } from "../../contract/overcommit.ts";
import type { Capacity } from "../../substrate/placement.ts";
import type { IdlePolicy } from "../../store/warm-pools.ts";

export interface IdleSpec {
  policy: IdlePolicy;
  /** suspend_when_memory_short: a node with less free memory than this share of its budget is short. */
  minFreeMemoryPercent: number;
}

/** An idle member as the decision sees it. */
export interface IdleMember {
  slotId: string;
  state: "ready" | "suspended";
  nodeId: string | null;
  memoryMib: number;
  /** When its slot last changed state (ready → suspended and back included). */
  movedAt: Date;
  /** Newer first when only some of a node's members move. */
  readyAt: Date | null;
}

export interface IdleNode {
  capacity?: Capacity | null;
  used?: Capacity | null;
}

export interface IdleMoves {
  suspend: string[];
  resume: string[];
}

/**
 * Which idle members to suspend and which to resume. `settleMs`: a node with a member that
 * moved more recently than this (or one moving now, `busyNodes`) is not judged on its
 * published memory yet. Members on nodes the directory lacks are left as they are; on
 * nodes without published capacity only the unconditional policies move them.
 */
export function idleMoves(
  spec: IdleSpec,
  members: readonly IdleMember[],
  nodes: ReadonlyMap<string, IdleNode>,
  opts: { now: Date; settleMs: number; busyNodes: ReadonlySet<string>; memoryOvercommit?: number },
): IdleMoves {
  const out: IdleMoves = { suspend: [], resume: [] };
  if (spec.policy === "suspended") {
    out.suspend = members.filter((m) => m.state === "ready" && m.nodeId !== null && nodes.has(m.nodeId)).map((m) => m.slotId);
    return out;
  }
  const byNode = new Map<string, IdleMember[]>();
  for (const m of members) if (m.nodeId) byNode.set(m.nodeId, [...(byNode.get(m.nodeId) ?? []), m]);
  for (const [nodeId, list] of byNode) {
    const node = nodes.get(nodeId);
    const suspended = list.filter((m) => m.state === "suspended");
    if (!node) continue; // its node is unknown to the directory: no restore there now
    if (spec.policy === "running") {
      // A restore that does not fit fails and costs the member: resume only what fits.
      let free = memoryOf(node, opts.memoryOvercommit)?.free ?? null;
      for (const m of suspended) {
        if (free !== null && free < m.memoryMib) break;
        out.resume.push(m.slotId);
        if (free !== null) free -= m.memoryMib;
      }
      continue;
    }
    if (opts.busyNodes.has(nodeId) || list.some((m) => opts.now.getTime() - m.movedAt.getTime() < opts.settleMs)) continue;
    const mem = memoryOf(node, opts.memoryOvercommit);
    if (!mem) continue;
    const floor = (mem.budget * spec.minFreeMemoryPercent) / 100;
    let free = mem.free;
    if (free < floor) {
      // Newest first: the oldest stay running, and adoption takes the oldest first.
      for (const m of newestFirst(list.filter((x) => x.state === "ready"))) {
        if (free >= floor) break;
        out.suspend.push(m.slotId);
        free += m.memoryMib;
      }
    } else {
      // Resume only while the node stays above the floor afterwards: no suspend/resume flapping.
      for (const m of [...newestFirst(suspended)].reverse()) {
        if (free - m.memoryMib < floor) break;
        out.resume.push(m.slotId);
        free -= m.memoryMib;
      }
    }
  }
  return out;
}

/** A node's memory budget and what is left of it (MiB); null when it has not published capacity. */
export function memoryOf(node: IdleNode, memoryOvercommit = DEFAULT_OVERCOMMIT.memory): { budget: number; free: number } | null {
  if (!node.capacity || !node.used || node.capacity.memoryMib <= 0) return null;
  const budget = node.capacity.memoryMib * memoryOvercommit;
  return { budget, free: budget - node.used.memoryMib };
}

const newestFirst = (ms: readonly IdleMember[]) => [...ms].sort((a, b) => (b.readyAt?.getTime() ?? 0) - (a.readyAt?.getTime() ?? 0));
