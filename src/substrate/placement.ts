/**
 * Placement as data: which nodes may take a piece of work and which one is best.
 * Pure (no I/O) so it is table-tested and benchmarked on simulated fleets; the Direct
 * substrate feeds it the node directory, the Kubernetes substrate will render the same
 * constraints (node group, selectors, environment) into node affinity instead.
 *
 * Filters, in order, each rejection counted per reason so a failed placement explains
 * itself ("3 nodes lack environment X, 1 node full (network slots)"):
 *   status (ready only: unavailable/draining/fenced excluded) → node group → node
 *   selector (request's + operator extras) → environment gate → free capacity.
 * Score: free capacity (slots, memory, vCPU) + template-cache locality − in-flight.
 */
import { DEFAULT_OVERCOMMIT, type Overcommit } from "../contract/overcommit.ts";
import { SpaceError } from "../core/errors.ts";
import { formatSelector } from "../core/selector.ts";

/** `SPACE_ENVIRONMENT_PLACEMENT_GATE` (behaviours.md C). */
export const gateModes = ["off", "shadow", "on"] as const;
export type GateMode = (typeof gateModes)[number];

/**
 * The execution environment a piece of work is bound to (behaviours.md C):
 * - `none`: unbound work (no record names an environment); never refused.
 * - `bound`: the record names `environment` (a digest).
 * - `unreadable`: a record exists but its binding cannot be read or is invalid;
 *   `on` fails such work before placing, `shadow` logs it and places as `off`.
 */
export type EnvironmentBinding =
  { kind: "none" } | { kind: "bound"; environment: string; source: string } | { kind: "unreadable"; reason: string };

export interface PlacementConstraints {
  /** Only nodes of this group; undefined = any group. */
  nodeGroup?: string;
  /** Every pair must equal a node label (request's own selector plus operator extras). */
  nodeSelector?: Record<string, string>;
}

export interface PlacementWork extends PlacementConstraints {
  templateId: string;
  vcpu: number;
  memoryMib: number;
  diskMib: number;
  environment?: EnvironmentBinding;
}

/**
 * The work a request asks for, its node selector merged with the operator's extras (extras
 * win); absent fields stay absent. One shape for both substrates: Direct decides on it,
 * Kubernetes renders it into the pod.
 */
export function placementWork(req: PlacementWork, selectorExtras: Readonly<Record<string, string>>): PlacementWork {
  const nodeSelector = { ...(req.nodeSelector ?? {}), ...selectorExtras };
  return {
    templateId: req.templateId,
    vcpu: req.vcpu,
    memoryMib: req.memoryMib,
    diskMib: req.diskMib,
    ...(req.nodeGroup !== undefined ? { nodeGroup: req.nodeGroup } : {}),
    ...(Object.keys(nodeSelector).length ? { nodeSelector } : {}),
    ...(req.environment ? { environment: req.environment } : {}),
  };
}

export interface Capacity {
  vcpu: number;
  memoryMib: number;
  diskMib: number;
  networkSlots: number;
}

/** A node as placement sees it (from the directory: the store's `nodes` rows). */
export interface PlacementNode {
  id: string;
  name?: string;
  /** ready | unavailable | draining | fenced */
  status: string;
  nodeGroup: string;
  labels: Record<string, string>;
  /** null: the node has not published capacity yet (usable, ranked low). */
  capacity: Capacity | null;
  used: Capacity | null;
  usableEnvironments: readonly string[];
  /** Template ids in the node's cache. */
  templates: readonly string[];
}

/** Why a node was not a candidate. Each is a class in the explanation. */
export const rejectReasons = [
  "unavailable",
  "draining",
  "fenced",
  "other_node_group",
  "selector_mismatch",
  "environment_not_usable",
  "no_network_slots",
  "no_memory",
  "memory_pressure",
  "no_vcpu",
  "no_disk",
] as const;
export type RejectReason = (typeof rejectReasons)[number];

/**
 * What `shadow` records about the chosen node (also the census label):
 * admitted = it publishes the binding; no_evidence = unbound or unreadable work;
 * environment_not_usable = `on` would not have placed it there.
 */
export type GatePlacement = "admitted" | "no_evidence" | "environment_not_usable";

/** What a placement under `shadow`/`on` recorded (metrics, logs). */
export interface GateObservation {
  sandboxId: string;
  gate: GateMode;
  nodeId: string;
  placement: GatePlacement;
  /** shadow: `on` would have refused the work with this reason. */
  wouldFail?: string;
}

export interface PlacementOptions {
  gate: GateMode;
  /** In-flight placements per node (handed out, not yet reported by the node). */
  inflight?: ReadonlyMap<string, number>;
  /**
   * Overcommit ratios: sandboxes idle most of the time, so vCPU, memory and disk limits
   * may exceed the node's size by this factor. Network slots are a hard limit.
   */
  overcommit?: { vcpu?: number; memory?: number; disk?: number };
  /**
   * The admission check in place of the overcommit one (Direct placement over the
   * capacity ledger: capacity.ts `admits`, with in-flight work already in `used`).
   */
  admit?: (n: PlacementNode, w: PlacementWork) => true | RejectReason;
}

export interface PlacementDecision {
  /** The chosen node, or null when none qualifies (see `explanation`). */
  nodeId: string | null;
  /** node ids rejected, by reason. */
  rejected: Partial<Record<RejectReason, string[]>>;
  /**
   * Candidates that passed every filter, best first (equal scores: the earlier in `nodes`;
   * directories list nodes by id): at least the first RANKED_EXACTLY exactly; the rest after
   * them unordered, as a reservation tries them only when all of those refuse under their locks.
   */
  ranked: Array<{ nodeId: string; score: number }>;
  /** `shadow`/`on`: how the chosen node relates to the binding. */
  gatePlacement?: GatePlacement;
  /** `shadow`: whether `on` would have refused this work altogether. */
  shadowWouldFail?: string;
  /** Human-readable reason per node class when nodeId is null. */
  explanation: string;
}

/** Filters and ranks; never throws (see `requirePlacement` for the error). */
export function decidePlacement(nodes: readonly PlacementNode[], work: PlacementWork, opts: PlacementOptions): PlacementDecision {
  const rejected: Partial<Record<RejectReason, string[]>> = {};
  const reject = (r: RejectReason, id: string) => (rejected[r] ??= []).push(id);
  const binding = work.environment ?? { kind: "none" };
  const enforceEnv = opts.gate === "on" && binding.kind === "bound";
  const oc: Overcommit = { ...DEFAULT_OVERCOMMIT, ...opts.overcommit };
  const ranked: Ranked[] = [];
  // Nodes that pass everything except the environment (for shadow: what `on` would say).
  for (const n of nodes) {
    const statusReason = statusReject(n.status);
    if (statusReason) {
      reject(statusReason, n.id);
      continue;
    }
    if (work.nodeGroup !== undefined && n.nodeGroup !== work.nodeGroup) {
      reject("other_node_group", n.id);
      continue;
    }
    if (work.nodeSelector && !matchesSelector(n.labels, work.nodeSelector)) {
      reject("selector_mismatch", n.id);
      continue;
    }
    const envOk = binding.kind !== "bound" || n.usableEnvironments.includes(binding.environment);
    if (enforceEnv && !envOk) {
      reject("environment_not_usable", n.id);
      continue;
    }
    const inflight = opts.inflight?.get(n.id) ?? 0;
    const fit = opts.admit ? opts.admit(n, work) : fits(n, work, inflight, oc);
    if (fit !== true) {
      reject(fit, n.id);
      continue;
    }
    ranked.push({ nodeId: n.id, score: scoreNode(n, work, inflight, oc), load: (n.used?.networkSlots ?? 0) + inflight, envOk, at: ranked.length });
  }
  spreadNearEqual(ranked, rankBest(ranked));
  const best = ranked[0];
  const decision: PlacementDecision = {
    nodeId: best?.nodeId ?? null,
    rejected,
    ranked,
    explanation: best ? "" : explain(nodes.length, rejected, work),
  };
  if (opts.gate !== "off" && best) {
    decision.gatePlacement = binding.kind !== "bound" ? "no_evidence" : best.envOk ? "admitted" : "environment_not_usable";
  }
  if (opts.gate === "shadow") {
    if (binding.kind === "unreadable") decision.shadowWouldFail = `unreadable environment binding: ${binding.reason}`;
    else if (binding.kind === "bound" && best && !ranked.some((r) => r.envOk)) {
      decision.shadowWouldFail = `no candidate node publishes environment ${binding.environment}`;
    }
  }
  return decision;
}

/**
 * The decision or the error a caller answers with: `on` with an unreadable binding fails
 * before any node is considered; no candidate → resource_exhausted when only capacity
 * stood in the way, failed_precondition when constraints nobody meets did, unavailable
 * when no node is ready at all.
 */
export function requirePlacement(
  nodes: readonly PlacementNode[],
  work: PlacementWork,
  opts: PlacementOptions,
): PlacementDecision & { nodeId: string } {
  const binding = work.environment ?? { kind: "none" };
  if (opts.gate === "on" && binding.kind === "unreadable") {
    throw new SpaceError(
      "failed_precondition",
      `environment placement gate is on and the work's environment binding is unreadable: ${binding.reason}`,
    );
  }
  const d = decidePlacement(nodes, work, opts);
  if (d.nodeId !== null) return d as PlacementDecision & { nodeId: string };
  const reasons = Object.keys(d.rejected) as RejectReason[];
  const onlyStatus = reasons.every((r) => r === "unavailable" || r === "draining" || r === "fenced");
  const capacityOnly =
    reasons.some(isCapacityReason) &&
    reasons.every((r) => isCapacityReason(r) || r === "unavailable" || r === "draining" || r === "fenced");
  const code = onlyStatus ? "unavailable" : capacityOnly ? "resource_exhausted" : "failed_precondition";
  throw new SpaceError(code, d.explanation, {
    retryable: code !== "failed_precondition",
    details: { rejected: countRejected(d.rejected) },
  });
}

const isCapacityReason = (r: RejectReason) => r === "no_network_slots" || r === "no_memory" || r === "memory_pressure" || r === "no_vcpu" || r === "no_disk";

function statusReject(status: string): RejectReason | null {
  switch (status) {
    case "ready":
      return null;
    case "draining":
      return "draining";
    case "fenced":
      return "fenced";
    default:
      return "unavailable";
  }
}

export function matchesSelector(labels: Record<string, string>, selector: Record<string, string>): boolean {
  for (const [k, v] of Object.entries(selector)) if (labels[k] !== v) return false;
  return true;
}

function fits(n: PlacementNode, w: PlacementWork, inflight: number, oc: Readonly<Overcommit>): true | RejectReason {
  const cap = n.capacity;
  const used = n.used;
  if (!cap || !used) return true; // not published yet: the node's own admission decides
  if (cap.networkSlots - used.networkSlots - inflight < 1) return "no_network_slots";
  if (cap.memoryMib * oc.memory - used.memoryMib - (inflight + 1) * w.memoryMib < 0) return "no_memory";
  if (cap.vcpu * oc.vcpu - used.vcpu - (inflight + 1) * w.vcpu < 0) return "no_vcpu";
  if (cap.diskMib > 0 && cap.diskMib * oc.disk - used.diskMib - (inflight + 1) * w.diskMib < 0) return "no_disk";
  return true;
}

/**
 * How far below the best score a node still counts as near-equal. Scores carry measured host
 * memory, which moves by hundreds of MiB between heartbeats, while one more sandbox moves a
 * score by a fraction of a percent: ranked by score alone, a burst would chase that noise onto
 * one node. Template locality (0.25) stays decisive.
 */
const SPREAD_BAND = 0.05;

/**
 * How many candidates a decision orders exactly. Sorting every candidate was half of a
 * decision over 10,000 nodes (docs/scale.md) for an order nothing reads past the first few.
 */
export const RANKED_EXACTLY = 64;

interface Ranked {
  nodeId: string;
  score: number;
  load: number;
  envOk: boolean;
  /** Position among the candidates (the order of `nodes`): breaks ties. */
  at: number;
}

const byScore = (a: Ranked, b: Ranked) => b.score - a.score || a.at - b.at;

/**
 * Best first, in place: those scoring above the RANKED_EXACTLY-th best score, sorted; then
 * those tied with it, already in tie order; then the others in the order they came. A
 * fleet of equal nodes (a new one, or every node idle) ties them all: no sort at all.
 * Returns how many lead in exact order.
 */
function rankBest(ranked: Ranked[]): number {
  if (ranked.length <= 2 * RANKED_EXACTLY) {
    ranked.sort(byScore);
    return ranked.length;
  }
  const scores = new Float64Array(ranked.length);
  for (let i = 0; i < ranked.length; i++) scores[i] = ranked[i]!.score;
  scores.sort(); // native, no comparator calls
  const threshold = scores[scores.length - RANKED_EXACTLY]!;
  const above = ranked.filter((r) => r.score > threshold).sort(byScore);
  const tied = ranked.filter((r) => r.score === threshold);
  const below = ranked.filter((r) => r.score < threshold);
  let i = 0;
  for (const part of [above, tied, below]) for (const r of part) ranked[i++] = r;
  return above.length + tied.length;
}

/**
 * Reorders the near-equal head of a best-first ranking by sandboxes held (fewest first), in
 * place, among the first RANKED_EXACTLY (at most `exact`, those in exact order).
 */
function spreadNearEqual(ranked: Ranked[], exact: number): void {
  const top = ranked[0]?.score;
  if (top === undefined) return;
  const limit = Math.min(exact, RANKED_EXACTLY);
  let end = 1;
  while (end < limit && ranked[end]!.score >= top - SPREAD_BAND) end++;
  if (end === 1) return;
  const head = ranked.slice(0, end).sort((a, b) => a.load - b.load || byScore(a, b));
  for (let i = 0; i < end; i++) ranked[i] = head[i]!;
}

/** Higher is better. Free fractions in [0,1] each; locality adds 0.25. */
export function scoreNode(
  n: PlacementNode,
  w: PlacementWork,
  inflight: number,
  oc: Readonly<Overcommit> = DEFAULT_OVERCOMMIT,
): number {
  const locality = n.templates.includes(w.templateId) ? 0.25 : 0;
  const cap = n.capacity;
  const used = n.used;
  if (!cap || !used) return 0.5 + locality - inflight * 0.01;
  const slots = frac(cap.networkSlots, used.networkSlots, inflight);
  const mem = frac(cap.memoryMib * oc.memory, used.memoryMib, inflight * w.memoryMib);
  const cpu = frac(cap.vcpu * oc.vcpu, used.vcpu, inflight * w.vcpu);
  return (slots + mem + cpu) / 3 + locality;
}

/** Free share of `total`; module-level so scoring a large fleet allocates no closure per node. */
function frac(total: number, used: number, extra: number): number {
  return total > 0 ? Math.max(0, total - used - extra) / total : 0;
}

const reasonText: Record<RejectReason, (n: number, w: PlacementWork) => string> = {
  unavailable: (n) => `${n} ${nodes(n)} unavailable`,
  draining: (n) => `${n} ${nodes(n)} draining`,
  fenced: (n) => `${n} ${nodes(n)} fenced`,
  other_node_group: (n, w) => `${n} ${nodes(n)} outside node group ${w.nodeGroup}`,
  selector_mismatch: (n, w) => `${n} ${nodes(n)} not matching node selector ${formatSelector(w.nodeSelector ?? {})}`,
  environment_not_usable: (n, w) =>
    `${n} ${nodes(n)} ${n === 1 ? "lacks" : "lack"} environment ${w.environment?.kind === "bound" ? w.environment.environment : "?"}`,
  no_network_slots: (n) => `${n} ${nodes(n)} full (network slots)`,
  no_memory: (n) => `${n} ${nodes(n)} full (memory)`,
  memory_pressure: (n) => `${n} ${nodes(n)} under memory pressure`,
  no_vcpu: (n) => `${n} ${nodes(n)} full (vcpu)`,
  no_disk: (n) => `${n} ${nodes(n)} full (disk)`,
};
const nodes = (n: number) => (n === 1 ? "node" : "nodes");

export function explain(total: number, rejected: Partial<Record<RejectReason, string[]>>, w: PlacementWork): string {
  const what = `vcpu=${w.vcpu} memory_mib=${w.memoryMib} disk_mib=${w.diskMib}`;
  if (total === 0) return `no node is registered to place the sandbox (${what}) on`;
  // Largest classes first: "3 nodes lack environment X, 1 node full (network slots)".
  const parts = rejectReasons
    .filter((r) => rejected[r]?.length)
    .sort((a, b) => rejected[b]!.length - rejected[a]!.length)
    .map((r) => reasonText[r](rejected[r]!.length, w));
  return `no node can take the sandbox (${what}): ${parts.join(", ")}`;
}

export function countRejected(rejected: Partial<Record<RejectReason, string[]>>): Partial<Record<RejectReason, number>> {
  const out: Partial<Record<RejectReason, number>> = {};
  for (const r of rejectReasons) if (rejected[r]?.length) out[r] = rejected[r]!.length;
  return out;
}
