import { Registry, collectDefaultMetrics } from "prom-client";

/** One registry per process; every component registers its metrics on it. */
export function createMetricsRegistry(processName: string): Registry {
  const registry = new Registry();
  registry.setDefaultLabels({ process: processName });
  collectDefaultMetrics({ register: registry });
  return registry;
}
