/**
 * A test double for Substrate: records calls, keeps sandboxes in memory, and can be told
 * to fail the next start with a given error. A build it is handed is ready at once (with
 * `buildResult`) unless `buildsHang`; node templates are kept per node. Not for production use.
 */
import { SpaceError } from "../core/errors.ts";
import type { NodeVolume, VolumeSent } from "../contract/volume-wire.ts";
import type { MetricsRange, NetworkRecord, SandboxEgress, SandboxInit, SandboxMetrics, SandboxSpec, SandboxStatus } from "../contract/node-api.ts";
import type { SandboxLogEntry } from "../contract/envd-logs.ts";
import { selectLogs, type LogQuery } from "../contract/sandbox-logs.ts";
import type {
  NodeBuildRequest,
  NodeBuildStatusWire,
  PlacementRequest,
  ProxyTarget,
  SandboxRef,
  SnapshotDescriptor,
  SnapshotOptions,
  Substrate,
} from "./substrate.ts";

export class FakeSubstrate implements Substrate {
  readonly calls: string[] = [];
  readonly running = new Map<string, SandboxStatus>();
  failNextStart: SpaceError | null = null;
  /** Where proxyTarget points (a test HTTP server standing in for the node proxy). */
  proxyBase = "http://127.0.0.1:9";
  startDelayMs = 0;

  /** Every placement asked for, in order. */
  readonly placements: PlacementRequest[] = [];
  async place(req: PlacementRequest): Promise<SandboxRef> {
    this.calls.push(`place ${req.sandboxId}`);
    this.placements.push(req);
    return { sandboxId: req.sandboxId, nodeId: "00000000-0000-4000-8000-000000000001" };
  }
  async start(ref: SandboxRef, spec: SandboxSpec): Promise<SandboxStatus> {
    this.calls.push(`start ${ref.sandboxId}`);
    if (this.startDelayMs) await new Promise((r) => setTimeout(r, this.startDelayMs));
    if (this.failNextStart) {
      const e = this.failNextStart;
      this.failNextStart = null;
      throw e;
    }
    const s: SandboxStatus = {
      sandboxId: spec.sandboxId,
      executionId: spec.executionId,
      template: spec.template,
      state: "running",
      address: "10.200.0.2",
      vcpu: spec.vcpu,
      memoryMib: spec.memoryMib,
      diskMib: spec.diskMib,
      startedAt: new Date().toISOString(),
    };
    this.running.set(ref.sandboxId, s);
    return s;
  }
  async #lifecycle(ref: SandboxRef, verb: string, state: SandboxStatus["state"]) {
    this.calls.push(`${verb} ${ref.sandboxId}`);
    const s = this.running.get(ref.sandboxId);
    if (!s) throw new SpaceError("not_found", `sandbox ${ref.sandboxId} not on node`);
    s.state = state;
    return s;
  }
  pause(ref: SandboxRef) {
    return this.#lifecycle(ref, "pause", "paused");
  }
  resume(ref: SandboxRef) {
    return this.#lifecycle(ref, "resume", "running");
  }
  stop(ref: SandboxRef) {
    return this.#lifecycle(ref, "stop", "stopped");
  }
  /** Boots a stopped sandbox again (what node-api's POST /v1/sandboxes/:id/start does). */
  async restart(ref: SandboxRef): Promise<SandboxStatus> {
    this.calls.push(`restart ${ref.sandboxId}`);
    const s = this.running.get(ref.sandboxId);
    if (!s || s.state !== "stopped") throw new SpaceError("failed_precondition", `sandbox ${ref.sandboxId} is not stopped on the node`);
    s.state = "running";
    s.address = "10.200.0.3";
    return s;
  }
  /** Bodies `init` was handed, in order. */
  readonly inits: Array<{ sandboxId: string; body: SandboxInit }> = [];
  async init(ref: SandboxRef, body: SandboxInit): Promise<void> {
    this.calls.push(`init ${ref.sandboxId}`);
    if (this.running.get(ref.sandboxId)?.state !== "running") throw new SpaceError("not_found", `sandbox ${ref.sandboxId} not running on node`);
    this.inits.push({ sandboxId: ref.sandboxId, body });
  }
  async kill(ref: SandboxRef): Promise<void> {
    this.calls.push(`kill ${ref.sandboxId}`);
    this.running.delete(ref.sandboxId);
  }
  async observe(ref: SandboxRef) {
    return this.running.get(ref.sandboxId) ?? null;
  }
  async metrics(ref: SandboxRef): Promise<SandboxMetrics> {
    if (!this.running.has(ref.sandboxId)) throw new SpaceError("not_found", "not on node");
    return { timestamp: new Date().toISOString(), cpuCount: 2, cpuUsedPct: 1.5, memUsed: 1e7, memTotal: 1e9, memCache: 0, diskUsed: 1e6, diskTotal: 1e9 };
  }
  /** Samples and log entries a test put there, per sandbox (kept after kill, as a node keeps them). */
  readonly history = new Map<string, SandboxMetrics[]>();
  readonly logEntries = new Map<string, SandboxLogEntry[]>();
  async metricsHistory(ref: SandboxRef, range: MetricsRange): Promise<SandboxMetrics[]> {
    const kept = this.history.get(ref.sandboxId) ?? (this.running.has(ref.sandboxId) ? [await this.metrics(ref)] : []);
    return kept.filter((m) => {
      const t = Date.parse(m.timestamp);
      return (range.startMs === undefined || t >= range.startMs) && (range.endMs === undefined || t <= range.endMs);
    });
  }
  async logs(ref: SandboxRef, query: LogQuery): Promise<SandboxLogEntry[]> {
    return selectLogs(this.logEntries.get(ref.sandboxId) ?? [], query);
  }
  readonly egress = new Map<string, boolean>();
  readonly policies = new Map<string, SandboxEgress["policy"]>();
  async setEgress(ref: SandboxRef, e: SandboxEgress): Promise<void> {
    this.policies.set(ref.sandboxId, e.policy);
    this.calls.push(`egress ${ref.sandboxId} ${e.allowInternetAccess}`);
    this.egress.set(ref.sandboxId, e.allowInternetAccess);
  }
  async networkRecord(ref: SandboxRef): Promise<NetworkRecord> {
    if (!this.running.has(ref.sandboxId)) throw new SpaceError("not_found", "not on node");
    return { observed: [], denied: [] };
  }
  async proxyTarget(ref: SandboxRef, port: number): Promise<ProxyTarget> {
    return { baseUrl: new URL(`${this.proxyBase}/v1/sandboxes/${ref.sandboxId}/proxy/${port}`), headers: { "x-space-node-token": "internal" } };
  }
  /** Snapshots taken (by id), as the node would describe them. */
  readonly snapshots = new Map<string, SnapshotDescriptor>();
  failNextSuspend: SpaceError | null = null;
  restoreDelayMs = 0;
  #describe(ref: SandboxRef, opts: SnapshotOptions): SnapshotDescriptor {
    const s = this.running.get(ref.sandboxId);
    if (!s) throw new SpaceError("not_found", `sandbox ${ref.sandboxId} not on node`);
    const d: SnapshotDescriptor = {
      snapshotId: opts.snapshotId,
      sourceSandboxId: ref.sandboxId,
      template: s.template,
      kind: opts.kind ?? "full",
      parentUuid: "00000000-0000-0000-0000-000000000000",
      parts: opts.upload ? partsOf(opts.snapshotId, opts.kind ?? "full") : [],
      sizeBytes: opts.upload ? (opts.kind === "disk" ? 1 : 2) : 0,
      timings: {},
    };
    this.snapshots.set(opts.snapshotId, d);
    return d;
  }
  async suspend(ref: SandboxRef, opts: SnapshotOptions): Promise<SnapshotDescriptor> {
    this.calls.push(`suspend ${ref.sandboxId}`);
    if (this.failNextSuspend) {
      const e = this.failNextSuspend;
      this.failNextSuspend = null;
      throw e;
    }
    const d = this.#describe(ref, opts);
    this.running.delete(ref.sandboxId);
    return d;
  }
  async capture(ref: SandboxRef, opts: SnapshotOptions): Promise<SnapshotDescriptor> {
    this.calls.push(`capture ${ref.sandboxId}${opts.restoreAs?.length ? ` as ${opts.restoreAs.join(" ")}` : ""}`);
    return this.#describe(ref, opts);
  }
  nextRestoreError: SpaceError | null = null;
  async restore(ref: SandboxRef, snapshot: SnapshotDescriptor, spec: SandboxSpec): Promise<SandboxStatus> {
    this.calls.push(`restore ${ref.sandboxId} ${snapshot.snapshotId}`);
    if (this.nextRestoreError) {
      const e = this.nextRestoreError;
      this.nextRestoreError = null;
      throw e;
    }
    if (this.restoreDelayMs) await new Promise((r) => setTimeout(r, this.restoreDelayMs));
    const s: SandboxStatus = {
      sandboxId: spec.sandboxId,
      executionId: spec.executionId,
      template: spec.template,
      state: "running",
      address: "10.200.0.3",
      vcpu: spec.vcpu,
      memoryMib: spec.memoryMib,
      diskMib: spec.diskMib,
      startedAt: new Date().toISOString(),
    };
    this.running.set(ref.sandboxId, s);
    return s;
  }
  /** A publication waits for this (when set) before it answers or fails: tests hold it between pause and durable. */
  publishGate: Promise<void> | null = null;
  failNextPublish: SpaceError | null = null;
  async publishSnapshot(_nodeId: string, snapshotId: string): Promise<SnapshotDescriptor> {
    this.calls.push(`publish ${snapshotId}`);
    if (this.publishGate) await this.publishGate;
    if (this.failNextPublish) {
      const e = this.failNextPublish;
      this.failNextPublish = null;
      throw e;
    }
    const d = this.snapshots.get(snapshotId);
    if (!d) throw new SpaceError("not_found", `snapshot ${snapshotId} has no local copy on this node`);
    const published: SnapshotDescriptor = { ...d, parts: partsOf(snapshotId, d.kind), sizeBytes: d.kind === "disk" ? 1 : 2 };
    this.snapshots.set(snapshotId, published);
    return published;
  }
  async dropSnapshot(_nodeId: string, snapshotId: string): Promise<void> {
    this.calls.push(`drop ${snapshotId}`);
  }

  /** Builds handed to a node: `${nodeId} ${buildId}` → request. */
  readonly builds = new Map<string, NodeBuildRequest>();
  /** Node templates: `${nodeId} ${alias}` → the built template it points at. */
  readonly templates = new Map<string, string>();
  buildsHang = false;
  buildResult: NonNullable<NodeBuildStatusWire["result"]> = {
    name: "",
    rootfsSizeMib: 310,
    digest: "sha256:fake",
    environment: "fake-environment",
    cachedSteps: 0,
    builtSteps: 0,
    durationMs: 1,
    config: { env: {}, workdir: "/", user: "root" },
  };
  async startBuild(nodeId: string, req: NodeBuildRequest): Promise<void> {
    this.calls.push(`build ${req.buildId} on ${nodeId}`);
    this.builds.set(`${nodeId} ${req.buildId}`, req);
  }
  async buildStatus(nodeId: string, buildId: string, logsOffset: number): Promise<NodeBuildStatusWire> {
    const req = this.builds.get(`${nodeId} ${buildId}`);
    if (!req) throw new SpaceError("not_found", `build ${buildId} not on node ${nodeId}`);
    const logs = [{ timestamp: new Date().toISOString(), level: "info" as const, message: `built ${req.name}` }];
    const base = { buildId, name: req.name, logEntries: logs.slice(logsOffset), logsTotal: logs.length };
    return this.buildsHang ? { ...base, status: "building" } : { ...base, status: "ready", result: { ...this.buildResult, name: req.name } };
  }
  async pointTemplate(nodeId: string, alias: string, name: string): Promise<void> {
    this.calls.push(`point ${alias} ${name} on ${nodeId}`);
    this.templates.set(`${nodeId} ${alias}`, name);
  }
  async dropTemplate(nodeId: string, name: string): Promise<void> {
    this.calls.push(`drop template ${name} on ${nodeId}`);
    this.templates.delete(`${nodeId} ${name}`);
  }
  /** Volumes: sizes per node and volume (no content: the content API needs a real node). */
  readonly volumes = new Map<string, number>();
  async placeVolume(): Promise<string> {
    return "00000000-0000-4000-8000-000000000001";
  }
  async ensureVolume(nodeId: string, volumeId: string, sizeMib: number): Promise<NodeVolume> {
    this.calls.push(`ensure volume ${volumeId} on ${nodeId}`);
    this.volumes.set(`${nodeId} ${volumeId}`, sizeMib);
    return { volumeId, sizeMib, usedBytes: 0 };
  }
  async dropVolume(nodeId: string, volumeId: string): Promise<void> {
    this.calls.push(`drop volume ${volumeId} on ${nodeId}`);
    this.volumes.delete(`${nodeId} ${volumeId}`);
  }
  async volumeTarget(): Promise<ProxyTarget> {
    return { baseUrl: new URL(this.proxyBase), headers: {} };
  }
  async sendVolume(nodeId: string, volumeId: string, key: string): Promise<VolumeSent> {
    this.calls.push(`send volume ${volumeId} from ${nodeId}`);
    return { key, sizeBytes: 0, sha256: "", sizeMib: this.volumes.get(`${nodeId} ${volumeId}`) ?? 1 };
  }
  async receiveVolume(nodeId: string, volumeId: string, sent: VolumeSent): Promise<NodeVolume> {
    this.calls.push(`receive volume ${volumeId} on ${nodeId}`);
    this.volumes.set(`${nodeId} ${volumeId}`, sent.sizeMib);
    return { volumeId, sizeMib: sent.sizeMib, usedBytes: 0 };
  }
}

/** The parts a published snapshot of `kind` lists (the disk, and the memory unless it is a disk snapshot). */
function partsOf(snapshotId: string, kind: SnapshotDescriptor["kind"]): SnapshotDescriptor["parts"] {
  return [
    { kind: "disk", key: `snapshots/${snapshotId}/disk.btrfs`, sizeBytes: 1, sha256: "0".repeat(64) },
    ...(kind === "disk" ? [] : [{ kind: "memory" as const, key: `snapshots/${snapshotId}/memory.tar`, sizeBytes: 1, sha256: "0".repeat(64) }]),
  ];
}
