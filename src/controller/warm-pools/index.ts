/**
 * Warm pools (issue 10): wiring for a control-plane process. `createWarmPoolAdoption` is
 * the adopter the shared SandboxService is built with (every process that serves creates);
 * `warmPoolLoop` is the leader's reconciler (src/cli/controller.ts). Both take a
 * `WarmPoolHost`, which the cli's ControlPlane is.
 */
import type { Registry } from "prom-client";
import type { Config } from "../../core/config.ts";
import type { QuotaLimits } from "../../store/tenant-quotas.ts";
import type { Logger } from "../../core/log.ts";
import type { Db } from "../../store/db.ts";
import type { SandboxLayer } from "../../sandboxes/index.ts";
import type { WarmMembers } from "../../sandboxes/warm-adopter.ts";
import type { IdlePolicy } from "../../store/warm-pools.ts";
import { WarmPoolAdoption } from "./adoption.ts";
import { parseWarmPoolsConfig } from "./config.ts";
import { warmPoolMetrics } from "./metrics.ts";
import { startWarmPoolReconciler, type WarmPoolReconciler } from "./reconciler.ts";
import { EnvdWarmer } from "./warm-up.ts";

export { WarmPoolAdoption, POOL_TENANT_NAME, WARM_POOL_METADATA_KEY, checkMember } from "./adoption.ts";
export { createWarmPoolReconciler, startWarmPoolReconciler } from "./reconciler.ts";
export { parseWarmPoolsConfig } from "./config.ts";
export { warmPoolMetrics } from "./metrics.ts";

type WarmPoolConfig = Pick<
  Config,
  | "SPACE_DEFAULT_VCPU"
  | "SPACE_DEFAULT_MEMORY_MIB"
  | "SPACE_DEFAULT_DISK_MIB"
  | "SPACE_WARM_POOL_IDLE_POLICY"
  | "SPACE_WARM_POOL_MIN_FREE_MEMORY_PERCENT"
  | "SPACE_WARM_POOL_REFILL_QUIET_MS"
  | "SPACE_WARM_POOL_REFILL_MAX_DEFER_MS"
  | "SPACE_WARM_POOL_DEMAND_WINDOW_S"
  | "SPACE_ENVIRONMENT_PLACEMENT_GATE"
  | "SPACE_WARM_POOLS"
  | "SPACE_NODE_HEARTBEAT_MS"
>;

/** What warm pools need from the process that runs them. */
export interface WarmPoolHost {
  config: WarmPoolConfig;
  log: Logger;
  metrics: Registry;
  db: Db;
  layer: Pick<SandboxLayer, "sandboxes" | "templates" | "nodes">;
  warmPools: WarmPoolAdoption;
}

/** The shape a pool gets for what its spec leaves out: a create asking for none, and the configured idle policy. */
export function warmPoolDefaults(c: WarmPoolConfig): { vcpu: number; memoryMib: number; diskMib: number; idlePolicy: IdlePolicy; minFreeMemoryPercent: number } {
  return {
    vcpu: c.SPACE_DEFAULT_VCPU,
    memoryMib: c.SPACE_DEFAULT_MEMORY_MIB,
    diskMib: c.SPACE_DEFAULT_DISK_MIB,
    idlePolicy: c.SPACE_WARM_POOL_IDLE_POLICY,
    minFreeMemoryPercent: c.SPACE_WARM_POOL_MIN_FREE_MEMORY_PERCENT,
  };
}

/**
 * Adoption for a control plane's sandbox service, built with it (src/cli/processes.ts):
 * every process that serves creates adopts warm members.
 */
export function createWarmPoolAdoption(
  cp: Pick<WarmPoolHost, "db" | "config" | "metrics" | "log"> & { quotas?: QuotaLimits },
  members: WarmMembers,
  layer: Pick<SandboxLayer, "nodes" | "templates">,
): WarmPoolAdoption {
  return new WarmPoolAdoption({
    db: cp.db,
    sandboxes: members,
    nodes: layer.nodes,
    templates: layer.templates,
    gate: cp.config.SPACE_ENVIRONMENT_PLACEMENT_GATE,
    metrics: warmPoolMetrics(cp.metrics),
    log: cp.log.child({ component: "warm-pools" }),
    ...(cp.quotas ? { quotas: cp.quotas } : {}),
  });
}

/** The leader loop (controllerLoops). */
export function warmPoolLoop(cp: WarmPoolHost): WarmPoolReconciler {
  const adoption = cp.warmPools;
  const log = cp.log.child({ component: "warm-pools" });
  const c = cp.config;
  return startWarmPoolReconciler({
    db: cp.db,
    sandboxes: cp.layer.sandboxes,
    templates: cp.layer.templates,
    nodes: cp.layer.nodes,
    gate: cp.config.SPACE_ENVIRONMENT_PLACEMENT_GATE,
    metrics: warmPoolMetrics(cp.metrics),
    log,
    warmer: new EnvdWarmer(cp.layer.sandboxes.substrate, log),
    poolTenant: () => adoption.poolTenant(),
    configPools: parseWarmPoolsConfig(c.SPACE_WARM_POOLS, warmPoolDefaults(c)),
    // Published memory is as old as the last heartbeat: judge a node only after a couple.
    idleSettleMs: 2 * c.SPACE_NODE_HEARTBEAT_MS + 1000,
    refillQuietMs: c.SPACE_WARM_POOL_REFILL_QUIET_MS,
    refillMaxDeferMs: c.SPACE_WARM_POOL_REFILL_MAX_DEFER_MS,
    demandWindowMs: c.SPACE_WARM_POOL_DEMAND_WINDOW_S * 1000,
  });
}
