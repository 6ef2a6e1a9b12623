/**
 * THE sandbox service: one implementation of create/get/list/kill/pause/connect/
 * timeouts/metrics/network shared by every API surface (ECW now, Native later). Domain
 * code only: it throws SpaceError and never mentions HTTP.
 */
import { EventEmitter } from "node:events";
import { randomBytes } from "node:crypto";
import type { Logger } from "../../core/log.ts";
import { SpaceError, invalid, notFound, unimplemented } from "../../core/errors.ts";
import { newExecutionId, newSandboxId, type SandboxId, type TenantId } from "../../core/ids.ts";
import type { SandboxMetrics, SandboxSpec } from "../../node/api/contract.ts";
import type { SandboxRef, Substrate } from "../../substrate/substrate.ts";
import { egressPolicyOf } from "../network/policy.ts";
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
  adopt(tenantId: TenantId, req: AdoptRequest, signal: AbortSignal): Promise<SandboxRecord | null>;
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
  /** For tests. */
  now?: () => Date;
}

export type ConnectResult = { sandbox: SandboxRecord; resumed: boolean };

/** Upper bound of any sandbox lifetime from now (E2B: 24 h for Pro). */
export const MAX_TIMEOUT_SEC = 24 * 60 * 60;

/**
 * Events other components react to: `ended(id)` when a sandbox stops serving traffic
 * (killed, failed, paused, suspended) so the gateway cuts its streams and forgets
 * its route.
 */
export interface SandboxEventMap {
  ended: [id: SandboxId];
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

  constructor(deps: SandboxServiceDeps) {
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

  /** Installs warm-pool adoption (processes.ts); null turns it off. */
  useWarmPools(warm: WarmAdopter | null): void {
    this.#warm = warm;
  }

  async create(tenantId: TenantId, input: CreateInput, signal: AbortSignal): Promise<SandboxRecord> {
    const template = input.resolvedTemplate ?? (await this.#templates.resolve(tenantId, input.template));
    if (!template) throw notFound(`template '${input.template}' not found`);
    const vcpu = input.resources.vcpu ?? this.#defaults.vcpu;
    const memoryMib = input.resources.memoryMib ?? this.#defaults.memoryMib;
    const diskMib = input.resources.diskMib ?? this.#defaults.diskMib;
    validateResources({ vcpu, memoryMib, diskMib }, template.rootfsSizeMib, template.templateId);
    validateTimeout(input.timeoutSec);
    egressPolicyOf(input.allowInternetAccess, input.network); // 400 on a bad network policy
    const placement = input.placement ?? parsePlacement(input.metadata[PLACEMENT_METADATA_KEY]);
    if (this.#warm && input.adopt !== false) {
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
   * E2B pause = suspend (memory checkpoint + disk snapshot, node freed). Until suspend
   * lands this refuses clearly; it never falls back to a resident freeze, whose
   * semantics (memory held on the node, no cross-node restore) differ.
   */
  async suspend(tenantId: TenantId, id: string): Promise<never> {
    const rec = await this.get(tenantId, id);
    if (["pausing", "paused", "suspending", "suspended"].includes(rec.state)) {
      throw new SpaceError("failed_precondition", `sandbox ${id} is already paused`);
    }
    throw unimplemented(
      `suspend is not available yet: sandbox ${id} keeps running (memory checkpoint and restore land with the snapshot issue)`,
    );
  }

  /**
   * E2B connect/resume: running → extend the end time only (resumed=false);
   * resident-paused → resume on its node (resumed=true); suspended → restore (not yet).
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
      case "suspended":
      case "suspending":
        throw unimplemented(`restore is not available yet: sandbox ${id} is suspended and cannot be resumed by this build`);
      default:
        throw new SpaceError("failed_precondition", `sandbox ${id} is ${rec.state}; connect again shortly`, { retryable: true });
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
   * `pause` would suspend — until suspend exists the sandbox is killed and the reason
   * says so (keeping it running forever would leak the node).
   */
  async expire(rec: SandboxRecord): Promise<void> {
    const fresh = await this.#repo.getById(rec.id);
    if (!fresh || !isLive(fresh.state) || fresh.endAt.getTime() > this.#now().getTime()) return;
    if (fresh.state === "creating") return; // create owns it; its end time starts at running
    const reason =
      fresh.onTimeout === "pause"
        ? "timeout: onTimeout=pause requested but suspend is not available yet; killed"
        : "timeout";
    await this.#killRecord(fresh, reason);
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
