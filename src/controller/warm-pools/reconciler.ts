/**
 * The warm-pool reconciler (controller leader): level-triggered, one pool name at a time
 * (STYLE.md 3). Load the pool → resolve its template and current build (the release) →
 * observe slots, their sandboxes and nodes → plan (plan.ts, pure) → converge: forget,
 * retire, kill, fail, create members → write status only when it changed. Errors are
 * collected per pool; the pool is retried with backoff while the others go on.
 *
 * Members are ordinary sandboxes of the pool tenant created through the shared
 * SandboxService (placement, capacity, the environment gate: a refill under `on` lands
 * only on nodes publishing the build's environment), so they count against node
 * capacity exactly like any sandbox. Idle members are suspended and resumed by the
 * pool's idle policy (idle-policy.ts) through the same service: a suspended member
 * keeps its checkpoint on its node (no upload) and no longer counts as resident there.
 */
import type { Db } from "../../store/db.ts";
import type { Logger } from "../../core/log.ts";
import { SpaceError } from "../../core/errors.ts";
import type { SandboxId, TenantId } from "../../core/ids.ts";
import type { EnvironmentBinding, GateMode } from "../../substrate/placement.ts";
import type { NodeDirectory } from "../../substrate/node-directory.ts";
import type { TemplateResolver } from "../../sandboxes/model.ts";
import { MAX_TIMEOUT_SEC, type SandboxService } from "../../sandboxes/service.ts";
import {
  currentBuildOf,
  deleteSlot,
  deleteWarmPool,
  getWarmPool,
  insertWarmSlot,
  listSlots,
  listWarmPools,
  moveSlot,
  orphanMembers,
  recentCreates,
  setWarmPoolStatus,
  setWarmPoolTarget,
  slotPoolNames,
  slotSandboxes,
  upsertWarmPool,
  type WarmPool,
  type WarmPoolSpec,
  type WarmSlot,
} from "../../store/warm-pools.ts";
import { burstSize, planPool, type PoolTarget } from "./plan.ts";
import { WARM_POOL_METADATA_KEY } from "./adoption.ts";
import type { WarmPoolMetrics } from "./metrics.ts";
import type { MemberWarmer } from "./warm-up.ts";

export interface WarmPoolReconcilerDeps {
  db: Db;
  sandboxes: SandboxService;
  templates: TemplateResolver;
  nodes: NodeDirectory;
  gate: GateMode;
  metrics: WarmPoolMetrics;
  log: Logger;
  poolTenant: () => Promise<TenantId>;
  /** Pools from SPACE_WARM_POOLS (source `config`; an admin-set pool of the same name wins). */
  configPools?: readonly WarmPoolSpec[];
  /** Between passes over every pool. Default 500 ms. */
  intervalMs?: number;
  /** Readies a started member before it is offered (warm-up.ts); none in unit tests. */
  warmer?: MemberWarmer;
  /** Members created concurrently per pool; also suspends/resumes in flight per pool. Default 4. */
  maxParallelCreates?: number;
  /** A node whose members were suspended or resumed more recently than this is not judged on its published memory yet (≥ a heartbeat). Default 10 s. */
  idleSettleMs?: number;
  /** Refills wait for the pool's adoptions to be quiet this long (plan.ts `refill`). Default 0: no wait. */
  refillQuietMs?: number;
  /** ...but never longer than this after the first deferral. */
  refillMaxDeferMs?: number;
  /** A pool with a max size grows to its creates in this window (plan.ts `burstSize`). Default 120 s. */
  demandWindowMs?: number;
  now?: () => Date;
}

export interface WarmPoolReconciler {
  /** One pass over every pool now (tests, and `wake` after an admin change). */
  reconcileAll(): Promise<void>;
  reconcilePool(name: string): Promise<void>;
  /** Resolves when every member create, suspend and resume started so far has finished. */
  settle(): Promise<void>;
  stop(): Promise<void>;
}

const CREATING_TIMEOUT_MS = 10 * 60_000;
const RESERVATION_TTL_MS = 30 * 60_000;
/** Members are replaced before the 24 h sandbox lifetime ends. */
const MAX_AGE_MS = (MAX_TIMEOUT_SEC - 3600) * 1000;
const ORPHAN_AFTER_MS = 15 * 60_000;

export function createWarmPoolReconciler(deps: WarmPoolReconcilerDeps): WarmPoolReconciler {
  const { db, sandboxes, log, metrics } = deps;
  const now = deps.now ?? (() => new Date());
  const inflight = new Map<string, Promise<void>>();
  /** Suspends and resumes of idle members running in this process (slot id → its promise). */
  const moving = new Map<string, Promise<void>>();
  const backoff = new Map<string, { until: number; delayMs: number }>();
  /** Per pool: idle moves paused after a failed suspend/resume (a substrate that cannot suspend is not asked every pass). */
  const idleBackoff = new Map<string, { until: number; delayMs: number }>();
  /** Per pool: when this leader first held its refill back for a burst of adoptions. */
  const deferredSince = new Map<string, Date>();
  const abort = new AbortController();
  let configApplied = false;
  let lastOrphanSweep = 0;

  async function applyConfig(): Promise<void> {
    if (configApplied || !deps.configPools) return;
    const wanted = new Set(deps.configPools.map((p) => p.name));
    for (const p of deps.configPools) await upsertWarmPool(db, { ...p, source: "config" }, { onlyIfSource: "config" });
    // A pool removed from the config goes away (its members drain); admin-set pools stay.
    for (const p of await listWarmPools(db)) if (p.source === "config" && !wanted.has(p.name)) await deleteWarmPool(db, p.name, { onlyIfSource: "config" });
    configApplied = true;
  }

  /**
   * The template and build members of `pool` must come from, and the size it holds now
   * (grown for a burst when it has a max size: `demand` is then its recent creates);
   * null = unresolvable (drain).
   */
  async function targetOf(
    pool: WarmPool,
    poolTenant: TenantId,
  ): Promise<{ target: PoolTarget; rootfsSizeMib: number | null; alias: string | null; demand: number | null } | null> {
    const t = await deps.templates.resolve(pool.tenantId ?? poolTenant, pool.name);
    if (!t) return null;
    const buildId = await currentBuildOf(db, t.templateId);
    const shape = { vcpu: pool.vcpu, memoryMib: pool.memoryMib, diskMib: pool.diskMib };
    const grows = pool.maxSize !== null && pool.maxSize > pool.size;
    const demand = grows
      ? await recentCreates(db, { templateId: t.templateId, ...shape, tenantId: pool.tenantId, poolTenant, windowMs: deps.demandWindowMs ?? 120_000 })
      : null;
    return {
      target: { size: burstSize(pool.size, pool.maxSize, demand ?? 0), ...shape, templateId: t.templateId, buildId },
      rootfsSizeMib: t.rootfsSizeMib,
      alias: t.alias,
      demand,
    };
  }

  async function reconcilePool(name: string): Promise<void> {
    const poolTenant = await deps.poolTenant();
    const pool = await getWarmPool(db, name);
    const resolved = pool ? await targetOf(pool, poolTenant) : null;
    const target = resolved?.target ?? null;
    if (pool && target) await setWarmPoolTarget(db, name, target.templateId, target.buildId);
    const slots = await listSlots(db, name);
    if (!pool && !slots.length) return;
    const members = await slotSandboxes(db, slots.flatMap((s) => (s.sandboxId ? [s.sandboxId] : [])));
    const nodes = new Map((await deps.nodes.list(abort.signal)).map((n) => [n.id, n]));
    const binding: EnvironmentBinding = target && deps.gate === "on" && deps.templates.binding ? await deps.templates.binding(target.templateId) : { kind: "none" };
    const plan = planPool({
      target,
      slots,
      sandboxes: members,
      nodes,
      gate: deps.gate,
      binding,
      poolTenant,
      inflight: new Set(inflight.keys()),
      moving: new Set(moving.keys()),
      idle: { policy: pool?.idlePolicy ?? "running", minFreeMemoryPercent: pool?.minFreeMemoryPercent ?? 20 },
      idleSettleMs: deps.idleSettleMs ?? 10_000,
      now: now(),
      creatingTimeoutMs: CREATING_TIMEOUT_MS,
      reservationTtlMs: RESERVATION_TTL_MS,
      maxAgeMs: MAX_AGE_MS,
      maxParallelCreates: deps.maxParallelCreates ?? 4,
      refill: { quietMs: deps.refillQuietMs ?? 0, maxDeferMs: deps.refillMaxDeferMs ?? 0, shortSince: deferredSince.get(name) ?? null },
    });
    if (plan.deferred === 0) deferredSince.delete(name);
    else if (!deferredSince.has(name)) deferredSince.set(name, now());

    const errors: unknown[] = [];
    const attempt = async (what: string, fn: () => Promise<unknown>) => {
      try {
        await fn();
      } catch (e) {
        errors.push(e);
        log.warn({ err: e, pool: name, what }, "warm pool: converge step failed");
      }
    };
    for (const id of plan.forget) await attempt("forget", () => deleteSlot(db, id));
    for (const id of plan.fail) await attempt("fail", () => moveSlot(db, id, ["creating", "suspending", "resuming"], "failed", { reason: "creator gone" }));
    for (const u of plan.unreserve) await attempt("unreserve", () => moveSlot(db, u.slotId, ["reserved"], u.to, { reservedFor: null }));
    for (const m of plan.settle) await attempt("settle", () => moveSlot(db, m.slotId, [m.from], m.to));
    for (const r of plan.retire) {
      await attempt("retire", async () => {
        // Conditional: an adoption that claimed it first wins, and the member stays adopted.
        if (await moveSlot(db, r.slotId, ["ready", "suspended"], "retiring", { reason: r.reason })) {
          metrics.retired.inc({ pool: name, reason: r.reason });
          log.info({ pool: name, slot: r.slotId, reason: r.reason }, "warm member retiring");
          const s = slots.find((x) => x.id === r.slotId);
          if (s?.sandboxId) await killMember(s.sandboxId, poolTenant, `warm pool: ${r.reason}`);
          await deleteSlot(db, r.slotId);
        }
      });
    }
    for (const k of plan.kill) {
      await attempt("kill", async () => {
        if (k.sandboxId) await killMember(k.sandboxId, poolTenant, "warm pool: member left the pool");
        await deleteSlot(db, k.slotId);
      });
    }
    if (pool && resolved && plan.create > 0 && !inBackoff(name)) {
      for (let i = 0; i < plan.create; i++) {
        const slot = await insertWarmSlot(db, name, resolved.target.buildId);
        startMember(pool, resolved, slot, poolTenant);
      }
    }
    if ((idleBackoff.get(name)?.until ?? 0) <= Date.now()) {
      const room = Math.max(0, (deps.maxParallelCreates ?? 4) - plan.status.moving);
      const bySlot = new Map(slots.map((s) => [s.id, s]));
      const moves = [...plan.suspend.map((id) => ({ id, verb: "suspend" as const })), ...plan.resume.map((id) => ({ id, verb: "resume" as const }))];
      for (const m of moves.slice(0, room)) {
        const slot = bySlot.get(m.id);
        if (slot?.sandboxId) startMove(name, slot, m.verb, poolTenant);
      }
    }

    metrics.size.set({ pool: name }, plan.status.size);
    metrics.ready.set({ pool: name }, plan.status.ready);
    metrics.suspended.set({ pool: name }, plan.status.suspended);
    metrics.creating.set({ pool: name }, plan.status.creating + plan.create);
    if (pool) {
      const status = {
        ...plan.status,
        ...(resolved && resolved.demand !== null ? { demand: resolved.demand } : {}),
        ...(errors.length ? { lastError: SpaceError.from(errors[0]).message.slice(0, 300) } : {}),
      };
      if (JSON.stringify(status) !== JSON.stringify(pool.status)) await setWarmPoolStatus(db, name, status);
    } else {
      metrics.size.remove({ pool: name });
      metrics.ready.remove({ pool: name });
      metrics.suspended.remove({ pool: name });
      metrics.creating.remove({ pool: name });
    }
    if (errors.length) throw errors[0];
  }

  async function killMember(sandboxId: string, poolTenant: TenantId, reason: string): Promise<void> {
    try {
      await sandboxes.kill(poolTenant, sandboxId, reason);
    } catch (e) {
      if (e instanceof SpaceError && e.code === "not_found") return; // already gone (or no longer the pool's)
      throw e;
    }
  }

  function startMember(pool: WarmPool, resolved: NonNullable<Awaited<ReturnType<typeof targetOf>>>, slot: WarmSlot, poolTenant: TenantId): void {
    const t0 = performance.now();
    const p = (async () => {
      try {
        const rec = await sandboxes.create(
          poolTenant,
          {
            template: resolved.target.templateId,
            resolvedTemplate: { templateId: resolved.target.templateId, alias: resolved.alias, rootfsSizeMib: resolved.rootfsSizeMib },
            metadata: { [WARM_POOL_METADATA_KEY]: pool.name },
            envVars: {},
            timeoutSec: MAX_TIMEOUT_SEC,
            // A token of its own, which a secure adopter keeps (adoption.ts): no envd call to set one.
            secure: true,
            allowInternetAccess: true,
            network: null,
            onTimeout: "kill",
            autoResume: false,
            resources: { vcpu: pool.vcpu, memoryMib: pool.memoryMib, diskMib: pool.diskMib },
            placement: {},
            adopt: false,
            background: true,
          },
          abort.signal,
        );
        if (rec.nodeId) await deps.warmer?.warm({ sandboxId: rec.id, nodeId: rec.nodeId }, rec.envdAccessToken, abort.signal);
        if (!(await moveSlot(db, slot.id, ["creating"], "ready", { sandboxId: rec.id, nodeId: rec.nodeId ?? undefined }))) {
          // The slot was failed or removed meanwhile: the member has no pool.
          await killMember(rec.id, poolTenant, "warm pool: slot gone during create");
          await deleteSlot(db, slot.id);
          return;
        }
        metrics.refillSeconds.observe({ pool: pool.name }, (performance.now() - t0) / 1000);
        backoff.delete(pool.name);
      } catch (e) {
        const err = SpaceError.from(e);
        log.warn({ pool: pool.name, slot: slot.id, code: err.code, err: e }, "warm member create failed");
        await moveSlot(db, slot.id, ["creating"], "failed", { reason: `${err.code}: ${err.message}`.slice(0, 500) }).catch(() => undefined);
        const prev = backoff.get(pool.name)?.delayMs ?? 500;
        const delayMs = Math.min(prev * 2, 60_000);
        backoff.set(pool.name, { until: Date.now() + delayMs, delayMs });
      } finally {
        inflight.delete(slot.id);
      }
    })();
    inflight.set(slot.id, p);
  }

  /**
   * ready → suspending → suspended, or suspended → resuming → ready. The first move is
   * conditional: an adoption that claimed the member first wins and nothing happens. A
   * failed suspend leaves the member as the service left its sandbox (running: ready
   * again; else it leaves the pool); a failed resume (restore) takes it out of the pool,
   * and a fresh member replaces it.
   */
  function startMove(pool: string, slot: WarmSlot, verb: "suspend" | "resume", poolTenant: TenantId): void {
    const sandboxId = slot.sandboxId!;
    const [from, via, to] = verb === "suspend" ? (["ready", "suspending", "suspended"] as const) : (["suspended", "resuming", "ready"] as const);
    const p = (async () => {
      try {
        if (!(await moveSlot(db, slot.id, [from], via))) return;
        const t0 = performance.now();
        try {
          if (verb === "suspend") await sandboxes.suspend(poolTenant, sandboxId, { upload: false });
          else await sandboxes.connect(poolTenant, sandboxId, undefined);
        } catch (e) {
          const err = SpaceError.from(e);
          const now = await sandboxes.repo.getById(sandboxId as SandboxId);
          const back = verb === "suspend" && now?.state === "running";
          await moveSlot(db, slot.id, [via], back ? from : "failed", back ? {} : { reason: `${verb}: ${err.code}: ${err.message}`.slice(0, 500) });
          if (!back) metrics.retired.inc({ pool, reason: `${verb}_failed` });
          log.warn({ pool, slot: slot.id, sandboxId, code: err.code, err: e }, `warm member ${verb} failed`);
          const delayMs = Math.min((idleBackoff.get(pool)?.delayMs ?? 1000) * 2, 60_000);
          idleBackoff.set(pool, { until: Date.now() + delayMs, delayMs });
          return;
        }
        if (!(await moveSlot(db, slot.id, [via], to))) {
          // Retired or failed meanwhile: the next pass kills what is left of it.
          log.info({ pool, slot: slot.id, sandboxId }, `warm member ${verb} finished after its slot moved on`);
          return;
        }
        idleBackoff.delete(pool);
        log.info({ pool, slot: slot.id, sandboxId, ms: Math.round(performance.now() - t0) }, verb === "suspend" ? "warm member suspended" : "warm member resumed");
      } catch (e) {
        log.warn({ pool, slot: slot.id, sandboxId, err: e }, `warm member ${verb}: slot update failed`);
      } finally {
        moving.delete(slot.id);
      }
    })();
    moving.set(slot.id, p);
  }

  const inBackoff = (name: string) => (backoff.get(name)?.until ?? 0) > Date.now();

  async function reconcileAll(): Promise<void> {
    await applyConfig();
    const names = new Set([...(await listWarmPools(db)).map((p) => p.name), ...(await slotPoolNames(db))]);
    for (const name of names) {
      try {
        await reconcilePool(name);
      } catch (e) {
        log.warn({ err: e, pool: name }, "warm pool reconcile failed; retrying");
      }
    }
    if (Date.now() - lastOrphanSweep > 60_000) {
      lastOrphanSweep = Date.now();
      const poolTenant = await deps.poolTenant();
      for (const id of await orphanMembers(db, poolTenant, ORPHAN_AFTER_MS)) {
        log.warn({ sandboxId: id }, "warm pool: killing an orphaned member (no slot)");
        await killMember(id as SandboxId, poolTenant, "warm pool: orphaned member").catch(() => undefined);
      }
    }
  }

  let stopped = false;
  let timer: NodeJS.Timeout | null = null;
  let running: Promise<void> = Promise.resolve();
  const tick = () => {
    if (stopped) return;
    running = reconcileAll()
      .catch((e: unknown) => log.warn({ err: e }, "warm pools: pass failed"))
      .finally(() => {
        if (!stopped) timer = setTimeout(tick, deps.intervalMs ?? 500);
      });
  };

  return {
    reconcileAll,
    reconcilePool,
    async settle() {
      while (inflight.size || moving.size) await Promise.allSettled([...inflight.values(), ...moving.values()]);
    },
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      await running;
      abort.abort();
      await Promise.allSettled([...inflight.values(), ...moving.values()]);
    },
    ...{ start: tick },
  } as WarmPoolReconciler & { start(): void };
}

/** The leader loop: a pass every `intervalMs`. */
export function startWarmPoolReconciler(deps: WarmPoolReconcilerDeps): WarmPoolReconciler {
  const r = createWarmPoolReconciler(deps) as WarmPoolReconciler & { start(): void };
  r.start();
  return r;
}
