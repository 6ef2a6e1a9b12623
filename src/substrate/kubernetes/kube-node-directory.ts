/**
 * SPACE's virtual Nodes as the control plane's NodeDirectory on this substrate (warm-pool
 * adoption and reconciliation read it; kube-scheduler does the placing). A Node is
 * `ready` while its Ready condition is True and its last heartbeat is recent, `draining`
 * when cordoned, else `unavailable`.
 */
import type { NodeDirectory, NodeEntry } from "../node-directory.ts";
import { isNotFound, type KubeApi } from "../../kube/kube-api.ts";
import { NODE_API_ANNOTATION, NODE_GROUP_LABEL, NODE_LABEL, TEMPLATES_ANNOTATION, USABLE_ENVIRONMENTS_ANNOTATION } from "../../kube/names.ts";

export interface KubeNodeObject {
  metadata?: { name?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  spec?: { unschedulable?: boolean };
  status?: { conditions?: Array<{ type: string; status: string; lastHeartbeatTime?: string }> };
}

/** How old a Ready heartbeat may be before the node counts as unavailable. */
const HEARTBEAT_STALE_MS = 40_000;

export function nodeEntryOf(n: KubeNodeObject, now = Date.now()): NodeEntry | null {
  const name = n.metadata?.name;
  const url = n.metadata?.annotations?.[NODE_API_ANNOTATION];
  if (!name || !url) return null;
  const ready = n.status?.conditions?.find((c) => c.type === "Ready");
  const fresh = ready?.lastHeartbeatTime !== undefined && now - Date.parse(ready.lastHeartbeatTime) < HEARTBEAT_STALE_MS;
  const strings = (key: string): string[] => {
    try {
      const parsed: unknown = JSON.parse(n.metadata?.annotations?.[key] ?? "[]");
      return Array.isArray(parsed) ? parsed.filter((x): x is string => typeof x === "string") : [];
    } catch {
      return []; // an unreadable annotation publishes nothing
    }
  };
  const labels = n.metadata?.labels ?? {};
  return {
    id: name,
    name,
    url,
    status: n.spec?.unschedulable ? "draining" : ready?.status === "True" && fresh ? "ready" : "unavailable",
    nodeGroup: labels[NODE_GROUP_LABEL] ?? "default",
    labels,
    usableEnvironments: strings(USABLE_ENVIRONMENTS_ANNOTATION),
    capacity: null,
    used: null,
    templates: strings(TEMPLATES_ANNOTATION),
  };
}

export class KubeNodeDirectory implements NodeDirectory {
  /** One LIST serves the creates and adoptions of the next `ttlMs` (not one per create). */
  #cached: { at: number; nodes: Promise<NodeEntry[]> } | undefined;

  constructor(
    private readonly kube: KubeApi,
    private readonly ttlMs = 1000,
  ) {}

  list(signal: AbortSignal): Promise<NodeEntry[]> {
    const now = Date.now();
    if (this.#cached && now - this.#cached.at < this.ttlMs) return this.#cached.nodes;
    const nodes = this.kube
      .request<{ items?: KubeNodeObject[] }>("GET", "/api/v1/nodes", { query: { labelSelector: `${NODE_LABEL}=true` }, signal })
      .then((r) => (r.items ?? []).flatMap((n) => nodeEntryOf(n) ?? []));
    this.#cached = { at: now, nodes };
    nodes.catch(() => {
      if (this.#cached?.nodes === nodes) this.#cached = undefined; // a failed LIST is not cached
    });
    return nodes;
  }

  async get(id: string, signal: AbortSignal): Promise<NodeEntry | null> {
    try {
      return nodeEntryOf(await this.kube.request<KubeNodeObject>("GET", `/api/v1/nodes/${encodeURIComponent(id)}`, { signal }));
    } catch (e) {
      if (isNotFound(e)) return null;
      throw e;
    }
  }
}
