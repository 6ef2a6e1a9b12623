/**
 * THE sandbox service: one implementation of create/get/list/kill/pause/connect/
 * timeouts/metrics/network shared by every API surface (ECW now, Native later). Domain
 * code only: it throws SpaceError and never mentions HTTP.
 */
import { EventEmitter } from "node:events";
import { randomBytes } from "node:crypto";
import type { Logger } from "../core/log.ts";
import { SpaceError, invalid, notFound } from "../core/errors.ts";
import { newExecutionId, newSandboxId, type SandboxId, type TenantId } from "../core/ids.ts";
import type { NetworkRecord, SandboxMetrics, SandboxSpec } from "../node/api/contract.ts";
import type { SandboxRef, SandboxStatus, SnapshotDescriptor, Substrate } from "../substrate/substrate.ts";
import { MemorySnapshotRepo, type SnapshotRepo, type SnapshotRow } from "./snapshot-repo.ts";
import { egressPolicyOf } from "../api/network/policy.ts";
import {
  isLive,
  killableStates,
  type ListPage,
  type ListQuery,
  type NetworkPolicy,
  type OnTimeout,
  type ResolvedTemplate,
  type SandboxRecord,
  type SandboxRepo,
  type TemplateResolver,
} from "./model.ts";

export interface ResourceRequest {
  vcpu?: number;
  memoryMib?: number;
  diskMib?: number;
}

export interface CreateInput {
  /** A caller-chosen id (Native creates pick it when the operation is accepted); else a new one. */
  id?: SandboxId;
  /** Template id or alias. */
  template: string;
  metadata: Record<string, string>;
  envVars: Record<string, string>;
  timeoutSec: number;
  secure: boolean;
  allowInternetAccess: boolean;
  network: NetworkPolicy | null;
  onTimeout: OnTimeout;
  autoResume: boolean;
  resources: ResourceRequest;
  /**
   * Where it may run: node group and node selector. Absent: read from the metadata key
   * `space.placement` (JSON `{"node_group": "...", "node_selector": {"k": "v"}}`), which
   * both ECW and Native pass through unchanged.
   */
  placement?: PlacementInput;
  /**
   * Warm pools (src/controller/warm-pools): false = never adopt a warm member (the pool's
   * own refills). Creates with a caller-chosen `id` adopt only a member reserved for
   * that id at admission (Native).
   */
  adopt?: boolean;
  /** Trusted internal callers (warm-pool refills) that already resolved the template. */
  resolvedTemplate?: ResolvedTemplate;
  /** Nobody waits for it (warm-pool refills): the node boots it at low CPU priority until it is personalised. */
  background?: boolean;
}

/** What a create asks a warm pool for (resolved and validated by the service). */
export interface AdoptRequest {
  template: ResolvedTemplate;
  vcpu: number;
  memoryMib: number;
  diskMib: number;
  placement: PlacementInput;
  input: CreateInput;
}

/** Warm-pool adoption (src/controller/warm-pools/adoption.ts); null = no member, create cold. */
export interface WarmAdopter {
  /** Whether any pool may have a member to offer (a cheap hint; false = create cold without asking). */
  hasPools(): Promise<boolean>;
  adopt(tenantId: TenantId, req: AdoptRequest, signal: AbortSignal): Promise<SandboxRecord | null>;
  /** Claims a ready member for a create that runs later (Native admission); its id, or null. */
  reserve(tenantId: TenantId, req: Omit<AdoptRequest, "input">, signal: AbortSignal): Promise<SandboxId | null>;
  /** Whether `sandboxId` is a member reserved for `tenantId` and not yet adopted. */
  isReserved(sandboxId: SandboxId, tenantId: TenantId): Promise<boolean>;
  /** Hands a reservation back to the pool (the create it was for will not run). */
  release(sandboxId: SandboxId, tenantId: TenantId): Promise<void>;
}

export interface PlacementInput {
  nodeGroup?: string;
  nodeSelector?: Record<string, string>;
}

export interface SandboxDefaults {
  vcpu: number;
  memoryMib: number;
  diskMib: number;
}

export interface SandboxServiceDeps {
  repo: SandboxRepo;
  templates: TemplateResolver;
  substrate: Substrate;
  defaults: SandboxDefaults;
  log: Logger;
  /** Snapshot rows (suspend, fork); defaults to an in-memory repo (tests). */
  snapshots?: SnapshotRepo;
  /** For tests. */
  now?: () => Date;
  /** How often a waiter re-reads a sandbox another caller is suspending or restoring (ms). */
  pollMs?: number;
}

/**
 * One resident of a force-drained node: `moved` (restored on `toNodeId`, same id, disk
 * and memory), `stayed` (still on its node, running unless the reason says otherwise),
 * `skipped` (no longer there), `failed` (neither moved nor back; the reason says how it is left).
 */
export interface EvacuationOutcome {
  sandboxId: string;
  outcome: "moved" | "stayed" | "skipped" | "failed";
  toNodeId?: string;
  snapshotId?: string;
  reason?: string;
  durationMs: number;
}

/** One requested fork: the new sandbox, or why it did not start. */
export type ForkOutcome = { sandbox: SandboxRecord; error?: undefined } | { sandbox?: undefined; error: SpaceError };

/** States in which ECW `pause` answers 409 "already paused". */
const pausedStates: readonly string[] = ["pausing", "paused", "suspending", "suspended"];
/** Upper bound of forks per request. */
export const MAX_FORKS = 20;
const SNAPSHOT_CALL_MS = 10 * 60_000;

export type ConnectResult = { sandbox: SandboxRecord; resumed: boolean };

/** Upper bound of any sandbox lifetime from now (E2B: 24 h for Pro). */
export const MAX_TIMEOUT_SEC = 24 * 60 * 60;

/**
 * Events other components react to: `ended(id)` when a sandbox stops serving traffic
 * (killed, failed, paused, suspended) so the gateway cuts its streams and forgets
 * its route; `started(rec)` when a create (cold, adopted or from a snapshot) hands a
 * running sandbox to its caller, so the gateway knows the route before the first
 * command asks for it.
 */
export interface SandboxEventMap {
  ended: [id: SandboxId];
  started: [rec: SandboxRecord];
}

export class SandboxService {
  readonly events = new EventEmitter<SandboxEventMap>();
  readonly #repo: SandboxRepo;
  readonly #templates: TemplateResolver;
  readonly #substrate: Substrate;
  readonly #defaults: SandboxDefaults;
  readonly #log: Logger;
  readonly #now: () => Date;
  #warm: WarmAdopter | null = null;
  readonly #snapshots: SnapshotRepo;
  readonly #pollMs: number;
  /** Restores in flight in this process (sandbox id → its running record): concurrent connects share one. */
  readonly #restores = new Map<string, Promise<SandboxRecord>>();

  constructor(deps: SandboxServiceDeps) {
    this.#snapshots = deps.snapshots ?? new MemorySnapshotRepo();
    this.#pollMs = deps.pollMs ?? 200;
    this.#repo = deps.repo;
    this.#templates = deps.templates;
    this.#substrate = deps.substrate;
    this.#defaults = deps.defaults;
    this.#log = deps.log;
    this.#now = deps.now ?? (() => new Date());
    this.events.setMaxListeners(0);
  }

  get repo(): SandboxRepo {
    return this.#repo;
  }
  get substrate(): Substrate {
    return this.#substrate;
  }
  get snapshots(): SnapshotRepo {
    return this.#snapshots;
  }

  /** Installs warm-pool adoption (processes.ts); null turns it off. */
  useWarmPools(warm: WarmAdopter | null): void {
    this.#warm = warm;
  }

  /** Template, shape and placement of a create, validated (400/404 like the create itself). */
  async #plan(tenantId: TenantId, input: CreateInput): Promise<Omit<AdoptRequest, "input"> | null> {
    const template = input.resolvedTemplate ?? (await this.#templates.resolve(tenantId, input.template));
    if (!template) return null;
    const vcpu = input.resources.vcpu ?? this.#defaults.vcpu;
    const memoryMib = input.resources.memoryMib ?? this.#defaults.memoryMib;
    const diskMib = input.resources.diskMib ?? this.#defaults.diskMib;
    validateResources({ vcpu, memoryMib, diskMib }, template.rootfsSizeMib, template.templateId);
    validateTimeout(input.timeoutSec);
    egressPolicyOf(input.allowInternetAccess, input.network); // 400 on a bad network policy
    const placement = input.placement ?? parsePlacement(input.metadata[PLACEMENT_METADATA_KEY]);
    return { template, vcpu, memoryMib, diskMib, placement };
  }

  /**
   * Native admission: claims a warm member for a create that runs later as an operation
   * (its id becomes the operation's target; `create` with that `id` adopts it). null when
   * there is none or the create would not adopt (it then runs cold, or fails with its
   * own error later). Never throws: a reservation is only a head start.
   */
  async reserveWarm(tenantId: TenantId, input: CreateInput, signal: AbortSignal): Promise<SandboxId | null> {
    if (!this.#warm || input.adopt === false || input.template.startsWith("sn_")) return null;
    try {
      if (!(await this.#warm.hasPools())) return null;
      const plan = await this.#plan(tenantId, input);
      return plan ? await this.#warm.reserve(tenantId, plan, signal) : null;
    } catch (e: unknown) {
      this.#log.debug({ err: e, tenantId }, "no warm reservation");
      return null;
    }
  }

  /** Whether `id` is a warm member reserved for this tenant's create (not yet adopted). */
  async isReservedWarm(tenantId: TenantId, id: SandboxId): Promise<boolean> {
    return this.#warm ? this.#warm.isReserved(id, tenantId) : false;
  }

  /** Hands an unused reservation back to its pool (best effort; the pool's TTL is the backstop). */
  async releaseWarm(tenantId: TenantId, id: SandboxId): Promise<void> {
    await this.#warm?.release(id, tenantId).catch((e: unknown) => this.#log.warn({ err: e, sandboxId: id }, "could not release a warm reservation"));
  }

  async create(tenantId: TenantId, input: CreateInput, signal: AbortSignal): Promise<SandboxRecord> {
    const rec = await this.#create(tenantId, input, signal);
    if (rec.state === "running") this.events.emit("started", rec);
    return rec;
  }

  async #create(tenantId: TenantId, input: CreateInput, signal: AbortSignal): Promise<SandboxRecord> {
    const fromSnapshot = !input.resolvedTemplate && input.template.startsWith("sn_") ? await this.#snapshots.findNamed(tenantId, input.template) : null;
    if (fromSnapshot) return this.#createFromSnapshot(tenantId, fromSnapshot, input);
    const plan = await this.#plan(tenantId, input);
    if (!plan) {
      // E2B: `Sandbox.create(snapshotName)` starts from a named snapshot too.
      const named = input.resolvedTemplate ? null : await this.#snapshots.findNamed(tenantId, input.template);
      if (named) return this.#createFromSnapshot(tenantId, named, input);
      throw notFound(`template '${input.template}' not found`);
    }
    const { template, vcpu, memoryMib, diskMib, placement } = plan;
    if (this.#warm && input.adopt !== false && (input.id !== undefined || (await this.#warm.hasPools()))) {
      // A ready member personalised in place; none (or any doubt) → the cold path below.
      const adopted = await this.#warm.adopt(tenantId, { template, vcpu, memoryMib, diskMib, placement, input }, signal);
      if (adopted) return adopted;
    }

    const now = this.#now();
    const id = input.id ?? newSandboxId();
    const secure = input.secure;
    const rec: SandboxRecord = {
      id,
      tenantId,
      templateId: template.templateId,
      alias: template.alias,
      state: "creating",
      nodeId: null,
      executionId: newExecutionId(),
      address: null,
      vcpu,
      memoryMib,
      diskMib,
      metadata: input.metadata,
      envVars: input.envVars,
      envdAccessToken: secure ? token() : null,
      trafficAccessToken: secure || input.network?.allowPublicTraffic === false ? token() : null,
      allowInternetAccess: input.allowInternetAccess,
      network: input.network,
      onTimeout: input.onTimeout,
      autoResume: input.autoResume,
      createdAt: now,
      startedAt: now,
      endAt: new Date(now.getTime() + input.timeoutSec * 1000),
      reason: null,
    };
    await this.#repo.insert(rec);

    let ref: SandboxRef | null = null;
    try {
      const environment = this.#templates.binding ? await this.#templates.binding(rec.templateId) : undefined;
      ref = await this.#substrate.place(
        {
          sandboxId: id,
          templateId: rec.templateId,
          vcpu,
          memoryMib,
          diskMib,
          ...(placement.nodeGroup !== undefined ? { nodeGroup: placement.nodeGroup } : {}),
          ...(placement.nodeSelector ? { nodeSelector: placement.nodeSelector } : {}),
          ...(environment ? { environment } : {}),
        },
        signal,
      );
      await this.#repo.update(id, { nodeId: ref.nodeId });
      const spec: SandboxSpec = {
        sandboxId: id,
        executionId: rec.executionId!,
        template: rec.templateId,
        vcpu,
        memoryMib,
        diskMib,
        envVars: input.envVars,
        ...(rec.envdAccessToken ? { accessToken: rec.envdAccessToken } : {}),
        allowInternetAccess: effectiveInternetAccess(rec),
        network: egressPolicyOf(rec.allowInternetAccess, rec.network),
        ...(input.background ? { background: true } : {}),
      };
      const status = await this.#substrate.start(ref, spec, signal);
      // The timeout counts from when the sandbox is usable, like E2B's.
      const startedAt = this.#now();
      const running = await this.#repo.transition(id, ["creating"], "running", {
        nodeId: ref.nodeId,
        address: status.address,
        startedAt,
        endAt: new Date(startedAt.getTime() + input.timeoutSec * 1000),
      });
      if (!running) {
        // Killed while it was being created: the kill found nothing on the node yet.
        await this.#substrate.kill(ref, AbortSignal.timeout(30_000)).catch((e: unknown) =>
          this.#log.warn({ err: e, sandboxId: id }, "kill after a create lost to a kill failed"),
        );
        throw notFound(`sandbox ${id} was killed while it was being created`);
      }
      return running;
    } catch (e: unknown) {
      const err = SpaceError.from(e);
      this.#log.warn({ sandboxId: id, code: err.code, err: e }, "sandbox create failed");
      if (ref) {
        await this.#substrate.kill(ref, AbortSignal.timeout(30_000)).catch((k: unknown) =>
          this.#log.error({ err: k, sandboxId: id }, "cleanup after a failed create could not kill; the node reaper will"),
        );
      }
      await this.#repo.transition(id, ["creating"], "failed", { reason: `${err.code}: ${err.message}` });
      this.events.emit("ended", id);
      throw err;
    }
  }

  /** A live sandbox of this tenant; killed, failed and others' are not found. */
  async get(tenantId: TenantId, id: string): Promise<SandboxRecord> {
    const rec = await this.#repo.get(tenantId, id as SandboxId);
    if (!rec || !isLive(rec.state)) throw notFound(`sandbox ${id} not found`);
    return rec;
  }

  list(tenantId: TenantId, q: ListQuery): Promise<ListPage> {
    return this.#repo.list(tenantId, q);
  }

  /** Ends the sandbox. Not found when it is not live (so a second kill is 404). */
  async kill(tenantId: TenantId, id: string, reason = "killed by request"): Promise<void> {
    const rec = await this.get(tenantId, id);
    await this.#killRecord(rec, reason);
  }

  /**
   * live → killing (routing stops at once: only `running` is routed) → node kill →
   * killed. An unreachable node does not keep the row alive: its reaper ends orphans
   * when it returns. Any other node error leaves the row `failed` with the reason.
   */
  async #killRecord(rec: SandboxRecord, reason: string): Promise<void> {
    const killing = await this.#repo.transition(rec.id, killableStates, "killing");
    if (!killing) throw notFound(`sandbox ${rec.id} not found`); // another kill won
    this.events.emit("ended", rec.id);
    const nodeId = killing.nodeId ?? rec.nodeId;
    if (nodeId) {
      try {
        await this.#substrate.kill({ sandboxId: rec.id, nodeId }, AbortSignal.timeout(60_000));
      } catch (e: unknown) {
        const err = SpaceError.from(e);
        if (err.code !== "unavailable" && err.code !== "deadline_exceeded") {
          await this.#repo.transition(rec.id, ["killing"], "failed", { reason: `kill failed: ${err.code}: ${err.message}` });
          throw err;
        }
        this.#log.warn({ sandboxId: rec.id, nodeId, err: e }, "node unreachable during kill; marked killed");
        reason = `${reason} (node unreachable at kill time)`;
      }
    }
    await this.#repo.transition(rec.id, ["killing"], "killed", { reason });
    // Its suspend snapshots die with it (named ones outlive it); best effort.
    await this.#dropSnapshots(rec.id, { purpose: "suspend" });
  }

  /** Marks snapshots deleted and frees the nodes' local copies (best effort; blob parts stay for retention). */
  async #dropSnapshots(sandboxId: string, filter: Parameters<SnapshotRepo["markDeleted"]>[1]): Promise<void> {
    try {
      const gone = await this.#snapshots.markDeleted(sandboxId, filter);
      await Promise.all(
        gone
          .filter((g) => g.nodeId)
          .map((g) =>
            this.#substrate.dropSnapshot(g.nodeId!, g.id, AbortSignal.timeout(30_000)).catch((e: unknown) =>
              this.#log.warn({ err: e, sandboxId, snapshotId: g.id }, "could not free a node's local snapshot copy"),
            ),
          ),
      );
    } catch (e: unknown) {
      this.#log.warn({ err: e, sandboxId }, "could not delete snapshots");
    }
  }

  /** E2B `timeout`: the end time becomes now + timeout (may shorten). */
  async setTimeout(tenantId: TenantId, id: string, timeoutSec: number): Promise<SandboxRecord> {
    validateTimeout(timeoutSec);
    const rec = await this.get(tenantId, id);
    const updated = await this.#repo.update(rec.id, { endAt: new Date(this.#now().getTime() + timeoutSec * 1000) });
    if (!updated) throw notFound(`sandbox ${id} not found`);
    return updated;
  }

  /** E2B `refreshes`: keep alive for at least `durationSec` more; never shortens. */
  async refresh(tenantId: TenantId, id: string, durationSec: number): Promise<SandboxRecord> {
    validateTimeout(durationSec);
    const rec = await this.get(tenantId, id);
    return this.#extend(rec, durationSec);
  }

  async #extend(rec: SandboxRecord, sec: number): Promise<SandboxRecord> {
    const target = new Date(this.#now().getTime() + sec * 1000);
    if (target <= rec.endAt) return rec;
    return (await this.#repo.update(rec.id, { endAt: target })) ?? rec;
  }

  /**
   * E2B pause = suspend: running → suspending → (node: memory checkpoint + disk snapshot,
   * parts uploaded and checksummed, node freed) → suspended. The snapshot row (one per
   * attempt) is restorable only once the node answered with its descriptor. A failure
   * leaves the sandbox running (the node thaws it; if the node already let it go, it is
   * restored from the node's local copy), never half. `upload: false` (warm-pool members)
   * keeps the parts on the node only: the restore is pinned there.
   */
  async suspend(tenantId: TenantId, id: string, opts: { upload?: boolean } = {}): Promise<SandboxRecord> {
    const rec = await this.get(tenantId, id);
    if (pausedStates.includes(rec.state)) throw new SpaceError("failed_precondition", `sandbox ${id} is already paused`);
    if (rec.state !== "running" || !rec.nodeId) {
      throw new SpaceError("failed_precondition", `sandbox ${id} is ${rec.state}; only a running sandbox can be paused`, { retryable: true });
    }
    return this.#suspendRecord(rec, opts.upload ?? true);
  }

  async #suspendRecord(rec: SandboxRecord, upload = true): Promise<SandboxRecord> {
    const ref: SandboxRef = { sandboxId: rec.id, nodeId: rec.nodeId! };
    const suspending = await this.#repo.transition(rec.id, ["running"], "suspending");
    if (!suspending) {
      const now = await this.#repo.getById(rec.id);
      if (now && pausedStates.includes(now.state)) throw new SpaceError("failed_precondition", `sandbox ${rec.id} is already paused`);
      if (!now || !isLive(now.state)) throw notFound(`sandbox ${rec.id} not found`);
      throw new SpaceError("failed_precondition", `sandbox ${rec.id} changed state (now ${now.state}); retry`, { retryable: true });
    }
    // Routing stops: no new envd stream may start on a sandbox being checkpointed.
    this.events.emit("ended", rec.id);
    const snapshotId = await this.#snapshots.begin({ sandboxId: rec.id, executionId: rec.executionId, nodeId: ref.nodeId, purpose: "suspend" });
    let desc: SnapshotDescriptor;
    try {
      desc = await this.#substrate.suspend(ref, { snapshotId, upload }, AbortSignal.timeout(SNAPSHOT_CALL_MS));
    } catch (e: unknown) {
      const err = SpaceError.from(e);
      this.#log.warn({ sandboxId: rec.id, snapshotId, code: err.code, err: e }, "suspend failed");
      await this.#snapshots.fail(snapshotId, `${err.code}: ${err.message}`).catch(() => undefined);
      await this.#recoverSuspend(rec, ref, snapshotId);
      throw err;
    }
    await this.#snapshots.finish(snapshotId, desc);
    const suspended = await this.#repo.transition(rec.id, ["suspending"], "suspended", { address: null });
    if (!suspended) {
      // Killed while it was being suspended: the snapshot has no owner.
      await this.#dropSnapshots(rec.id, { snapshotId });
      throw notFound(`sandbox ${rec.id} was killed while it was being paused`);
    }
    // Earlier suspend snapshots are superseded (no restore can use them: it is suspended now).
    await this.#dropSnapshots(rec.id, { purpose: "suspend", except: snapshotId });
    return suspended;
  }

  /** After a failed suspend: back to running where the node still runs it, else restored from the node's local copy, else failed. */
  async #recoverSuspend(rec: SandboxRecord, ref: SandboxRef, snapshotId: string): Promise<void> {
    try {
      const seen = await this.#substrate.observe(ref, AbortSignal.timeout(30_000));
      if (seen && seen.state === "running") {
        await this.#repo.transition(rec.id, ["suspending"], "running", { address: seen.address });
        return;
      }
      if (!seen) {
        const local: SnapshotDescriptor = {
          snapshotId, sourceSandboxId: rec.id, template: rec.templateId, parentUuid: "", parts: [], sizeBytes: 0, timings: {},
        };
        const executionId = newExecutionId();
        const st = await this.#restoreHeld(ref, local, this.#specOf(rec, executionId), AbortSignal.timeout(SNAPSHOT_CALL_MS));
        await this.#snapshots.newExecution(rec.id, executionId);
        await this.#repo.transition(rec.id, ["suspending"], "running", { address: st.address });
        return;
      }
      throw new SpaceError("internal", `the node reports the sandbox ${seen.state}`);
    } catch (e: unknown) {
      const err = SpaceError.from(e);
      this.#log.error({ sandboxId: rec.id, err: e }, "suspend failed and the sandbox could not be brought back");
      await this.#repo.transition(rec.id, ["suspending"], "failed", { reason: `suspend failed and recovery failed: ${err.code}: ${err.message}` });
    }
  }

  /** The node spec of a sandbox (restore, fork): its token, env and network policy re-applied. */
  #specOf(rec: SandboxRecord, executionId: string): SandboxSpec {
    return {
      sandboxId: rec.id,
      executionId,
      template: rec.templateId,
      vcpu: rec.vcpu,
      memoryMib: rec.memoryMib,
      diskMib: rec.diskMib,
      envVars: rec.envVars ?? {},
      ...(rec.envdAccessToken ? { accessToken: rec.envdAccessToken } : {}),
      allowInternetAccess: effectiveInternetAccess(rec),
      network: egressPolicyOf(rec.allowInternetAccess, rec.network),
    };
  }

  /**
   * A node restore of `desc` holding the snapshot row meanwhile, so the retention sweeper
   * never deletes what a restore is using (retention_restore_source_guard); refused when
   * the sweeper has already claimed it.
   */
  async #restoreHeld(ref: SandboxRef, desc: SnapshotDescriptor, spec: SandboxSpec, signal: AbortSignal): Promise<SandboxStatus> {
    if (!(await this.#snapshots.hold(desc.snapshotId, new Date(Date.now() + SNAPSHOT_CALL_MS)))) {
      throw new SpaceError("failed_precondition", `snapshot ${desc.snapshotId} is being deleted by retention and cannot be restored`);
    }
    try {
      return await this.#substrate.restore(ref, desc, spec, signal);
    } finally {
      await this.#snapshots.release(desc.snapshotId).catch((e: unknown) => this.#log.warn({ err: e, snapshotId: desc.snapshotId }, "could not release a snapshot hold"));
    }
  }

  /** Where a restore of `snap` may run: anywhere that can run its environment when durable, else pinned to its node. */
  async #placeFor(rec: SandboxRecord, snap: SnapshotRow, signal: AbortSignal): Promise<SandboxRef> {
    const placement = parsePlacement(rec.metadata[PLACEMENT_METADATA_KEY]);
    const environment = this.#templates.binding ? await this.#templates.binding(rec.templateId) : undefined;
    return this.#substrate.place(
      {
        sandboxId: rec.id,
        templateId: rec.templateId,
        vcpu: rec.vcpu,
        memoryMib: rec.memoryMib,
        diskMib: rec.diskMib,
        ...(placement.nodeGroup !== undefined ? { nodeGroup: placement.nodeGroup } : {}),
        ...(placement.nodeSelector ? { nodeSelector: placement.nodeSelector } : {}),
        ...(environment ? { environment } : {}),
        ...(snap.state !== "durable" && snap.nodeId ? { pinnedNodeId: snap.nodeId } : {}),
      },
      signal,
    );
  }

  /**
   * E2B connect/resume: running → extend the end time only (resumed=false);
   * resident-paused → resume on its node; suspended → restore (resumed=true). Concurrent
   * connects converge on one restore: one caller wins suspended → resuming, the others
   * wait for it to be running. A connect during a pause waits for the pause, then restores.
   */
  async connect(tenantId: TenantId, id: string, timeoutSec: number | undefined): Promise<ConnectResult> {
    if (timeoutSec !== undefined) validateTimeout(timeoutSec);
    const rec = await this.get(tenantId, id);
    switch (rec.state) {
      case "running":
      case "creating":
        return { sandbox: timeoutSec === undefined ? rec : await this.#extend(rec, timeoutSec), resumed: false };
      case "paused": {
        if (!rec.nodeId) throw new SpaceError("internal", `paused sandbox ${id} has no node`);
        await this.#substrate.resume({ sandboxId: rec.id, nodeId: rec.nodeId }, AbortSignal.timeout(120_000));
        const resumed = await this.#repo.transition(rec.id, ["paused"], "running");
        if (!resumed) throw new SpaceError("aborted", `sandbox ${id} changed state during resume; retry`);
        return { sandbox: await this.#extend(resumed, timeoutSec ?? 300), resumed: true };
      }
      case "suspending": {
        const settled = await this.#awaitSettled(rec.id, ["suspending"]);
        if (settled.state === "running") return { sandbox: await this.#extend(settled, timeoutSec ?? 300), resumed: false };
        return this.connect(tenantId, id, timeoutSec);
      }
      case "suspended":
      case "resuming": {
        const running = await this.#restore(rec);
        return { sandbox: await this.#extend(running, timeoutSec ?? 300), resumed: true };
      }
      default:
        throw new SpaceError("failed_precondition", `sandbox ${id} is ${rec.state}; connect again shortly`, { retryable: true });
    }
  }

  /** One restore per sandbox in this process; across processes the guarded transition decides. */
  #restore(rec: SandboxRecord): Promise<SandboxRecord> {
    const inflight = this.#restores.get(rec.id);
    if (inflight) return inflight;
    const p = (async () => {
      if (rec.state === "suspended") {
        const claimed = await this.#repo.transition(rec.id, ["suspended"], "resuming");
        if (claimed) return this.#restoreClaimed(claimed);
      }
      // Another process restores it: wait for the outcome.
      const settled = await this.#awaitSettled(rec.id, ["resuming"]);
      if (settled.state === "running") return settled;
      throw new SpaceError("unavailable", `sandbox ${rec.id} could not be resumed (a concurrent resume left it ${toPublicState(settled.state)}); retry`, { retryable: true });
    })().finally(() => this.#restores.delete(rec.id));
    this.#restores.set(rec.id, p);
    return p;
  }

  async #restoreClaimed(rec: SandboxRecord, opts: { avoidNodeId?: string } = {}): Promise<SandboxRecord> {
    const signal = AbortSignal.timeout(SNAPSHOT_CALL_MS);
    const snap = await this.#snapshots.latest(rec.id, "suspend");
    if (!snap?.descriptor) {
      await this.#repo.transition(rec.id, ["resuming"], "failed", { reason: "no restorable snapshot" });
      throw new SpaceError("internal", `sandbox ${rec.id} is paused but has no restorable snapshot`);
    }
    const executionId = newExecutionId();
    let ref: SandboxRef | null = null;
    let status: SandboxStatus;
    try {
      ref = await this.#placeFor(rec, snap, signal);
      if (opts.avoidNodeId !== undefined && ref.nodeId === opts.avoidNodeId) {
        const placed = ref.nodeId;
        ref = null; // nothing was started there: no kill (the sandbox id must not be touched on the drained node)
        throw new SpaceError("failed_precondition", `placement chose node ${placed}, the node being evacuated`);
      }
      status = await this.#restoreHeld(ref, snap.descriptor, this.#specOf(rec, executionId), signal);
      await this.#snapshots.newExecution(rec.id, executionId);
    } catch (e: unknown) {
      const err = SpaceError.from(e);
      this.#log.warn({ sandboxId: rec.id, snapshotId: snap.id, nodeId: ref?.nodeId, code: err.code, err: e }, "restore failed; the sandbox stays paused");
      if (ref) await this.#substrate.kill(ref, AbortSignal.timeout(30_000)).catch(() => undefined);
      await this.#repo.transition(rec.id, ["resuming"], "suspended");
      throw err;
    }
    const running = await this.#repo.transition(rec.id, ["resuming"], "running", { nodeId: ref.nodeId, address: status.address });
    if (!running) {
      await this.#substrate.kill(ref, AbortSignal.timeout(30_000)).catch(() => undefined);
      throw notFound(`sandbox ${rec.id} was killed while it was being resumed`);
    }
    return running;
  }

  /**
   * Forced drain of `fromNodeId`: moves one resident elsewhere keeping its id, disk and
   * memory. running (a resident-paused one is resumed first) → suspend with the parts
   * published to the blob store → the snapshot must be `durable` (a node-local snapshot
   * would pin the restore to the draining node) → restored on another node (placement
   * already excludes the draining node; a placement landing there anyway is refused).
   * Any failure leaves it where it was, running, and the outcome says why. Never throws.
   */
  async evacuate(id: SandboxId, fromNodeId: string): Promise<EvacuationOutcome> {
    const t0 = Date.now();
    const out = (o: Omit<EvacuationOutcome, "sandboxId" | "durationMs">): EvacuationOutcome => ({ sandboxId: id, ...o, durationMs: Date.now() - t0 });
    let rec = await this.#repo.getById(id);
    if (!rec || !isLive(rec.state) || rec.nodeId !== fromNodeId) return out({ outcome: "skipped", reason: "no longer on the node" });
    try {
      if (rec.state === "paused") {
        await this.#substrate.resume({ sandboxId: rec.id, nodeId: fromNodeId }, AbortSignal.timeout(120_000));
        const resumed = await this.#repo.transition(rec.id, ["paused"], "running");
        if (!resumed) return out({ outcome: "stayed", reason: "changed state while it was being resumed for the move" });
        rec = resumed;
      }
      if (rec.state !== "running") return out({ outcome: "stayed", reason: `sandbox is ${rec.state}; only running or paused sandboxes are moved` });
    } catch (e: unknown) {
      const err = SpaceError.from(e);
      return out({ outcome: "stayed", reason: `resume before the move failed: ${err.code}: ${err.message}` });
    }
    let suspended: SandboxRecord;
    try {
      suspended = await this.#suspendRecord(rec);
    } catch (e: unknown) {
      const err = SpaceError.from(e);
      return out({ outcome: "stayed", reason: `suspend failed (the sandbox was brought back on its node): ${err.code}: ${err.message}` });
    }
    const snap = await this.#snapshots.latest(rec.id, "suspend");
    if (!snap?.descriptor) return out({ outcome: "failed", reason: "suspended but no restorable snapshot was recorded" });
    if (snap.state !== "durable") {
      const back = await this.#restoreOn(suspended, fromNodeId, snap.descriptor);
      return out({
        outcome: "stayed",
        reason: `the snapshot is not durable (its parts are only on the node's disk, not in the blob store), so it cannot be restored elsewhere${back ? `; ${back}` : ""}`,
      });
    }
    try {
      const claimed = await this.#repo.transition(rec.id, ["suspended"], "resuming");
      if (!claimed) return out({ outcome: "stayed", reason: "changed state after the suspend (a concurrent resume or kill)" });
      const running = await this.#restoreClaimed(claimed, { avoidNodeId: fromNodeId });
      this.#log.info({ sandboxId: rec.id, from: fromNodeId, to: running.nodeId, snapshotId: snap.id, ms: Date.now() - t0 }, "sandbox evacuated");
      return out({ outcome: "moved", toNodeId: running.nodeId!, snapshotId: snap.id });
    } catch (e: unknown) {
      const err = SpaceError.from(e);
      const back = await this.#restoreOn(suspended, fromNodeId, snap.descriptor);
      return out({ outcome: "stayed", reason: `restore on another node failed: ${err.code}: ${err.message}${back ? `; ${back}` : ""}`, snapshotId: snap.id });
    }
  }

  /** Restores a suspended sandbox on a given node without placement (evacuation put-back); null when it runs again, else why not. */
  async #restoreOn(rec: SandboxRecord, nodeId: string, desc: SnapshotDescriptor): Promise<string | null> {
    const claimed = await this.#repo.transition(rec.id, ["suspended"], "resuming");
    if (!claimed) return "it changed state meanwhile and was left as it is";
    const executionId = newExecutionId();
    try {
      const st = await this.#restoreHeld({ sandboxId: rec.id, nodeId }, desc, this.#specOf(claimed, executionId), AbortSignal.timeout(SNAPSHOT_CALL_MS));
      await this.#snapshots.newExecution(rec.id, executionId);
      const running = await this.#repo.transition(rec.id, ["resuming"], "running", { nodeId, address: st.address });
      return running ? null : "it was killed meanwhile";
    } catch (e: unknown) {
      const err = SpaceError.from(e);
      this.#log.error({ sandboxId: rec.id, nodeId, err: e }, "evacuation: could not put the sandbox back on its node; it stays paused");
      await this.#repo.transition(rec.id, ["resuming"], "suspended");
      return `putting it back on its node failed too (${err.code}: ${err.message}); it stays paused and resumes on connect`;
    }
  }

  /** Waits (polling the store) until the sandbox leaves `states`; not found when it ended. */
  async #awaitSettled(id: SandboxId, states: readonly string[], timeoutMs = SNAPSHOT_CALL_MS): Promise<SandboxRecord> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const now = await this.#repo.getById(id);
      if (!now || !isLive(now.state)) throw notFound(`sandbox ${id} not found`);
      if (!states.includes(now.state)) return now;
      if (Date.now() > deadline) throw new SpaceError("deadline_exceeded", `sandbox ${id} is still ${now.state}; retry`, { retryable: true });
      await new Promise((r) => setTimeout(r, this.#pollMs));
    }
  }

  /**
   * E2B fork: one live checkpoint of a running sandbox (it keeps running, id and end time
   * untouched), then `count` new sandboxes restored from it, each succeeding or failing
   * on its own. The checkpoint is freed afterwards.
   */
  async fork(tenantId: TenantId, id: string, input: { count?: number; timeoutSec?: number; metadata?: Record<string, string> }): Promise<ForkOutcome[]> {
    const count = input.count ?? 1;
    if (!Number.isInteger(count) || count < 1 || count > MAX_FORKS) throw invalid(`count=${count} must be between 1 and ${MAX_FORKS}`, { field: "count" });
    const timeoutSec = input.timeoutSec ?? 300;
    validateTimeout(timeoutSec);
    const rec = await this.get(tenantId, id);
    if (rec.state !== "running" || !rec.nodeId) throw new SpaceError("failed_precondition", `sandbox ${id} is ${toPublicState(rec.state)}; only a running sandbox can be forked`);
    const snapshotId = await this.#snapshots.begin({ sandboxId: rec.id, executionId: rec.executionId, nodeId: rec.nodeId, purpose: "fork" });
    let snap: SnapshotRow;
    try {
      const desc = await this.#substrate.checkpoint({ sandboxId: rec.id, nodeId: rec.nodeId }, { snapshotId, upload: true }, AbortSignal.timeout(SNAPSHOT_CALL_MS));
      snap = await this.#snapshots.finish(snapshotId, desc);
    } catch (e: unknown) {
      const err = SpaceError.from(e);
      await this.#snapshots.fail(snapshotId, `${err.code}: ${err.message}`).catch(() => undefined);
      throw err;
    }
    try {
      return await Promise.all(
        Array.from({ length: count }, () =>
          this.#forkOne(input.metadata ? { ...rec, metadata: input.metadata } : rec, snap, timeoutSec).then(
            (sandbox): ForkOutcome => ({ sandbox }),
            (e: unknown): ForkOutcome => ({ error: SpaceError.from(e) }),
          ),
        ),
      );
    } finally {
      await this.#dropSnapshots(rec.id, { snapshotId });
    }
  }

  /**
   * E2B snapshot create: a live checkpoint of a running sandbox (it keeps running) made
   * durable in the blob store and kept under its name until deleted; it outlives its
   * source. 409 when the tenant already has a snapshot of that name.
   */
  async createNamedSnapshot(tenantId: TenantId, id: string, name?: string): Promise<SnapshotRow> {
    if (name !== undefined && (name.length < 1 || name.length > 128)) throw invalid(`name must be 1-128 characters`, { field: "name" });
    const rec = await this.get(tenantId, id);
    if (rec.state !== "running" || !rec.nodeId) {
      throw new SpaceError("failed_precondition", `sandbox ${id} is ${toPublicState(rec.state)}; only a running sandbox can be snapshotted`);
    }
    if (name !== undefined && (await this.#snapshots.listNamed({ tenantId, name, limit: 1 })).length) {
      throw new SpaceError("already_exists", `a snapshot named '${name}' already exists`, { details: { field: "name" } });
    }
    const snapshotId = await this.#snapshots.begin({
      sandboxId: rec.id,
      executionId: rec.executionId,
      nodeId: rec.nodeId,
      purpose: "named",
      tenantId,
      ...(name !== undefined ? { name } : {}),
    });
    try {
      const desc = await this.#substrate.checkpoint({ sandboxId: rec.id, nodeId: rec.nodeId }, { snapshotId, upload: true }, AbortSignal.timeout(SNAPSHOT_CALL_MS));
      const snap = await this.#snapshots.finish(snapshotId, desc);
      this.#log.info({ sandboxId: rec.id, snapshotId, name, state: snap.state }, "named snapshot taken");
      return snap;
    } catch (e: unknown) {
      const err = SpaceError.from(e);
      await this.#snapshots.fail(snapshotId, `${err.code}: ${err.message}`).catch(() => undefined);
      throw err;
    }
  }

  /** The tenant's named snapshots (filters, keyset page of `limit`); `nextToken` when more may follow. */
  async listNamedSnapshots(
    tenantId: TenantId,
    q: { sandboxId?: string; name?: string; limit: number; nextToken?: string },
  ): Promise<{ items: SnapshotRow[]; nextToken: string | null }> {
    const rows = await this.#snapshots.listNamed({
      tenantId,
      limit: q.limit + 1,
      ...(q.sandboxId ? { sandboxId: q.sandboxId } : {}),
      ...(q.name ? { name: q.name } : {}),
      ...(q.nextToken ? { after: q.nextToken } : {}),
    });
    const items = rows.slice(0, q.limit);
    return { items, nextToken: rows.length > q.limit ? items[items.length - 1]!.id : null };
  }

  /**
   * Deletes a named snapshot of the tenant: the row is marked deleted and the node's local
   * copy freed (best effort); returns the row (its parts, for the caller to drop from the
   * blob store). Not found for another tenant's, unknown or already deleted ones.
   */
  async deleteNamedSnapshot(tenantId: TenantId, snapshotId: string): Promise<SnapshotRow> {
    const snap = await this.#snapshots.findNamed(tenantId, snapshotId);
    if (!snap || snap.id !== snapshotId) throw notFound(`snapshot ${snapshotId} not found`);
    const [gone] = await this.#snapshots.markDeleted(snap.sandboxId, { snapshotId, purpose: "named" });
    if (!gone) throw notFound(`snapshot ${snapshotId} not found`);
    if (gone.nodeId) {
      await this.#substrate.dropSnapshot(gone.nodeId, gone.id, AbortSignal.timeout(30_000)).catch((e: unknown) =>
        this.#log.warn({ err: e, snapshotId }, "could not free a node's local snapshot copy"),
      );
    }
    return { ...gone, descriptor: gone.descriptor ?? snap.descriptor };
  }

  /** A new sandbox (new id) restored from a named snapshot: memory and disk; the caller's metadata and timeout. */
  async #createFromSnapshot(tenantId: TenantId, snap: SnapshotRow, input: CreateInput): Promise<SandboxRecord> {
    validateTimeout(input.timeoutSec);
    const src = await this.#repo.getById(snap.sandboxId as SandboxId);
    if (!src || src.tenantId !== tenantId) throw notFound(`template '${input.template}' not found`);
    return this.#forkOne({ ...src, metadata: input.metadata }, snap, input.timeoutSec);
  }

  async #forkOne(src: SandboxRecord, snap: SnapshotRow, timeoutSec: number): Promise<SandboxRecord> {
    const now = this.#now();
    const rec: SandboxRecord = {
      ...structuredClone(src),
      id: newSandboxId(),
      state: "creating",
      nodeId: null,
      executionId: newExecutionId(),
      address: null,
      // The fork's envd is the source's, restored with its memory: it keeps the source's
      // access token (its /init accepts only that one), so the tokens are inherited.
      createdAt: now,
      startedAt: now,
      endAt: new Date(now.getTime() + timeoutSec * 1000),
      reason: null,
    };
    await this.#repo.insert(rec);
    let ref: SandboxRef | null = null;
    try {
      const signal = AbortSignal.timeout(SNAPSHOT_CALL_MS);
      ref = await this.#placeFor(rec, snap, signal);
      await this.#repo.update(rec.id, { nodeId: ref.nodeId });
      const status = await this.#restoreHeld(ref, snap.descriptor!, this.#specOf(rec, rec.executionId!), signal);
      const startedAt = this.#now();
      const running = await this.#repo.transition(rec.id, ["creating"], "running", {
        nodeId: ref.nodeId,
        address: status.address,
        startedAt,
        endAt: new Date(startedAt.getTime() + timeoutSec * 1000),
      });
      if (!running) {
        await this.#substrate.kill(ref, AbortSignal.timeout(30_000)).catch(() => undefined);
        throw notFound(`sandbox ${rec.id} was killed while it was being forked`);
      }
      return running;
    } catch (e: unknown) {
      const err = SpaceError.from(e);
      this.#log.warn({ sandboxId: rec.id, source: src.id, code: err.code, err: e }, "fork failed");
      if (ref) await this.#substrate.kill(ref, AbortSignal.timeout(30_000)).catch(() => undefined);
      await this.#repo.transition(rec.id, ["creating"], "failed", { reason: `fork of ${src.id} failed: ${err.code}: ${err.message}` });
      throw err;
    }
  }

  /** Samples from the node; only the current one (no history kept yet). */
  async metrics(tenantId: TenantId, id: string, range: { start?: Date; end?: Date }): Promise<SandboxMetrics[]> {
    const rec = await this.get(tenantId, id);
    if (rec.state !== "running" || !rec.nodeId) return [];
    const now = this.#now();
    if (range.end && range.end.getTime() < now.getTime() - 5_000) return [];
    if (range.start && range.start.getTime() > now.getTime() + 5_000) return [];
    return [await this.#substrate.metrics({ sandboxId: rec.id, nodeId: rec.nodeId }, AbortSignal.timeout(10_000))];
  }

  /**
   * The sandbox's network record: destinations observed (policy mode `observe`) and refused
   * by its policy, as its node recorded them (empty unless it runs).
   */
  async networkRecord(tenantId: TenantId, id: string): Promise<NetworkRecord> {
    const rec = await this.get(tenantId, id);
    if (rec.state !== "running" || !rec.nodeId) return { observed: [], denied: [] };
    return this.#substrate.networkRecord({ sandboxId: rec.id, nodeId: rec.nodeId }, AbortSignal.timeout(10_000));
  }

  /**
   * Replaces the whole egress policy: validated (400), stored with the sandbox (so every
   * re-creation applies it), and applied by the node to a running sandbox.
   */
  async updateNetwork(tenantId: TenantId, id: string, network: NetworkPolicy, allowInternetAccess: boolean | undefined): Promise<SandboxRecord> {
    const rec = await this.get(tenantId, id);
    const merged: NetworkPolicy = { ...network };
    // Public-traffic settings are create-time properties; an egress update keeps them.
    if (rec.network?.allowPublicTraffic !== undefined) merged.allowPublicTraffic = rec.network.allowPublicTraffic;
    if (rec.network?.maskRequestHost !== undefined) merged.maskRequestHost = rec.network.maskRequestHost;
    egressPolicyOf(allowInternetAccess ?? rec.allowInternetAccess, merged);
    const updated = await this.#repo.update(rec.id, {
      network: merged,
      ...(allowInternetAccess === undefined ? {} : { allowInternetAccess }),
    });
    if (!updated) throw notFound(`sandbox ${id} not found`);
    if (updated.nodeId && updated.state === "running") {
      // The node enforces all-or-nothing egress today; CIDR/domain rules are stored for
      // the network-policy issue.
      await this.#substrate.setEgress(
        { sandboxId: updated.id, nodeId: updated.nodeId },
        { allowInternetAccess: effectiveInternetAccess(updated), policy: egressPolicyOf(updated.allowInternetAccess, updated.network) },
        AbortSignal.timeout(30_000),
      );
    }
    return updated;
  }

  /**
   * Called by the timeout enforcer for a sandbox past its end time. `kill` kills;
   * `pause` suspends a running sandbox (a suspended one does not time out). If that
   * suspend fails the sandbox is killed and the reason says so (keeping it running past
   * its end time would leak the node).
   */
  async expire(rec: SandboxRecord): Promise<void> {
    const fresh = await this.#repo.getById(rec.id);
    if (!fresh || !isLive(fresh.state) || fresh.endAt.getTime() > this.#now().getTime()) return;
    if (fresh.state === "creating") return; // create owns it; its end time starts at running
    if (["suspending", "suspended", "resuming"].includes(fresh.state)) return;
    if (fresh.onTimeout === "pause" && fresh.state === "running" && fresh.nodeId) {
      try {
        await this.#suspendRecord(fresh);
        return;
      } catch (e: unknown) {
        const err = SpaceError.from(e);
        const now = await this.#repo.getById(rec.id);
        if (!now || !isLive(now.state) || now.state !== "running") return;
        await this.#killRecord(now, `timeout: onTimeout=pause but suspend failed (${err.code}: ${err.message}); killed`);
        return;
      }
    }
    await this.#killRecord(fresh, "timeout");
  }
}

export function validateResources(r: { vcpu: number; memoryMib: number; diskMib: number }, rootfsSizeMib: number | null, templateId: string): void {
  for (const [name, v] of [["vcpu", r.vcpu], ["memory_mib", r.memoryMib], ["disk_mib", r.diskMib]] as const) {
    if (!Number.isInteger(v) || v <= 0) throw invalid(`${name}=${v} must be a positive integer`, { field: name });
  }
  if (r.memoryMib < 64) throw invalid(`memory_mib=${r.memoryMib} is below the minimum of 64 MiB`, { field: "memory_mib" });
  if (rootfsSizeMib !== null && r.diskMib < rootfsSizeMib) {
    throw invalid(
      `disk_mib=${r.diskMib} is smaller than the rootfs size ${rootfsSizeMib} MiB of template ${templateId}`,
      { field: "disk_mib", rootfsSizeMib },
    );
  }
}

export function validateTimeout(sec: number): void {
  if (!Number.isFinite(sec) || sec < 0 || sec > MAX_TIMEOUT_SEC) {
    throw invalid(`timeout=${sec} must be between 0 and ${MAX_TIMEOUT_SEC} seconds`, { field: "timeout" });
  }
}

/** allow_internet_access=false, or denyOut containing 0.0.0.0/0 with no allowOut, means no egress. */
export function effectiveInternetAccess(rec: Pick<SandboxRecord, "allowInternetAccess" | "network">): boolean {
  if (!rec.allowInternetAccess) return false;
  const deny = rec.network?.denyOut ?? [];
  const allow = rec.network?.allowOut ?? [];
  if (deny.includes("0.0.0.0/0") && allow.length === 0) return false;
  return true;
}

const token = () => randomBytes(24).toString("base64url");

/** How a state reads in messages to callers (suspended is E2B's paused). */
function toPublicState(s: string): string {
  return s === "suspended" || s === "suspending" ? "paused" : s === "resuming" ? "resuming" : s;
}

/** Metadata key carrying placement constraints (ECW has no body field for them). */
export const PLACEMENT_METADATA_KEY = "space.placement";

const LABEL_KEY = /^[A-Za-z0-9._/-]{1,253}$/;
const LABEL_VALUE = /^[A-Za-z0-9._-]{0,63}$/;

/** `{"node_group": "gpu", "node_selector": {"zone": "a"}}` → PlacementInput; names the offending part. */
export function parsePlacement(raw: string | undefined): PlacementInput {
  if (raw === undefined) return {};
  let v: unknown;
  try {
    v = JSON.parse(raw);
  } catch {
    throw invalid(`metadata '${PLACEMENT_METADATA_KEY}' must be JSON like {"node_group":"gpu","node_selector":{"zone":"a"}} (got ${raw.slice(0, 100)})`, {
      field: PLACEMENT_METADATA_KEY,
    });
  }
  if (!v || typeof v !== "object" || Array.isArray(v)) throw invalid(`metadata '${PLACEMENT_METADATA_KEY}' must be a JSON object`, { field: PLACEMENT_METADATA_KEY });
  const o = v as Record<string, unknown>;
  for (const k of Object.keys(o)) {
    if (k !== "node_group" && k !== "node_selector") throw invalid(`metadata '${PLACEMENT_METADATA_KEY}': unknown field '${k}' (node_group, node_selector)`, { field: PLACEMENT_METADATA_KEY });
  }
  const out: PlacementInput = {};
  if (o.node_group !== undefined) {
    if (typeof o.node_group !== "string" || !/^[A-Za-z0-9._-]{1,63}$/.test(o.node_group)) {
      throw invalid(`metadata '${PLACEMENT_METADATA_KEY}': node_group must be 1-63 letters, digits, . _ -`, { field: PLACEMENT_METADATA_KEY });
    }
    out.nodeGroup = o.node_group;
  }
  if (o.node_selector !== undefined) {
    const sel = o.node_selector;
    if (!sel || typeof sel !== "object" || Array.isArray(sel)) throw invalid(`metadata '${PLACEMENT_METADATA_KEY}': node_selector must be an object of label → value`, { field: PLACEMENT_METADATA_KEY });
    const s: Record<string, string> = {};
    for (const [k, val] of Object.entries(sel)) {
      if (!LABEL_KEY.test(k) || typeof val !== "string" || !LABEL_VALUE.test(val)) {
        throw invalid(`metadata '${PLACEMENT_METADATA_KEY}': node_selector entry ${k}=${String(val)} is not a valid label`, { field: PLACEMENT_METADATA_KEY });
      }
      s[k] = val;
    }
    if (Object.keys(s).length) out.nodeSelector = s;
  }
  return out;
}
