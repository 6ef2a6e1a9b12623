/**
 * Direct substrate: the control plane picks a node among the registered ones and calls
 * its node-api. Placement (../placement.ts) filters nodes by status, node group,
 * selectors (the request's plus the operator's extras), the environment gate and free
 * capacity (published by node-ctl), scores by free capacity and template-cache
 * locality. With a capacity ledger (the store; docs/capacity.md) a node's use is the
 * capacity model's estimate from what the store holds there, and the placement is
 * reserved in the store under the node's lock, so a burst never overfills a node and a
 * sandbox that ends frees its room at once. Without one it counts its own in-flight
 * placements against the published usage. A failed placement says why, per node class.
 */
import { NodeApiSubstrate } from "../node-api-substrate.ts";
import type { PlacementRequest, SandboxRef, SnapshotDescriptor, Substrate } from "../substrate.ts";
import type { SandboxSpec, SandboxStatus } from "../../contract/node-api.ts";
import { NodeClient } from "../node-client.ts";
import { CachedNodeDirectory } from "../cached-node-directory.ts";
import { SpaceError, notFound } from "../../core/errors.ts";
import type { NodeDirectory, NodeEntry } from "../node-directory.ts";
import { admits, DEFAULT_CAPACITY, NOTHING_HELD, withEstimate, type CapacityLedger, type CapacityNode, type CapacitySettings, type NodeHeld } from "../capacity.ts";
import {
  explain,
  placementWork,
  requirePlacement,
  type GateMode,
  type GateObservation,
  type PlacementDecision,
  type PlacementOptions,
  type PlacementWork,
  type RejectReason,
  countRejected,
} from "../placement.ts";

/**
 * How many ranked candidates one reservation tries under their locks before placement reads
 * afresh: each try is a transaction, and past the first few the ranking is stale anyway.
 */
const RESERVE_TRIES = 8;

/** Every candidate tried refused under its lock, on reads that may be stale. */
class StaleRefusal extends Error {}

/** How long a released claim is kept for reads that began before its reservation ended. */
const CLAIM_LINGER_MS = 2_000;

export interface DirectSubstrateDeps {
  nodes: NodeDirectory;
  internalToken: string;
  /** SPACE_ENVIRONMENT_PLACEMENT_GATE (default off). */
  gate?: GateMode;
  /** SPACE_PLACEMENT_NODE_SELECTOR: labels every sandbox requires in addition to its own. */
  selectorExtras?: Record<string, string>;
  overcommit?: PlacementOptions["overcommit"];
  /** Where placements reserve capacity (the store); absent = in-flight counting over heartbeats. */
  ledger?: CapacityLedger;
  capacity?: Partial<CapacitySettings>;
  /** Called for every placement under shadow/on (the census and logs read it). */
  onGate?: (o: GateObservation) => void;
}

interface EstimateView {
  listed: readonly NodeEntry[];
  held: ReadonlyMap<string, NodeHeld>;
  nodes: NodeEntry[];
  index: ReadonlyMap<string, number>;
  capacity: ReadonlyMap<string, CapacityNode>;
}

/**
 * How a placement decides: `reserving`, a ledger reservation follows (it re-checks each
 * candidate's status under its lock); `fresh`, on fresh reads only.
 */
interface DecideOptions {
  reserving?: boolean;
  fresh?: boolean;
}

export class DirectSubstrate extends NodeApiSubstrate implements Substrate {
  readonly #nodes: NodeDirectory;
  readonly #token: string;
  readonly #gate: GateMode;
  readonly #extras: Record<string, string>;
  readonly #overcommit: PlacementOptions["overcommit"];
  readonly #onGate: ((o: GateObservation) => void) | undefined;
  readonly #ledger: CapacityLedger | undefined;
  readonly #capacity: Readonly<CapacitySettings>;
  readonly #clients = new Map<string, NodeClient>();
  /**
   * This replica's placements ranked on a node (ledger only; ranking only): counted until a
   * `held` read that began after their reservation ended, then dropped after CLAIM_LINGER_MS.
   */
  readonly #pending = new Set<{ nodeId: string; releasedAt?: number }>();
  /**
   * node id → placements handed out and not yet started (or failed); on a snapshot
   * directory, also those started after the snapshot's read began (`#started`).
   */
  readonly #inflight = new Map<string, number>();
  /** Placements started on a node, oldest first, that the current snapshot may not show yet. */
  readonly #started: Array<{ nodeId: string; at: number }> = [];
  #view: EstimateView | undefined;

  constructor(deps: DirectSubstrateDeps) {
    super();
    this.#nodes = deps.nodes;
    this.#token = deps.internalToken;
    this.#gate = deps.gate ?? "off";
    this.#extras = deps.selectorExtras ?? {};
    this.#overcommit = deps.overcommit;
    this.#onGate = deps.onGate;
    this.#ledger = deps.ledger;
    this.#capacity = { ...DEFAULT_CAPACITY, ...deps.capacity };
  }

  get gate(): GateMode {
    return this.#gate;
  }

  /** The decision without side effects (admin "why not here?" and benchmarks). */
  async decide(req: PlacementRequest, signal: AbortSignal): Promise<PlacementDecision & { nodeId: string }> {
    return (await this.#decide(req, signal)).decision;
  }

  /**
   * `claim`: the top-ranked node counts this placement as pending (ranking only) until
   * `release`, so concurrent creates of this replica spread instead of all ranking the
   * node they read as emptiest; taken in the same synchronous step as the ranking.
   * `reserving`: a ledger reservation follows, which re-checks each candidate's status under
   * its lock, so the chosen node's status is not confirmed on a fresh read first; `fresh`
   * decides on fresh reads only.
   */
  async #decide(req: PlacementRequest, signal: AbortSignal, claim = false, o: DecideOptions = {}) {
    const work = placementWork(req, this.#extras);
    let claimed: { nodeId: string; releasedAt?: number } | undefined;
    const release = () => {
      if (claimed === undefined) return;
      const now = performance.now();
      claimed.releasedAt = now;
      claimed = undefined;
      for (const c of this.#pending) if (c.releasedAt !== undefined && now - c.releasedAt > CLAIM_LINGER_MS) this.#pending.delete(c);
    };
    const on = async (listed: readonly NodeEntry[], fresh: boolean) => {
      let nodes: readonly NodeEntry[] = listed;
      let opts: PlacementOptions;
      if (this.#ledger) {
        // The ledger is the authority (`#reserve` re-checks under the node's lock), so the
        // age of a snapshot directory or of a believed `held` costs at most a retry, never an overfill.
        const { at: readAt, value: held } = await this.#ledger.held(signal, { fresh });
        const s = this.#capacity;
        const heldOn = (id: string): Readonly<NodeHeld> => held.get(id) ?? NOTHING_HELD;
        // A claim counts until a read that began after its reservation ended (which shows it).
        const pending = new Map<string, number>();
        for (const c of this.#pending) if (c.releasedAt === undefined || c.releasedAt > readAt) pending.set(c.nodeId, (pending.get(c.nodeId) ?? 0) + 1);
        const ranking = (id: string): NodeHeld => {
          const h = heldOn(id);
          const p = pending.get(id) ?? 0;
          return { slots: h.slots + p, vcpu: h.vcpu + p * work.vcpu, disk: h.disk + p };
        };
        // Scores compare the estimate (with this replica's pending placements) with the budget;
        // admission counts only what the store holds (`#reserve` re-checks it under the lock).
        const view = this.#estimates(listed, held, heldOn);
        nodes = view.nodes;
        if (pending.size) {
          const withPending = [...view.nodes];
          for (const id of pending.keys()) {
            const i = view.index.get(id);
            if (i !== undefined) withPending[i] = { ...withEstimate(listed[i]!, listed[i]!.measured ?? {}, ranking(id), s), url: listed[i]!.url };
          }
          nodes = withPending;
        }
        opts = {
          gate: this.#gate,
          overcommit: { vcpu: 1, memory: s.memoryTargetPercent / 100, disk: 1 },
          admit: (n, w) => admits(view.capacity.get(n.id) ?? { capacity: n.capacity, measured: {} }, heldOn(n.id), w, s),
        };
      } else {
        opts = { gate: this.#gate, inflight: this.#inflight, ...(this.#overcommit ? { overcommit: this.#overcommit } : {}) };
      }
      const decision = req.pinnedNodeId !== undefined ? this.#pinned(req, nodes, work, opts) : requirePlacement(nodes, work, opts);
      if (claim && this.#ledger) {
        release();
        claimed = { nodeId: decision.nodeId };
        this.#pending.add(claimed);
      }
      return { decision, work, nodes, release, fresh };
    };
    try {
      return await this.#decideOn(on, signal, o);
    } catch (e) {
      release();
      throw e;
    }
  }

  /**
   * The placement view of a directory listing with what the store held at one read: on a
   * snapshot and a believed `held` every decision within their age shares one, so a
   * decision at 10,000 nodes does not rebuild 10,000 estimates (docs/scale.md).
   */
  #estimates(listed: readonly NodeEntry[], held: ReadonlyMap<string, NodeHeld>, heldOn: (id: string) => Readonly<NodeHeld>): EstimateView {
    const last = this.#view;
    if (last && last.listed === listed && last.held === held) return last;
    const s = this.#capacity;
    const view: EstimateView = {
      listed,
      held,
      nodes: listed.map((n) => ({ ...withEstimate(n, n.measured ?? {}, heldOn(n.id), s), url: n.url })),
      index: new Map(listed.map((n, i) => [n.id, i])),
      capacity: new Map(listed.map((n) => [n.id, { capacity: n.capacity ?? null, measured: n.measured ?? {}, ...(n.memoryFullSlots !== undefined ? { memoryFullSlots: n.memoryFullSlots } : {}) }])),
    };
    this.#view = view;
    return view;
  }

  async #decideOn<D extends { decision: PlacementDecision & { nodeId: string } }>(
    on: (nodes: readonly NodeEntry[], fresh: boolean) => Promise<D>,
    signal: AbortSignal,
    o: DecideOptions = {},
  ): Promise<D> {
    const dir = this.#nodes;
    if (!(dir instanceof CachedNodeDirectory)) return on(await dir.list(signal), true);
    const onSnapshot = async (fresh: boolean) => {
      const s = await dir.snapshot(signal, { fresh });
      // Starts the snapshot's read began after are still counted; older ones it shows as the store does.
      while (this.#started.length && this.#started[0]!.at < s.at) this.#release(this.#started.shift()!.nodeId);
      const d = await on(s.nodes, fresh);
      return { d, status: s.byId.get(d.decision.nodeId)?.status };
    };
    if (o.fresh) return (await onSnapshot(true)).d;
    let cached: Awaited<ReturnType<typeof onSnapshot>>;
    try {
      cached = await onSnapshot(false);
    } catch (e) {
      // The snapshot may predate the room a kill just freed: refuse only on fresh rows.
      if (!(e instanceof SpaceError)) throw e;
      return (await onSnapshot(true)).d;
    }
    // A drain, fence or loss since the snapshot must be obeyed at once (an operator's
    // `drain` is followed by creates that expect to avoid the node): the chosen node's own
    // row is read fresh (one primary-key read, not O(fleet)), and a changed status decides
    // again. A reservation checks it under the node's lock anyway, and moves on.
    if (o.reserving) return cached.d;
    const row = await dir.get(cached.d.decision.nodeId, signal, { fresh: true });
    return row?.status === cached.status ? cached.d : (await onSnapshot(true)).d;
  }

  async place(req: PlacementRequest, signal: AbortSignal): Promise<SandboxRef> {
    if (!this.#ledger) return this.#placeOnce(req, signal);
    const reserving = req.pinnedNodeId === undefined;
    try {
      return await this.#placeOnce(req, signal, { reserving });
    } catch (e) {
      // The best few on believed reads all refused under their locks (other replicas filled
      // them since): decide once more on fresh reads rather than walk the whole fleet.
      if (!(e instanceof StaleRefusal)) throw e;
      return this.#placeOnce(req, signal, { reserving, fresh: true });
    }
  }

  async #placeOnce(req: PlacementRequest, signal: AbortSignal, o: DecideOptions = {}): Promise<SandboxRef> {
    const { decision: d, work, nodes, release, fresh } = await this.#decide(req, signal, true, o);
    if (this.#gate !== "off" && d.gatePlacement) {
      this.#onGate?.({
        sandboxId: req.sandboxId,
        gate: this.#gate,
        nodeId: d.nodeId,
        placement: d.gatePlacement,
        ...(d.shadowWouldFail ? { wouldFail: d.shadowWouldFail } : {}),
      });
    }
    if (this.#ledger) {
      try {
        return { sandboxId: req.sandboxId, ...(await this.#reserve(req, d, work, nodes, signal, fresh)) };
      } finally {
        release();
      }
    }
    this.#inflight.set(d.nodeId, (this.#inflight.get(d.nodeId) ?? 0) + 1);
    return { sandboxId: req.sandboxId, nodeId: d.nodeId };
  }

  /**
   * Binds the sandbox to the best candidate that still admits it under the store's lock
   * (another replica may have filled a node since it was ranked), trying at most
   * RESERVE_TRIES (each is a transaction); none on believed reads → StaleRefusal (decide
   * again on fresh ones); none on fresh reads → the same capacity refusal placement gives,
   * naming what stood in the way.
   */
  async #reserve(
    req: PlacementRequest,
    d: PlacementDecision & { nodeId: string },
    work: PlacementWork,
    nodes: readonly NodeEntry[],
    signal: AbortSignal,
    fresh: boolean,
  ): Promise<{ nodeId: string; recorded?: true }> {
    // A restore pinned to a node the directory lacks keeps its pin: the node itself decides.
    if (req.pinnedNodeId !== undefined && !nodes.some((n) => n.id === req.pinnedNodeId)) return { nodeId: req.pinnedNodeId };
    const s = this.#capacity;
    const candidates = d.ranked.length ? d.ranked.slice(0, RESERVE_TRIES).map((r) => r.nodeId) : [d.nodeId];
    const r = await this.#ledger!.reserve(req.sandboxId, candidates, (n, held) => admits(n, held, work, s), signal);
    if ("nodeId" in r) return { nodeId: r.nodeId, recorded: true };
    if (!fresh) throw new StaleRefusal();
    const rejected = { ...d.rejected };
    for (const [reason, ids] of Object.entries(r.rejected) as Array<[RejectReason, string[]]>) (rejected[reason] ??= []).push(...ids);
    throw new SpaceError("resource_exhausted", explain(nodes.length, rejected, work), { retryable: true, details: { rejected: countRejected(rejected) } });
  }

  /**
   * A restore pinned to its source node (behaviours.md C): under `on`, a node that does
   * not publish the environment refuses at once with the drain hint; a node the
   * directory lacks keeps the pin (the node itself decides).
   */
  #pinned(
    req: PlacementRequest,
    nodes: readonly NodeEntry[],
    work: Parameters<typeof requirePlacement>[1],
    opts: PlacementOptions,
  ): PlacementDecision & { nodeId: string } {
    const pin = req.pinnedNodeId!;
    const node = nodes.find((n) => n.id === pin);
    const base = { nodeId: pin, rejected: {}, ranked: [{ nodeId: pin, score: 0 }], explanation: "" };
    if (!node) return base;
    const env = req.environment;
    if (this.#gate === "on" && env?.kind === "unreadable") {
      throw new SpaceError(
        "failed_precondition",
        `environment placement gate is on and the restore's environment binding is unreadable: ${env.reason}`,
      );
    }
    const envOk = env?.kind !== "bound" || node.usableEnvironments.includes(env.environment);
    if (this.#gate === "on" && !envOk && env?.kind === "bound") {
      throw new SpaceError(
        "failed_precondition",
        `sandbox ${req.sandboxId} is pinned to node ${node.name ?? pin}, which does not publish environment ${env.environment}; ` +
          `drain the node (POST /admin/api/v1/nodes/${pin}/drain) so the snapshot is published to remote storage and restores elsewhere`,
      );
    }
    const d = requirePlacement([node], work, opts);
    return {
      ...d,
      ...(this.#gate !== "off"
        ? { gatePlacement: env?.kind !== "bound" ? "no_evidence" : envOk ? "admitted" : "environment_not_usable" }
        : {}),
    };
  }

  async placeVolume(sizeMib: number, o: { exclude?: readonly string[] }, signal: AbortSignal): Promise<string> {
    const free = (n: NodeEntry) => (n.capacity && n.used ? n.capacity.diskMib - n.used.diskMib : 0);
    // Thin provisioning: free disk ranks nodes, the node's quota is what holds the volume to its size.
    const pick = (nodes: readonly NodeEntry[]) =>
      nodes.filter((n) => n.status === "ready" && !o.exclude?.includes(n.id)).sort((a, b) => free(b) - free(a))[0];
    const cached = pick(await this.#nodes.list(signal));
    // As `decide`: the snapshot may predate a drain of the chosen node or a node readied
    // since (a forced drain right after a ready), so the choice is confirmed on its fresh
    // row, and an empty or stale choice is made again on fresh rows before refusing.
    if (cached && (await this.#nodes.get(cached.id, signal, { fresh: true }))?.status === "ready") return cached.id;
    const chosen = pick(await this.#nodes.list(signal, { fresh: true }));
    if (!chosen) throw new SpaceError("resource_exhausted", `no ready node to hold a ${sizeMib} MiB volume`);
    return chosen.id;
  }

  async start(ref: SandboxRef, spec: SandboxSpec, signal: AbortSignal): Promise<SandboxStatus> {
    let started = false;
    try {
      const client = await this.client(ref.nodeId, signal);
      const s = await client.createSandbox(spec, signal);
      started = true;
      return s;
    } finally {
      if (!this.#ledger) this.#settled(ref.nodeId, started);
    }
  }

  /**
   * A placement handed out by `place` is started (or failed): it no longer counts as in
   * flight, except a start on a snapshot directory, counted until a newer snapshot.
   */
  #settled(nodeId: string, started: boolean): void {
    if (started && this.#nodes instanceof CachedNodeDirectory) this.#started.push({ nodeId, at: this.#nodes.now() });
    else this.#release(nodeId);
  }

  #release(nodeId: string): void {
    const n = (this.#inflight.get(nodeId) ?? 1) - 1;
    if (n <= 0) this.#inflight.delete(nodeId);
    else this.#inflight.set(nodeId, n);
  }

  async restore(ref: SandboxRef, snapshot: SnapshotDescriptor, spec: SandboxSpec, signal: AbortSignal): Promise<SandboxStatus> {
    let started = false;
    try {
      const client = await this.client(ref.nodeId, signal);
      const s = await client.restore(spec, snapshot, signal);
      started = true;
      return s;
    } finally {
      if (!this.#ledger) this.#settled(ref.nodeId, started);
    }
  }

  async kill(ref: SandboxRef, signal: AbortSignal): Promise<void> {
    let client: NodeClient;
    try {
      client = await this.client(ref.nodeId, signal);
    } catch (e) {
      // A node that is gone (deregistered) holds nothing to kill.
      if (e instanceof SpaceError && e.code === "not_found") return;
      throw e;
    }
    await client.killSandbox(ref.sandboxId, signal);
  }

  protected async client(nodeId: string, signal: AbortSignal): Promise<NodeClient> {
    const cached = this.#clients.get(nodeId);
    if (cached) return cached;
    const node = await this.#nodes.get(nodeId, signal);
    if (!node) throw notFound(`node ${nodeId} is not registered`);
    const client = new NodeClient({ baseUrl: node.url, internalToken: this.#token });
    // Kept briefly: a node that re-registers at a new address is picked up within seconds.
    this.#clients.set(nodeId, client);
    setTimeout(() => this.#clients.delete(nodeId), 5_000).unref();
    return client;
  }
}
