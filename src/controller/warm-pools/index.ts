/**
 * Warm pools (issue 10): wiring for a control-plane process. `installWarmPools` turns on
 * adoption in the shared SandboxService (every process that serves creates);
 * `warmPoolLoop` is the leader's reconciler (src/cli/controller.ts).
 */
import type { ControlPlane } from "../../cli/processes.ts";
import { WarmPoolAdoption } from "./adoption.ts";
import { parseWarmPoolsConfig } from "./config.ts";
import { warmPoolMetrics } from "./metrics.ts";
import { startWarmPoolReconciler, type WarmPoolReconciler } from "./reconciler.ts";
import { EnvdWarmer } from "./warm-up.ts";

export { WarmPoolAdoption, POOL_TENANT_NAME, WARM_POOL_METADATA_KEY, checkMember } from "./adoption.ts";
export { createWarmPoolReconciler, startWarmPoolReconciler } from "./reconciler.ts";
export { parseWarmPoolsConfig } from "./config.ts";
export { warmPoolMetrics } from "./metrics.ts";

const adoptions = new WeakMap<ControlPlane, WarmPoolAdoption>();

/** Adoption for this process's sandbox service (idempotent per control plane). */
export function installWarmPools(cp: ControlPlane): WarmPoolAdoption {
  const existing = adoptions.get(cp);
  if (existing) return existing;
  const nodes = cp.layer.nodes;
  const adoption = new WarmPoolAdoption({
    db: cp.db,
    sandboxes: cp.layer.sandboxes,
    nodes,
    templates: cp.layer.templates,
    gate: cp.config.SPACE_ENVIRONMENT_PLACEMENT_GATE,
    metrics: warmPoolMetrics(cp.metrics),
    log: cp.log.child({ component: "warm-pools" }),
  });
  cp.layer.sandboxes.useWarmPools(adoption);
  adoptions.set(cp, adoption);
  return adoption;
}

/** The leader loop (controllerLoops). */
export function warmPoolLoop(cp: ControlPlane): WarmPoolReconciler {
  const adoption = installWarmPools(cp);
  const log = cp.log.child({ component: "warm-pools" });
  const c = cp.config;
  const defaults = {
    vcpu: c.SPACE_DEFAULT_VCPU,
    memoryMib: c.SPACE_DEFAULT_MEMORY_MIB,
    diskMib: c.SPACE_DEFAULT_DISK_MIB,
    idlePolicy: c.SPACE_WARM_POOL_IDLE_POLICY,
    minFreeMemoryPercent: c.SPACE_WARM_POOL_MIN_FREE_MEMORY_PERCENT,
  };
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
    configPools: parseWarmPoolsConfig(c.SPACE_WARM_POOLS, defaults),
    // Published memory is as old as the last heartbeat: judge a node only after a couple.
    idleSettleMs: 2 * c.SPACE_NODE_HEARTBEAT_MS + 1000,
  });
}
