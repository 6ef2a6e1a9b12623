/**
 * Direct substrate: the control plane picks a node among the registered ones and calls
 * its node-api. Placement scores ready nodes by free capacity (published by node-ctl),
 * prefers nodes that already cache the template, and counts its own in-flight
 * placements so a burst of creates spreads instead of piling on one node.
 */
import type { PlacementRequest, ProxyTarget, SandboxRef, Substrate } from "../substrate.ts";
import type { SandboxMetrics, SandboxSpec, SandboxStatus } from "../../node/api/contract.ts";
import { NodeClient } from "./node-client.ts";
import { SpaceError, notFound } from "../../core/errors.ts";

export interface NodeCapacity {
  vcpu: number;
  memoryMib: number;
  diskMib: number;
  networkSlots: number;
}

/** A registered node as the directory (the store) knows it. */
export interface NodeEntry {
  id: string;
  /** node-api base URL */
  url: string;
  /** Only `ready` nodes take new sandboxes (draining/fenced/down do not). */
  status: string;
  capacity?: NodeCapacity | null;
  used?: (NodeCapacity & { sandboxes?: number }) | null;
  /** Template ids in the node's cache (locality bonus). */
  templates?: readonly string[];
}

export interface NodeDirectory {
  list(signal: AbortSignal): Promise<NodeEntry[]>;
  get(id: string, signal: AbortSignal): Promise<NodeEntry | null>;
}

export interface DirectSubstrateDeps {
  nodes: NodeDirectory;
  internalToken: string;
}

export class DirectSubstrate implements Substrate {
  readonly #nodes: NodeDirectory;
  readonly #token: string;
  readonly #clients = new Map<string, NodeClient>();
  /** node id → placements handed out and not yet started (or failed). */
  readonly #inflight = new Map<string, number>();

  constructor(deps: DirectSubstrateDeps) {
    this.#nodes = deps.nodes;
    this.#token = deps.internalToken;
  }

  async place(req: PlacementRequest, signal: AbortSignal): Promise<SandboxRef> {
    const nodes = (await this.#nodes.list(signal)).filter((n) => n.status === "ready");
    if (nodes.length === 0) {
      throw new SpaceError("unavailable", "no ready node is registered to place the sandbox on", { retryable: true });
    }
    const scored = nodes
      .map((n) => ({ n, score: scoreNode(n, req, this.#inflight.get(n.id) ?? 0) }))
      .filter((x) => x.score > Number.NEGATIVE_INFINITY)
      .sort((a, b) => b.score - a.score);
    const best = scored[0];
    if (!best) {
      throw new SpaceError(
        "resource_exhausted",
        `no node has room for vcpu=${req.vcpu} memory_mib=${req.memoryMib} disk_mib=${req.diskMib}`,
      );
    }
    this.#inflight.set(best.n.id, (this.#inflight.get(best.n.id) ?? 0) + 1);
    return { sandboxId: req.sandboxId, nodeId: best.n.id };
  }

  async start(ref: SandboxRef, spec: SandboxSpec, signal: AbortSignal): Promise<SandboxStatus> {
    try {
      const client = await this.#client(ref.nodeId, signal);
      return await client.createSandbox(spec, signal);
    } finally {
      const n = (this.#inflight.get(ref.nodeId) ?? 1) - 1;
      if (n <= 0) this.#inflight.delete(ref.nodeId);
      else this.#inflight.set(ref.nodeId, n);
    }
  }

  async pause(ref: SandboxRef, signal: AbortSignal) {
    return (await this.#client(ref.nodeId, signal)).lifecycle(ref.sandboxId, "pause", signal);
  }
  async resume(ref: SandboxRef, signal: AbortSignal) {
    return (await this.#client(ref.nodeId, signal)).lifecycle(ref.sandboxId, "resume", signal);
  }
  async stop(ref: SandboxRef, signal: AbortSignal) {
    return (await this.#client(ref.nodeId, signal)).lifecycle(ref.sandboxId, "stop", signal);
  }

  async kill(ref: SandboxRef, signal: AbortSignal): Promise<void> {
    let client: NodeClient;
    try {
      client = await this.#client(ref.nodeId, signal);
    } catch (e) {
      // A node that is gone (deregistered) holds nothing to kill.
      if (e instanceof SpaceError && e.code === "not_found") return;
      throw e;
    }
    await client.killSandbox(ref.sandboxId, signal);
  }

  async observe(ref: SandboxRef, signal: AbortSignal): Promise<SandboxStatus | null> {
    try {
      return await (await this.#client(ref.nodeId, signal)).getSandbox(ref.sandboxId, signal);
    } catch (e) {
      if (e instanceof SpaceError && e.code === "not_found") return null;
      throw e;
    }
  }

  async metrics(ref: SandboxRef, signal: AbortSignal): Promise<SandboxMetrics> {
    return (await this.#client(ref.nodeId, signal)).metrics(ref.sandboxId, signal);
  }

  async setEgress(ref: SandboxRef, egress: { allowInternetAccess: boolean }, signal: AbortSignal): Promise<void> {
    await (await this.#client(ref.nodeId, signal)).egress(ref.sandboxId, egress, signal);
  }

  async proxyTarget(ref: SandboxRef, port: number, signal: AbortSignal): Promise<ProxyTarget> {
    const client = await this.#client(ref.nodeId, signal);
    return { baseUrl: client.proxyUrl(ref.sandboxId, port), headers: client.proxyHeaders() };
  }

  async #client(nodeId: string, signal: AbortSignal): Promise<NodeClient> {
    const cached = this.#clients.get(nodeId);
    if (cached) return cached;
    const node = await this.#nodes.get(nodeId, signal);
    if (!node) throw notFound(`node ${nodeId} is not registered`);
    const client = new NodeClient({ baseUrl: node.url, internalToken: this.#token });
    this.#clients.set(nodeId, client);
    return client;
  }
}

/**
 * Higher is better; -Infinity = cannot fit. Free memory fraction dominates, template
 * locality adds a bonus, in-flight placements count as used.
 */
export function scoreNode(n: NodeEntry, req: PlacementRequest, inflight: number): number {
  const cap = n.capacity;
  const used = n.used;
  if (!cap || !used) return 1 - inflight * 0.01; // unknown capacity: still usable, spread by in-flight
  const freeSlots = cap.networkSlots - used.networkSlots - inflight;
  const freeMem = cap.memoryMib - used.memoryMib - inflight * req.memoryMib;
  if (freeSlots < 1) return Number.NEGATIVE_INFINITY;
  // Memory is overcommitted (idle sandboxes use little of their limit): it only ranks
  // nodes; slots are the hard limit.
  const memScore = cap.memoryMib > 0 ? freeMem / cap.memoryMib : 0;
  const slotScore = cap.networkSlots > 0 ? freeSlots / cap.networkSlots : 0;
  const locality = n.templates?.includes(req.templateId) ? 0.25 : 0;
  return memScore + slotScore + locality;
}
