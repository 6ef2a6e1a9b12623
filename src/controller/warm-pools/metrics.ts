/**
 * Warm-pool metrics on the process registry. Gauges are set by the reconciler (leader);
 * adoptions and misses are counted where creates run (the API process; in `space up`
 * both share one registry).
 */
import { Counter, Gauge, Histogram, type Registry } from "prom-client";

export interface WarmPoolMetrics {
  /** Target size per pool. */
  size: Gauge<"pool">;
  /** Running members ready to adopt. */
  ready: Gauge<"pool">;
  /** Suspended members (idle policy; adopted after a restore on their node). */
  suspended: Gauge<"pool">;
  /** Members being created (refills in flight). */
  creating: Gauge<"pool">;
  adoptions: Counter<"pool">;
  /** A create matched a pool but got no member (empty, or every member refused). */
  misses: Counter<"pool" | "reason">;
  /** Members that left the pool without adoption, by reason (build_changed, environment_not_usable, …). */
  retired: Counter<"pool" | "reason">;
  /** Refill latency: slot inserted → member running and ready. */
  refillSeconds: Histogram<"pool">;
  /** Adoption latency: claim → personalised and handed over. */
  adoptSeconds: Histogram<"pool">;
}

/** Idempotent per registry (the API and the controller of `space up` share one). */
export function warmPoolMetrics(registry: Registry): WarmPoolMetrics {
  const cached = byRegistry.get(registry);
  if (cached) return cached;
  const m: WarmPoolMetrics = {
    size: new Gauge({ name: "space_warm_pool_size", help: "Target size of each warm pool", labelNames: ["pool"], registers: [registry] }),
    ready: new Gauge({ name: "space_warm_pool_ready", help: "Running warm pool members ready to adopt", labelNames: ["pool"], registers: [registry] }),
    suspended: new Gauge({
      name: "space_warm_pool_suspended",
      help: "Suspended warm pool members (restored on their node when adopted)",
      labelNames: ["pool"],
      registers: [registry],
    }),
    creating: new Gauge({ name: "space_warm_pool_creating", help: "Warm pool members being created", labelNames: ["pool"], registers: [registry] }),
    adoptions: new Counter({ name: "space_warm_pool_adoptions_total", help: "Creates served by adopting a warm member", labelNames: ["pool"], registers: [registry] }),
    misses: new Counter({
      name: "space_warm_pool_misses_total",
      help: "Creates matching a warm pool that fell back to a cold create",
      labelNames: ["pool", "reason"],
      registers: [registry],
    }),
    retired: new Counter({
      name: "space_warm_pool_retired_total",
      help: "Warm members that left their pool without adoption, by reason",
      labelNames: ["pool", "reason"],
      registers: [registry],
    }),
    refillSeconds: new Histogram({
      name: "space_warm_pool_refill_seconds",
      help: "Time to create one warm member (slot to ready)",
      labelNames: ["pool"],
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60],
      registers: [registry],
    }),
    adoptSeconds: new Histogram({
      name: "space_warm_pool_adopt_seconds",
      help: "Time to claim and personalise a warm member",
      labelNames: ["pool"],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
      registers: [registry],
    }),
  };
  byRegistry.set(registry, m);
  return m;
}

const byRegistry = new WeakMap<Registry, WarmPoolMetrics>();
