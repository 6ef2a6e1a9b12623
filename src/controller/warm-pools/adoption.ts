/**
 * Adoption: a create takes a ready warm member instead of booting one. Runs in whichever
 * process serves creates (API for ECW, the dispatcher for Native), through the shared
 * SandboxService (`WarmAdopter`).
 *
 * 1. Pools matching (template, exact shape, tenant) and the build the template boots now.
 * 2. Claim one member of that build in one statement, which the adopter's quota admits
 *    first (SKIP LOCKED; never two creates for one member; an old build's member is
 *    never returned; a refusal claims none): a running one, else a
 *    suspended one (idle policy), which is then restored on its node (its checkpoint
 *    never left it). A member whose restore fails leaves the pool; the create goes cold.
 * 3. Check its node (behaviours.md C): unknown to the directory → back to the pool;
 *    draining/fenced/unavailable, or gate `on` and the node does not publish the build's
 *    environment → refused: it leaves the pool (retiring) and the pool refills; a node
 *    outside the create's group/selector → back.
 * 4. Personalise without restarting: env vars (node-api `init`, which calls envd `/init`
 *    only when there is something to tell it, and gives the member, booted in the
 *    background, its normal CPU priority), egress policy (live), then hand the row to the
 *    caller's tenant. Members are made secure with a token of their own, never shown to
 *    anyone: a secure create keeps it (no envd call for it), one that is not clears it
 *    with metadata, timeout, lifecycle and tokens in one statement. Members keep their
 *    sandbox id: it was never shown to anyone, and the node, its hostname and
 *    E2B_SANDBOX_ID already carry it.
 * Any failure personalising kills the member and falls back to a cold create.
 */
import { randomBytes } from "node:crypto";
import type { Db } from "../../store/db.ts";
import type { Logger } from "../../core/log.ts";
import { SpaceError } from "../../core/errors.ts";
import type { SandboxId, TenantId } from "../../core/ids.ts";
import type { NodeDirectory, NodeEntry } from "../../substrate/node-directory.ts";
import { matchesSelector, type EnvironmentBinding, type GateMode } from "../../substrate/placement.ts";
import type { SandboxRef, Substrate } from "../../substrate/substrate.ts";
import { egressPolicyOf } from "../../sandboxes/egress-rules.ts";
import type { SandboxRecord, TemplateResolver } from "../../sandboxes/model.ts";
import { effectiveInternetAccess, type PlacementInput } from "../../sandboxes/create-input.ts";
import type { AdoptRequest, WarmAdopter, WarmMembers } from "../../sandboxes/warm-adopter.ts";
import {
  type ClaimedSlot,
  claimReadySlot,
  handOverSandbox,
  matchingWarmPools,
  moveSlot,
  reservedSlotOf,
  type WarmPool,
  type WarmSlot,
} from "../../store/warm-pools.ts";
import { ensureTenant } from "../../store/tenants.ts";
import { admitLiveSandbox, WARM_POOL_TENANT_NAME, type QuotaLimits } from "../../store/tenant-quotas.ts";
import { anyWarmPool } from "../../store/any-warm-pool.ts";
import { Recent } from "../../core/recent.ts";
import { inChildSpan } from "../../core/tracing.ts";
import type { WarmPoolMetrics } from "./metrics.ts";

/** The tenant warm members belong to until adopted (no API key: nobody sees them; exempt from quotas). */
export const POOL_TENANT_NAME = WARM_POOL_TENANT_NAME;
/** Metadata key a member carries while it waits (removed by the hand-over). */
export const WARM_POOL_METADATA_KEY = "space.warm-pool";

/**
 * Sends env vars and the access token to a running member's envd, without restarting it:
 * the substrate's `init` (node-api `POST /v1/sandboxes/:id/init`, which calls envd `/init`).
 */
export type MemberPersonaliser = Pick<Substrate, "init">;

/** What to do with a claimed member (pure; behaviours.md C). */
export type MemberVerdict = { kind: "adopt" } | { kind: "back"; reason: string } | { kind: "refuse"; reason: "node_not_ready" | "environment_not_usable" };

export function checkMember(
  node: Pick<NodeEntry, "status" | "usableEnvironments" | "nodeGroup" | "labels"> | undefined,
  gate: GateMode,
  binding: EnvironmentBinding,
  placement: PlacementInput,
): MemberVerdict {
  if (!node) return { kind: "back", reason: "node_unknown" };
  if (node.status !== "ready") return { kind: "refuse", reason: "node_not_ready" };
  if (gate === "on" && binding.kind === "bound" && !node.usableEnvironments.includes(binding.environment)) {
    return { kind: "refuse", reason: "environment_not_usable" };
  }
  if (placement.nodeGroup !== undefined && node.nodeGroup !== placement.nodeGroup) return { kind: "back", reason: "other_node_group" };
  if (placement.nodeSelector && !matchesSelector(node.labels, placement.nodeSelector)) return { kind: "back", reason: "selector_mismatch" };
  return { kind: "adopt" };
}

export interface WarmPoolAdoptionDeps {
  db: Db;
  sandboxes: WarmMembers;
  nodes: NodeDirectory;
  templates: TemplateResolver;
  /** Defaults to the sandbox service's substrate. */
  personaliser?: MemberPersonaliser;
  gate: GateMode;
  metrics: WarmPoolMetrics;
  log: Logger;
  now?: () => Date;
  /** Tenant quota defaults: an adoption counts against the adopter (checked with the claim, enforced at the hand-over). */
  quotas?: QuotaLimits;
}

/** How long "is there any pool" is believed (ms). */
const POOLS_HINT_MS = 1000;
/** Claims tried per create before it goes cold (members put back or refused on the way). */
const MAX_CLAIMS = 8;

export class WarmPoolAdoption implements WarmAdopter {
  readonly #d: WarmPoolAdoptionDeps;
  readonly #now: () => Date;
  #poolTenant: Promise<TenantId> | null = null;
  readonly #anyPool = new Recent<Promise<boolean>>(POOLS_HINT_MS);
  /** Pools matching a (template, shape, tenant), read at most every POOLS_HINT_MS. */
  readonly #matching = new Recent<Promise<WarmPool[]>>(POOLS_HINT_MS);

  constructor(deps: WarmPoolAdoptionDeps) {
    this.#d = deps;
    this.#now = deps.now ?? (() => new Date());
  }

  /**
   * Whether any pool exists: read at most every POOLS_HINT_MS. A stale "none" only sends a
   * create cold while a just-made pool could not have a ready member yet anyway.
   */
  hasPools(): Promise<boolean> {
    let value = this.#anyPool.get("");
    if (!value) {
      value = anyWarmPool(this.#d.db).catch(() => true); // unsure: let adoption look
      this.#anyPool.set("", value);
    }
    return value;
  }

  poolTenant(): Promise<TenantId> {
    this.#poolTenant ??= ensureTenant(this.#d.db, { name: POOL_TENANT_NAME })
      .then((t) => t.id)
      .catch((e: unknown) => {
        this.#poolTenant = null;
        throw e;
      });
    return this.#poolTenant;
  }

  async adopt(tenantId: TenantId, req: AdoptRequest, signal: AbortSignal): Promise<SandboxRecord | null> {
    const { db } = this.#d;
    const poolTenant = await this.poolTenant();
    if (tenantId === poolTenant) return null; // refills never adopt
    const t0 = performance.now();
    // A caller-chosen id (Native) adopts only the member reserved for it at admission.
    if (req.input.id !== undefined) {
      // Refused before the member is taken or personalised: a quota refusal costs no member.
      if (this.#d.quotas) await inChildSpan("warm.quota", "controller", {}, () => admitLiveSandbox(db, tenantId, this.#d.quotas!, req, null));
      const slot = await reservedSlotOf(db, req.input.id, tenantId);
      // Whether it is suspended (restore first) is read alongside the claim: no extra round trip's wait.
      const [claimed, member] = slot
        ? await Promise.all([moveSlot(db, slot.id, ["reserved"], "adopted", { reservedFor: null }), this.#d.sandboxes.repo.getById(req.input.id)])
        : [false, undefined];
      if (!slot || !claimed) {
        // Its reservation lapsed after the create checked it: the id names someone else's sandbox.
        if (await this.#d.sandboxes.repo.getById(req.input.id)) {
          throw new SpaceError("unavailable", `warm member ${req.input.id} is no longer reserved for this create; retrying under a new id`, { retryable: true });
        }
        return null;
      }
      if (member?.state === "suspended" && !(await this.#restore(poolTenant, slot))) {
        throw new SpaceError("unavailable", `warm member ${req.input.id} reserved for this create could not be restored; retrying cold`, { retryable: true });
      }
      const rec = await this.#personalise(tenantId, poolTenant, slot, member?.envdAccessToken != null, req, t0, signal);
      // Its id is taken by the failed member: a retry (the dispatcher's, on `unavailable`) creates cold under a new id.
      if (!rec) throw new SpaceError("unavailable", `warm member ${req.input.id} reserved for this create could not be personalised; retrying cold`, { retryable: true });
      return rec;
    }
    for (let i = 0; i < MAX_CLAIMS; i++) {
      // The quota admits the claim in its own statement: a refusal claims (and costs) no member.
      const claimed = await inChildSpan("warm.claim", "controller", {}, () => this.#claim(tenantId, req, "adopted", signal, this.#d.quotas));
      if (!claimed) return null;
      if (claimed.slot.claimedFrom === "suspended" && !(await this.#restore(poolTenant, claimed.slot))) return null;
      const rec = await this.#personalise(tenantId, poolTenant, claimed.slot, claimed.slot.memberToken, req, t0, signal);
      if (rec) return rec;
    }
    return null;
  }

  /**
   * Native admission: claims a ready member for `tenantId` (state `reserved`) and returns
   * its id, which the operation then names; the create adopts it (`input.id`). null =
   * none (cold). A reservation the create never uses goes back after the pool's TTL.
   */
  async reserve(tenantId: TenantId, req: Omit<AdoptRequest, "input">, signal: AbortSignal): Promise<SandboxId | null> {
    if (tenantId === (await this.poolTenant())) return null;
    const claimed = await this.#claim(tenantId, req, "reserved", signal);
    return claimed ? (claimed.slot.sandboxId as SandboxId) : null;
  }

  async isReserved(sandboxId: SandboxId, tenantId: TenantId): Promise<boolean> {
    return (await reservedSlotOf(this.#d.db, sandboxId, tenantId)) !== undefined;
  }

  async release(sandboxId: SandboxId, tenantId: TenantId): Promise<void> {
    const slot = await reservedSlotOf(this.#d.db, sandboxId, tenantId);
    if (!slot) return;
    const member = await this.#d.sandboxes.repo.getById(sandboxId);
    await moveSlot(this.#d.db, slot.id, ["reserved"], member?.state === "suspended" ? "suspended" : "ready", { reservedFor: null });
  }

  /**
   * Restores a claimed suspended member on its node (same id; its checkpoint is node-local,
   * so the restore is pinned there). false: it failed, and the member has left the pool.
   */
  async #restore(poolTenant: TenantId, slot: WarmSlot): Promise<boolean> {
    const { db, sandboxes, metrics, log } = this.#d;
    const t0 = performance.now();
    try {
      await sandboxes.connect(poolTenant, slot.sandboxId!, undefined, { pinned: true });
      log.debug({ slot: slot.id, sandboxId: slot.sandboxId, ms: Math.round(performance.now() - t0) }, "suspended warm member restored");
      return true;
    } catch (e: unknown) {
      log.warn({ err: e, slot: slot.id, sandboxId: slot.sandboxId }, "restoring a suspended warm member failed; it leaves the pool, creating cold");
      await moveSlot(db, slot.id, ["adopted"], "failed", { reason: `restore: ${SpaceError.from(e).message.slice(0, 300)}` });
      metrics.retired.inc({ pool: slot.pool, reason: "restore_failed" });
      metrics.misses.inc({ pool: slot.pool, reason: "restore_failed" });
      await sandboxes.kill(poolTenant, slot.sandboxId!, "warm member failed to restore").catch(() => undefined);
      return false;
    }
  }

  /**
   * Claims one ready member of a matching pool into `to`, checking its node (put back or
   * refused members are skipped, up to MAX_CLAIMS); null when none is usable.
   */
  async #claim(
    tenantId: TenantId,
    req: Omit<AdoptRequest, "input">,
    to: "adopted" | "reserved",
    signal: AbortSignal,
    quotas?: QuotaLimits,
  ): Promise<{ slot: ClaimedSlot } | null> {
    const { db, metrics, log } = this.#d;
    const templateId = req.template.templateId;
    const pools = await this.#matchingPools(templateId, req, tenantId);
    if (!pools.length) return null; // creates without a pool pay one read
    const binding: EnvironmentBinding = this.#d.gate === "on" && this.#d.templates.binding ? await this.#d.templates.binding(templateId) : { kind: "none" };
    const names = pools.map((p) => p.name);
    const label = names[0]!;
    if (this.#d.gate === "on" && binding.kind === "unreadable") {
      metrics.misses.inc({ pool: label, reason: "binding_unreadable" });
      return null; // the cold path fails it with the placement error
    }
    const tried: string[] = [];
    const reservedFor = to === "reserved" ? tenantId : null;
    for (let i = 0; i < MAX_CLAIMS; i++) {
      // Admitted with the first claim; a member put back or refused does not change what the tenant holds.
      const admit = quotas && !tried.length ? { tenantId, quotas, claim: req } : undefined;
      const slot = await claimReadySlot(db, names, templateId, tried, to, reservedFor, admit);
      if (!slot) break;
      tried.push(slot.id);
      // The member's own node row, not every node's: O(1) per create whatever the fleet's size.
      const node = slot.nodeId ? ((await this.#d.nodes.get(slot.nodeId, signal, { fresh: true })) ?? undefined) : undefined;
      const verdict = checkMember(node, this.#d.gate, binding, req.placement);
      if (verdict.kind === "adopt") return { slot };
      if (verdict.kind === "back") {
        await moveSlot(db, slot.id, [to], slot.claimedFrom, { reservedFor: null });
        log.debug({ slot: slot.id, reason: verdict.reason }, "warm member put back");
        continue;
      }
      // It leaves the pool; the reconciler kills it and refills (placement then requires the environment).
      await moveSlot(db, slot.id, [to], "retiring", { reason: verdict.reason, reservedFor: null });
      metrics.retired.inc({ pool: slot.pool, reason: verdict.reason });
      log.info({ slot: slot.id, sandboxId: slot.sandboxId, nodeId: slot.nodeId, reason: verdict.reason }, "warm member refused");
    }
    metrics.misses.inc({ pool: label, reason: tried.length ? "all_refused" : "empty" });
    return null;
  }

  /**
   * A stale answer is harmless for POOLS_HINT_MS: a pool made since has no ready member yet,
   * and a member of a pool deleted since still fits the create's template and shape.
   */
  #matchingPools(templateId: string, shape: { vcpu: number; memoryMib: number; diskMib: number }, tenantId: TenantId): Promise<WarmPool[]> {
    const key = `${templateId}\0${shape.vcpu}\0${shape.memoryMib}\0${shape.diskMib}\0${tenantId}`;
    const hit = this.#matching.get(key);
    if (hit) return hit;
    const value = matchingWarmPools(this.#d.db, templateId, shape, tenantId);
    this.#matching.set(key, value);
    value.catch(() => this.#matching.delete(key));
    return value;
  }

  async #personalise(
    tenantId: TenantId,
    poolTenant: TenantId,
    slot: WarmSlot,
    memberToken: boolean,
    req: AdoptRequest,
    t0: number,
    signal: AbortSignal,
  ): Promise<SandboxRecord | null> {
    const { db, sandboxes, metrics, log } = this.#d;
    const input = req.input;
    const sandboxId = slot.sandboxId as SandboxId;
    const ref: SandboxRef = { sandboxId, nodeId: slot.nodeId! };
    // A secure create keeps the member's own token (made with it, never shown to anyone): envd
    // then needs no /init unless there are env vars. A create that is not secure clears it.
    const envdAccessToken = input.secure ? (memberToken ? "member" : token()) : null;
    // What envd is told of its token: a new one, or "" to clear the member's; nothing when it keeps what it has.
    const initToken = envdAccessToken === "member" ? {} : envdAccessToken ? { accessToken: envdAccessToken } : memberToken ? { accessToken: "" } : {};
    const trafficAccessToken = input.secure || input.network?.allowPublicTraffic === false ? token() : null;
    try {
      // envd (env, token) and the node's firewall (egress) are independent: both at once.
      const policy = egressPolicyOf(input.allowInternetAccess, input.network);
      await inChildSpan("warm.personalise", "controller", { "space.sandbox.id": sandboxId }, () => Promise.all([
        // Always: besides env and token, init gives the member (booted in the background) its
        // normal CPU priority; with neither, the node does not call envd.
        (this.#d.personaliser ?? sandboxes.substrate).init(ref, { ...(Object.keys(input.envVars).length ? { envVars: input.envVars } : {}), ...initToken }, signal),
        JSON.stringify(policy) !== DEFAULT_POLICY
          ? sandboxes.substrate.setEgress(
              ref,
              { allowInternetAccess: effectiveInternetAccess({ allowInternetAccess: input.allowInternetAccess, network: input.network ?? {} }), policy },
              signal,
            )
          : undefined,
      ]));
      const startedAt = this.#now();
      const rec = await inChildSpan("warm.hand-over", "controller", { "space.sandbox.id": sandboxId }, () => handOverSandbox(db, {
        sandboxId,
        fromTenant: poolTenant,
        toTenant: tenantId,
        alias: req.template.alias,
        metadata: input.metadata,
        envVars: input.envVars,
        envdAccessToken,
        trafficAccessToken,
        allowInternetAccess: input.allowInternetAccess,
        network: (input.network ?? {}) as Record<string, unknown>,
        lifecycle: { onTimeout: input.onTimeout, autoResume: input.autoResume, ...(input.pauseKind ? { pauseKind: input.pauseKind } : {}) },
        startedAt,
        endAt: new Date(startedAt.getTime() + input.timeoutSec * 1000),
      }, this.#d.quotas));
      if (!rec) {
        log.warn({ slot: slot.id, sandboxId }, "warm member vanished before hand-over; trying another");
        return null;
      }
      metrics.adoptions.inc({ pool: slot.pool });
      metrics.adoptSeconds.observe({ pool: slot.pool }, (performance.now() - t0) / 1000);
      log.info({ sandboxId, pool: slot.pool, tenantId, ms: Math.round(performance.now() - t0) }, "warm member adopted");
      return rec;
    } catch (e: unknown) {
      // Half-personalised: it must not serve anyone. Kill it (still the pool's) and go cold.
      log.warn({ err: e, slot: slot.id, sandboxId }, "personalising a warm member failed; killing it, creating cold");
      await moveSlot(db, slot.id, ["adopted"], "failed", { reason: `personalise: ${SpaceError.from(e).message.slice(0, 300)}` });
      await sandboxes.kill(poolTenant, sandboxId, "warm member failed personalisation").catch(() => undefined);
      return null;
    }
  }
}

const token = () => randomBytes(24).toString("base64url");
/** Members start with this policy; a create asking for it needs no egress call. */
const DEFAULT_POLICY = JSON.stringify(egressPolicyOf(true, null));
