/**
 * Direct substrate: the control plane picks a node among the registered ones and calls
 * its node-api. Placement (../placement.ts) filters nodes by status, node group,
 * selectors (the request's plus the operator's extras), the environment gate and free
 * capacity (published by node-ctl), scores by free capacity and template-cache
 * locality, and counts its own in-flight placements so a burst of creates spreads
 * instead of piling on one node. A failed placement says why, per node class.
 */
import { NodeApiSubstrate } from "../node-api-substrate.ts";
import type { PlacementRequest, SandboxRef, SnapshotDescriptor, Substrate } from "../substrate.ts";
import type { SandboxSpec, SandboxStatus } from "../../contract/node-api.ts";
import { NodeClient } from "../node-client.ts";
import { SpaceError, notFound } from "../../core/errors.ts";
import type { NodeDirectory, NodeEntry } from "../node-directory.ts";
import {
  placementWork,
  requirePlacement,
  type GateMode,
  type GateObservation,
  type PlacementDecision,
  type PlacementOptions,
} from "../placement.ts";

export interface DirectSubstrateDeps {
  nodes: NodeDirectory;
  internalToken: string;
  /** SPACE_ENVIRONMENT_PLACEMENT_GATE (default off). */
  gate?: GateMode;
  /** SPACE_PLACEMENT_NODE_SELECTOR: labels every sandbox requires in addition to its own. */
  selectorExtras?: Record<string, string>;
  overcommit?: PlacementOptions["overcommit"];
  /** Called for every placement under shadow/on (the census and logs read it). */
  onGate?: (o: GateObservation) => void;
}

export class DirectSubstrate extends NodeApiSubstrate implements Substrate {
  readonly #nodes: NodeDirectory;
  readonly #token: string;
  readonly #gate: GateMode;
  readonly #extras: Record<string, string>;
  readonly #overcommit: PlacementOptions["overcommit"];
  readonly #onGate: ((o: GateObservation) => void) | undefined;
  readonly #clients = new Map<string, NodeClient>();
  /** node id → placements handed out and not yet started (or failed). */
  readonly #inflight = new Map<string, number>();

  constructor(deps: DirectSubstrateDeps) {
    super();
    this.#nodes = deps.nodes;
    this.#token = deps.internalToken;
    this.#gate = deps.gate ?? "off";
    this.#extras = deps.selectorExtras ?? {};
    this.#overcommit = deps.overcommit;
    this.#onGate = deps.onGate;
  }

  get gate(): GateMode {
    return this.#gate;
  }

  /** The decision without side effects (admin "why not here?" and benchmarks). */
  async decide(req: PlacementRequest, signal: AbortSignal): Promise<PlacementDecision & { nodeId: string }> {
    const nodes = await this.#nodes.list(signal);
    const work = placementWork(req, this.#extras);
    const opts: PlacementOptions = {
      gate: this.#gate,
      inflight: this.#inflight,
      ...(this.#overcommit ? { overcommit: this.#overcommit } : {}),
    };
    if (req.pinnedNodeId !== undefined) return this.#pinned(req, nodes, work, opts);
    return requirePlacement(nodes, work, opts);
  }

  async place(req: PlacementRequest, signal: AbortSignal): Promise<SandboxRef> {
    const d = await this.decide(req, signal);
    if (this.#gate !== "off" && d.gatePlacement) {
      this.#onGate?.({
        sandboxId: req.sandboxId,
        gate: this.#gate,
        nodeId: d.nodeId,
        placement: d.gatePlacement,
        ...(d.shadowWouldFail ? { wouldFail: d.shadowWouldFail } : {}),
      });
    }
    this.#inflight.set(d.nodeId, (this.#inflight.get(d.nodeId) ?? 0) + 1);
    return { sandboxId: req.sandboxId, nodeId: d.nodeId };
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

  async start(ref: SandboxRef, spec: SandboxSpec, signal: AbortSignal): Promise<SandboxStatus> {
    try {
      const client = await this.client(ref.nodeId, signal);
      return await client.createSandbox(spec, signal);
    } finally {
      this.#settled(ref.nodeId);
    }
  }

  /** A placement handed out by `place` is started (or failed): it no longer counts as in flight. */
  #settled(nodeId: string): void {
    const n = (this.#inflight.get(nodeId) ?? 1) - 1;
    if (n <= 0) this.#inflight.delete(nodeId);
    else this.#inflight.set(nodeId, n);
  }

  async restore(ref: SandboxRef, snapshot: SnapshotDescriptor, spec: SandboxSpec, signal: AbortSignal): Promise<SandboxStatus> {
    try {
      const client = await this.client(ref.nodeId, signal);
      return await client.restore(spec, snapshot, signal);
    } finally {
      this.#settled(ref.nodeId);
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
