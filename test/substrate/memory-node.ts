/**
 * A node for the Substrate conformance suite: the real node-api app (node/api/app.ts and
 * the template routes, so every wire shape, validation and error code is the node's) over
 * an in-memory sandbox manager, snapshots, template builder and template cache. It keeps
 * what the control plane handed it (init bodies, egress, builds, node templates) for the
 * suite to check. Serves Direct (its URL is a node's address) and Kubernetes (the node
 * agent's node-api URL, and `agent` for the VirtualKubelet).
 */
import type { AddressInfo } from "node:net";
import type { FastifyInstance } from "fastify";
import { SpaceError } from "../../src/core/errors.ts";
import type { Logger } from "../../src/core/log.ts";
import { createNodeApi } from "../../src/node/api/app.ts";
import type {
  NetworkRecord,
  NodeHealth,
  NodeInventory,
  SandboxEgress,
  SandboxInit,
  SandboxMetrics,
  SandboxSpec,
  SandboxStatus,
} from "../../src/contract/node-api.ts";
import type { SandboxManager } from "../../src/node/sandboxes/manager.ts";
import type { NodeSnapshots } from "../../src/node/snapshots/node-snapshots.ts";
import type { SnapshotDescriptor, SnapshotKind } from "../../src/contract/snapshot-descriptor.ts";
import type { TemplateBuilder } from "../../src/node/templates/builder.ts";
import type { TemplateCache } from "../../src/node/templates/template-cache.ts";
import { registerTemplateRoutes } from "../../src/node/templates/template-routes.ts";
import type { NodeBuildRequest, NodeBuildStatusWire } from "../../src/contract/node-builds.ts";
import type { SandboxLogEntry } from "../../src/contract/envd-logs.ts";
import { selectLogs, type LogQuery } from "../../src/contract/sandbox-logs.ts";

export class MemoryNode {
  readonly sandboxes = new Map<string, SandboxStatus>();
  readonly inits: Array<{ sandboxId: string; body: SandboxInit }> = [];
  readonly egress = new Map<string, SandboxEgress>();
  readonly snapshots = new Map<string, SnapshotDescriptor>();
  readonly builds = new Map<string, NodeBuildRequest>();
  /** Node templates: alias → the built template it points at. */
  readonly templates = new Map<string, string>();
  /** Log entries and metrics samples the suite seeds, per sandbox (kept after kill, as a node keeps them). */
  readonly logs = new Map<string, SandboxLogEntry[]>();
  readonly history = new Map<string, SandboxMetrics[]>();
  url = "";
  #app: FastifyInstance | undefined;

  constructor(
    readonly nodeId: string,
    readonly token: string,
    private readonly log: Logger,
  ) {}

  async listen(): Promise<string> {
    const app = createNodeApi({
      token: () => this.token,
      manager: () => this.manager,
      snapshots: () => this.nodeSnapshots,
      inventory: async () => this.inventory(),
      health: async (): Promise<NodeHealth> => ({ nodeId: this.nodeId, status: "ok" }),
      logger: this.log,
    });
    registerTemplateRoutes(app, () => this.builder, () => this.cache);
    await app.listen({ host: "127.0.0.1", port: 0 });
    this.#app = app;
    this.url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
    return this.url;
  }

  async close(): Promise<void> {
    await this.#app?.close();
  }

  inventory(): NodeInventory {
    return {
      nodeId: this.nodeId,
      name: "conformance-node",
      runtime: "runc",
      capacity: { networkSlots: 10, vcpu: 4, memoryMib: 8192, diskMib: 20_480 },
      used: { networkSlots: this.sandboxes.size, vcpu: 0, memoryMib: 0, diskMib: 0, sandboxes: this.sandboxes.size },
      usableEnvironments: [],
      templates: [],
    } as NodeInventory;
  }

  /** The node agent as the VirtualKubelet sees it. */
  get agent() {
    return { inventory: async () => this.inventory(), manager: this.manager, snapshots: this.nodeSnapshots };
  }

  #must(id: string): SandboxStatus {
    const s = this.sandboxes.get(id);
    if (!s) throw new SpaceError("not_found", `sandbox ${id} not found on this node`);
    return s;
  }

  #move(id: string, from: readonly SandboxStatus["state"][], to: SandboxStatus["state"]): SandboxStatus {
    const s = this.#must(id);
    if (!from.includes(s.state)) throw new SpaceError("failed_precondition", `sandbox ${id} is ${s.state}, not ${from.join(" or ")}`);
    s.state = to;
    return s;
  }

  #status(spec: SandboxSpec): SandboxStatus {
    const st: SandboxStatus = {
      sandboxId: spec.sandboxId,
      executionId: spec.executionId,
      template: spec.template,
      state: "running",
      address: `10.88.0.${this.sandboxes.size + 2}`,
      vcpu: spec.vcpu,
      memoryMib: spec.memoryMib,
      diskMib: spec.diskMib,
      startedAt: new Date().toISOString(),
    };
    this.sandboxes.set(spec.sandboxId, st);
    return st;
  }

  readonly manager = {
    list: () => [...this.sandboxes.values()],
    get: (id: string) => this.#must(id),
    create: async (spec: SandboxSpec) => this.#status(spec),
    pause: async (id: string) => this.#move(id, ["running"], "paused"),
    resume: async (id: string) => this.#move(id, ["paused"], "running"),
    stop: async (id: string) => this.#move(id, ["running", "paused"], "stopped"),
    start: async (id: string) => this.#move(id, ["stopped"], "running"),
    init: async (id: string, body: SandboxInit) => {
      const s = this.#move(id, ["running"], "running");
      this.inits.push({ sandboxId: id, body });
      return s;
    },
    setEgress: async (id: string, allowInternetAccess: boolean, _signal: AbortSignal, policy?: SandboxEgress["policy"]) => {
      this.#must(id);
      this.egress.set(id, { allowInternetAccess, ...(policy ? { policy } : {}) });
    },
    kill: async (id: string) => {
      this.sandboxes.delete(id);
    },
    networkRecord: async (id: string): Promise<NetworkRecord> => {
      this.#must(id);
      return { observed: [], denied: [] };
    },
    metrics: async (id: string): Promise<SandboxMetrics> => {
      this.#must(id);
      return { timestamp: new Date().toISOString(), cpuCount: 1, cpuUsedPct: 0, memUsed: 1, memTotal: 2, memCache: 0, diskUsed: 1, diskTotal: 2 };
    },
    metricsHistory: async (id: string, range: { startMs?: number; endMs?: number }) =>
      (this.history.get(id) ?? []).filter((m) => {
        const t = Date.parse(m.timestamp);
        return (range.startMs === undefined || t >= range.startMs) && (range.endMs === undefined || t <= range.endMs);
      }),
    logs: async (id: string, q: LogQuery) => selectLogs(this.logs.get(id) ?? [], q),
    target: (id: string) => {
      this.#move(id, ["running"], "running");
      return { host: "127.0.0.1", port: 9 };
    },
  } as unknown as SandboxManager;

  #describe(id: string, snapshotId: string, upload: boolean, kind: SnapshotKind = "full"): SnapshotDescriptor {
    const s = this.#must(id);
    const d: SnapshotDescriptor = {
      snapshotId,
      sourceSandboxId: id,
      template: s.template,
      kind,
      parentUuid: "00000000-0000-0000-0000-000000000000",
      parts: upload ? [{ kind: "disk", key: `snapshots/${snapshotId}/disk.btrfs`, sizeBytes: 1, sha256: "0".repeat(64) }] : [],
      sizeBytes: upload ? 1 : 0,
      timings: {},
    };
    this.snapshots.set(snapshotId, d);
    return d;
  }

  readonly nodeSnapshots = {
    suspend: async (id: string, snapshotId: string, o: { upload: boolean; kind: SnapshotKind }) => {
      const d = this.#describe(id, snapshotId, o.upload, o.kind);
      this.sandboxes.delete(id);
      return d;
    },
    capture: async (id: string, snapshotId: string, o: { upload: boolean }) => this.#describe(id, snapshotId, o.upload),
    restore: async (spec: SandboxSpec, snapshot: SnapshotDescriptor) => {
      if (!this.snapshots.has(snapshot.snapshotId)) throw new SpaceError("not_found", `snapshot ${snapshot.snapshotId} not on this node`);
      return this.#status(spec);
    },
    publish: async (snapshotId: string) => {
      const d = this.snapshots.get(snapshotId);
      if (!d) throw new SpaceError("not_found", `snapshot ${snapshotId} has no local copy on this node`);
      const published = { ...d, parts: [{ kind: "disk" as const, key: `snapshots/${snapshotId}/disk.btrfs`, sizeBytes: 1, sha256: "0".repeat(64) }], sizeBytes: 1 };
      this.snapshots.set(snapshotId, published);
      return published;
    },
    listLocal: async () => [...this.snapshots.values()],
    dropLocal: async (snapshotId: string) => {
      this.snapshots.delete(snapshotId);
    },
  } as unknown as NodeSnapshots;

  #buildStatus(buildId: string, logsOffset: number): NodeBuildStatusWire {
    const b = this.builds.get(buildId);
    if (!b) throw new SpaceError("not_found", `build ${buildId} is not known on this node`);
    const logs = [{ timestamp: new Date().toISOString(), level: "info" as const, message: `built ${b.name}` }];
    const result = { name: b.name, rootfsSizeMib: 310, digest: "sha256:feed", environment: "env1", cachedSteps: 0, builtSteps: 1, durationMs: 1, config: { env: {}, workdir: "/", user: "root" } };
    return { buildId, name: b.name, status: "ready", logEntries: logs.slice(logsOffset), logsTotal: logs.length, result };
  }

  readonly builder = {
    /** No registry sources here: a recipe is already pinned. */
    pin: (_buildId: string, recipe: NodeBuildRequest["recipe"]) => Promise.resolve(recipe),
    start: (buildId: string, name: string, recipe: NodeBuildRequest["recipe"]) => {
      if (!this.builds.has(buildId)) this.builds.set(buildId, { buildId, name, recipe });
      return this.#buildStatus(buildId, 0);
    },
    status: (buildId: string, logsOffset: number) => this.#buildStatus(buildId, logsOffset),
    cancel: (buildId: string) => {
      this.builds.delete(buildId);
    },
  } as unknown as TemplateBuilder;

  readonly cache = {
    /** Creates and restores pin their template first (every template is present here). */
    acquire: async () => ({ release: () => undefined }),
    point: async (alias: string, name: string) => {
      this.templates.set(alias, name);
      return { name: alias, rootfsSizeMib: 310, importedAt: new Date().toISOString(), source: name };
    },
    remove: async (name: string) => {
      this.templates.delete(name);
    },
  } as unknown as TemplateCache;
}
