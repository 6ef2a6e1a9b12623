/**
 * THE sandbox service: one front over the systems that do the work, shared by every API
 * surface (ECW, Native), the gateway and the controller. Domain code only: it throws
 * SpaceError and never mentions HTTP.
 *
 * Systems (one file each, sharing `SandboxResources`): creation.ts (create, warm
 * reservations), lifecycle.ts (kill, timeouts, suspend, connect/restore), forks.ts
 * (fork, named snapshots), evacuation.ts (forced drain), network.ts (metrics, network
 * record, egress), expiry.ts (end of lifetime), residency.ts (resident pause, stop,
 * start).
 */
import { EventEmitter } from "node:events";
import type { SandboxVolumes } from "./volume-service.ts";
import type { Logger } from "../core/log.ts";
import { secondsSince, spaceMetrics, type SandboxLifecycleMetrics } from "../core/metrics.ts";
import { inSpan } from "../core/tracing.ts";
import type { SandboxId, TenantId } from "../core/ids.ts";
import type { NetworkRecord, SandboxMetrics } from "../contract/node-api.ts";
import type { SandboxLogEntry } from "../contract/envd-logs.ts";
import type { LogQuery } from "../contract/sandbox-logs.ts";
import type { SnapshotKind, Substrate } from "../substrate/substrate.ts";
import { announcingRepo, SandboxChanges, type SandboxChangeFeed } from "./changes.ts";
import type { CreateInput } from "./create-input.ts";
import { SandboxCreation } from "./creation.ts";
import { SandboxEvacuation, type EvacuationOutcome } from "./evacuation.ts";
import { SandboxExpiry } from "./expiry.ts";
import { SandboxForks, type ForkOutcome } from "./forks.ts";
import { SandboxLifecycle, type ConnectOptions, type ConnectResult } from "./lifecycle.ts";
import type { ListPage, ListQuery, NetworkPolicy, SandboxRecord, SandboxRepo, SandboxState, TemplateResolver } from "./model.ts";
import { SandboxNetwork } from "./network.ts";
import { SandboxResidency } from "./residency.ts";
import { liveSandbox, type SandboxDefaults, type SandboxEventMap, type SandboxResources } from "./resources.ts";
import { MemorySnapshotRepo, type SnapshotRepo, type Snapshot } from "./snapshot-repo.ts";
import type { WarmAdopter, WarmMembers } from "./warm-adopter.ts";

export type { CreateInput, PlacementInput, ResourceRequest } from "./create-input.ts";
export { effectiveInternetAccess, MAX_TIMEOUT_SEC, parsePlacement, PLACEMENT_METADATA_KEY, validateResources, validateTimeout } from "./create-input.ts";
export type { EvacuationOutcome } from "./evacuation.ts";
export { MAX_FORKS, type ForkOutcome } from "./forks.ts";
export type { ConnectResult } from "./lifecycle.ts";
export type { SandboxDefaults, SandboxEventMap } from "./resources.ts";
export type { AdoptRequest, WarmAdopter, WarmMembers } from "./warm-adopter.ts";

export interface SandboxServiceDeps {
  repo: SandboxRepo;
  templates: TemplateResolver;
  substrate: Substrate;
  defaults: SandboxDefaults;
  log: Logger;
  /** Snapshot rows (suspend, fork); defaults to an in-memory repo (tests). */
  snapshots?: SnapshotRepo;
  /** Warm-pool adoption, built over this service's members (src/controller/warm-pools); absent = creates boot cold. */
  warmPools?: (members: WarmMembers) => WarmAdopter;
  /** For tests. */
  now?: () => Date;
  /** Changes of sandbox rows by any process (the store's NOTIFY feed); absent = this process's writes only. */
  changeFeed?: SandboxChangeFeed;
  /**
   * How often a waiter re-reads a sandbox regardless of notifications (ms; default 5000):
   * the safety net for a notification lost while the feed reconnects.
   */
  pollMs?: number;
  /** Lifecycle latencies and failed creates; absent = unregistered families (tests). */
  metrics?: SandboxLifecycleMetrics;
  /** Volumes over the store; absent = creates with volume mounts are refused. */
  volumes?: SandboxVolumes;
}

export class SandboxService implements WarmMembers {
  readonly events = new EventEmitter<SandboxEventMap>();
  readonly #r: SandboxResources;
  readonly #creation: SandboxCreation;
  readonly #lifecycle: SandboxLifecycle;
  readonly #forks: SandboxForks;
  readonly #evacuation: SandboxEvacuation;
  readonly #network: SandboxNetwork;
  readonly #expiry: SandboxExpiry;
  readonly #residency: SandboxResidency;

  constructor(deps: SandboxServiceDeps) {
    this.events.setMaxListeners(0);
    const changes = new SandboxChanges(deps.changeFeed);
    this.#r = {
      repo: announcingRepo(deps.repo, changes, (rec) => this.events.emit("started", rec)),
      templates: deps.templates,
      substrate: deps.substrate,
      snapshots: deps.snapshots ?? new MemorySnapshotRepo(),
      defaults: deps.defaults,
      log: deps.log,
      now: deps.now ?? (() => new Date()),
      events: this.events,
      changes,
      pollMs: deps.pollMs ?? 5000,
      metrics: deps.metrics ?? spaceMetrics().sandboxes,
      ...(deps.volumes ? { volumes: deps.volumes } : {}),
    };
    this.#lifecycle = new SandboxLifecycle(this.#r);
    this.#forks = new SandboxForks(this.#r);
    this.#evacuation = new SandboxEvacuation(this.#r, this.#lifecycle);
    this.#network = new SandboxNetwork(this.#r);
    this.#expiry = new SandboxExpiry(this.#r, this.#lifecycle);
    this.#residency = new SandboxResidency(this.#r);
    // Last: the adopter works on members through this front (connect, kill), so every system exists first.
    this.#creation = new SandboxCreation(this.#r, this.#forks, deps.warmPools?.(this) ?? null);
  }

  get repo(): SandboxRepo {
    return this.#r.repo;
  }
  get substrate(): Substrate {
    return this.#r.substrate;
  }
  /** Volumes; absent where the service has no store. */
  get volumes(): SandboxVolumes | undefined {
    return this.#r.volumes;
  }
  get snapshots(): SnapshotRepo {
    return this.#r.snapshots;
  }

  reserveWarm(tenantId: TenantId, input: CreateInput, signal: AbortSignal): Promise<SandboxId | null> {
    return this.#creation.reserveWarm(tenantId, input, signal);
  }
  isReservedWarm(tenantId: TenantId, id: SandboxId): Promise<boolean> {
    return this.#creation.isReservedWarm(tenantId, id);
  }
  releaseWarm(tenantId: TenantId, id: SandboxId): Promise<void> {
    return this.#creation.releaseWarm(tenantId, id);
  }
  create(tenantId: TenantId, input: CreateInput, signal: AbortSignal): Promise<SandboxRecord> {
    return this.#creation.create(tenantId, input, signal);
  }

  /** Releases a `creating` sandbox whose create was interrupted; the row fails with `reason`. */
  abandonCreate(rec: SandboxRecord, reason: string, signal: AbortSignal): Promise<void> {
    return this.#creation.abandon(rec, reason, signal);
  }

  /** A live sandbox of this tenant; killed, failed and others' are not found. */
  get(tenantId: TenantId, id: string): Promise<SandboxRecord> {
    return liveSandbox(this.#r, tenantId, id);
  }
  list(tenantId: TenantId, q: ListQuery): Promise<ListPage> {
    return this.#r.repo.list(tenantId, q);
  }
  /**
   * The tenant's sandbox `id` once it is out of `states` (any change of the row wakes the
   * wait: this process's writes, and others' through the change feed), or as it is at the
   * deadline; null when there is none.
   */
  awaitLeaving(tenantId: TenantId, id: SandboxId, states: readonly SandboxState[], timeoutMs: number): Promise<SandboxRecord | null> {
    return this.#r.changes.awaitLeaving(id, states, () => this.#r.repo.get(tenantId, id), Date.now() + timeoutMs, this.#r.pollMs);
  }

  kill(tenantId: TenantId, id: string, reason?: string): Promise<void> {
    return this.#lifecycle.kill(tenantId, id, reason);
  }
  setTimeout(tenantId: TenantId, id: string, timeoutSec: number): Promise<SandboxRecord> {
    return this.#lifecycle.setTimeout(tenantId, id, timeoutSec);
  }
  refresh(tenantId: TenantId, id: string, durationSec: number): Promise<SandboxRecord> {
    return this.#lifecycle.refresh(tenantId, id, durationSec);
  }
  suspend(tenantId: TenantId, id: string, opts: { upload?: boolean; kind?: SnapshotKind } = {}): Promise<SandboxRecord> {
    return this.#timed("pause", id, () => this.#lifecycle.suspend(tenantId, id, opts), (s) => this.#r.metrics.pauseSeconds.observe({ path: "suspend" }, s));
  }
  /** Publishes a suspend snapshot left `local` (joins a publication in flight here); true once `durable`. */
  publishLocal(sandboxId: string, nodeId: string, snapshotId: string): Promise<boolean> {
    return this.#lifecycle.publishLocal(sandboxId, nodeId, snapshotId);
  }
  /** The snapshot a suspended sandbox resumes from and its durability (`local` → `durable`); null when it is not suspended. */
  async resumeSnapshot(rec: SandboxRecord): Promise<{ id: string; durability: "local" | "durable" } | null> {
    if (!(["suspended", "resuming"] as SandboxState[]).includes(rec.state)) return null;
    const s = await this.#r.snapshots.latest(rec.id, "suspend");
    return s && (s.state === "local" || s.state === "durable") ? { id: s.id, durability: s.state } : null;
  }
  connect(tenantId: TenantId, id: string, timeoutSec: number | undefined, opts: ConnectOptions = {}): Promise<ConnectResult> {
    return this.#lifecycle.connect(tenantId, id, timeoutSec, opts);
  }

  /** Resident pause of a running sandbox (frozen on its node). */
  pauseResident(rec: SandboxRecord & { nodeId: string }, signal: AbortSignal): Promise<SandboxRecord> {
    return this.#timed("pause", rec.id, () => this.#residency.pause(rec, signal), (s) => this.#r.metrics.pauseSeconds.observe({ path: "resident" }, s));
  }
  /** Stop a running (or, re-claimed, stopping) sandbox, keeping its rootfs. */
  stop(rec: SandboxRecord & { nodeId: string }, signal: AbortSignal): Promise<SandboxRecord> {
    return this.#residency.stop(rec, signal);
  }
  /** Start a stopped (or, re-claimed, resuming) sandbox again on its node. */
  start(rec: SandboxRecord & { nodeId: string }, signal: AbortSignal): Promise<SandboxRecord> {
    return this.#residency.start(rec, signal);
  }

  evacuate(id: SandboxId, fromNodeId: string): Promise<EvacuationOutcome> {
    return this.#evacuation.evacuate(id, fromNodeId);
  }

  fork(tenantId: TenantId, id: string, input: { count?: number; timeoutSec?: number; metadata?: Record<string, string> }): Promise<ForkOutcome[]> {
    return this.#timed("fork", id, () => this.#forks.fork(tenantId, id, input), (s) => this.#r.metrics.forkSeconds.observe(s));
  }

  /** A span around one lifecycle step, and its latency observed when it succeeds. */
  #timed<T>(step: string, sandboxId: string, run: () => Promise<T>, observe: (seconds: number) => void): Promise<T> {
    const start = performance.now();
    return inSpan(`sandboxes.${step}`, "sandboxes", { "space.sandbox.id": sandboxId }, async () => {
      const out = await run();
      observe(secondsSince(start));
      return out;
    });
  }
  createNamedSnapshot(tenantId: TenantId, id: string, name?: string): Promise<Snapshot> {
    return this.#forks.createNamedSnapshot(tenantId, id, name);
  }
  listNamedSnapshots(
    tenantId: TenantId,
    q: { sandboxId?: string; name?: string; limit: number; nextToken?: string },
  ): Promise<{ items: Snapshot[]; nextToken: string | null }> {
    return this.#forks.listNamedSnapshots(tenantId, q);
  }
  deleteNamedSnapshot(tenantId: TenantId, snapshotId: string): Promise<Snapshot> {
    return this.#forks.deleteNamedSnapshot(tenantId, snapshotId);
  }

  metrics(tenantId: TenantId, id: string, range: { start?: Date; end?: Date }): Promise<SandboxMetrics[]> {
    return this.#network.metrics(tenantId, id, range);
  }
  logs(tenantId: TenantId, id: string, q: LogQuery): Promise<SandboxLogEntry[]> {
    return this.#network.logs(tenantId, id, q);
  }
  networkRecord(tenantId: TenantId, id: string): Promise<NetworkRecord> {
    return this.#network.networkRecord(tenantId, id);
  }
  updateNetwork(tenantId: TenantId, id: string, network: NetworkPolicy, allowInternetAccess: boolean | undefined): Promise<SandboxRecord> {
    return this.#network.updateNetwork(tenantId, id, network, allowInternetAccess);
  }

  expire(rec: SandboxRecord): Promise<void> {
    return this.#expiry.expire(rec);
  }
}
