/**
 * Warm pools (issue 10): wiring for a control-plane process. `createWarmPoolAdoption` is
 * the adopter the shared SandboxService is built with (every process that serves creates);
 * `warmPoolLoop` is the leader's reconciler (src/cli/controller.ts).
 */
import type { ControlPlane } from "../../cli/processes.ts";
import type { SandboxLayer } from "../../sandboxes/index.ts";
import type { WarmMembers } from "../../sandboxes/warm-adopter.ts";
import { NodeApiPersonaliser, WarmPoolAdoption } from "./adoption.ts";
import { parseWarmPoolsConfig } from "./config.ts";
import { warmPoolMetrics } from "./metrics.ts";
import { startWarmPoolReconciler, type WarmPoolReconciler } from "./reconciler.ts";
import { EnvdWarmer } from "./warm-up.ts";

export { WarmPoolAdoption, NodeApiPersonaliser, POOL_TENANT_NAME, WARM_POOL_METADATA_KEY, checkMember } from "./adoption.ts";
export { createWarmPoolReconciler, startWarmPoolReconciler } from "./reconciler.ts";
export { parseWarmPoolsConfig } from "./config.ts";
export { warmPoolMetrics } from "./metrics.ts";

/**
 * Adoption for a control plane's sandbox service, built with it (src/cli/processes.ts):
 * every process that serves creates adopts warm members.
 */
export function createWarmPoolAdoption(
  cp: Pick<ControlPlane, "db" | "config" | "metrics" | "log" | "internalToken">,
  members: WarmMembers,
  layer: Pick<SandboxLayer, "nodes" | "templates">,
): WarmPoolAdoption {
  return new WarmPoolAdoption({
    db: cp.db,
    sandboxes: members,
    nodes: layer.nodes,
    templates: layer.templates,
    personaliser: new NodeApiPersonaliser(layer.nodes, cp.internalToken),
    gate: cp.config.SPACE_ENVIRONMENT_PLACEMENT_GATE,
    metrics: warmPoolMetrics(cp.metrics),
    log: cp.log.child({ component: "warm-pools" }),
  });
}

/** The leader loop (controllerLoops). */
export function warmPoolLoop(cp: ControlPlane): WarmPoolReconciler {
  const adoption = cp.warmPools;
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
