/**
 * Prometheus metrics: one registry per process, and the families several folders
 * observe. Every name follows `space_<area>_<thing>_<unit>` (docs/metrics.md lists them
 * all). Families are created once per registry (`space up` runs api, controller and node
 * on one); code built without a registry (unit tests) gets unregistered ones, so an
 * observe() is always a plain call and never a branch on the hot path.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";

/** One registry per process; every component registers its metrics on it. */
export function createMetricsRegistry(processName: string): Registry {
  const registry = new Registry();
  registry.setDefaultLabels({ process: processName });
  collectDefaultMetrics({ register: registry });
  return registry;
}

/** Whether `authorization` carries SPACE_METRICS_TOKEN (always, when none is configured): every `/metrics` (API, controller, node). */
export function metricsAllowed(token: string | undefined, authorization: string | undefined): boolean {
  if (!token) return true;
  const digest = (v: string) => createHash("sha256").update(v).digest();
  return timingSafeEqual(digest(authorization ?? ""), digest(`Bearer ${token}`));
}

/** Latency buckets (seconds) for sandbox lifecycle steps: a warm adoption (ms) to a cold restore (tens of s). */
export const LIFECYCLE_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120];

/** How a create was served: `cold` boots the template, `warm` adopts a pool member, `restore` restores a named snapshot. */
export type CreatePath = "cold" | "warm" | "restore";
/** `resident` freezes on the node (runc pause), `suspend` checkpoints to a snapshot. */
export type PausePath = "resident" | "suspend";
/** `resident` thaws on the node, `restore` restores a suspend snapshot. */
export type ResumePath = "resident" | "restore";

/** The sandbox lifecycle as the control plane sees it (sandboxes/). */
export interface SandboxLifecycleMetrics {
  createSeconds: Histogram<"path">;
  /** Failed creates by SpaceError code (invalid_argument, not_found, resource_exhausted, …). */
  createFailures: Counter<"reason">;
  pauseSeconds: Histogram<"path">;
  resumeSeconds: Histogram<"path">;
  forkSeconds: Histogram;
}

/** Native operations (controller/dispatcher.ts). */
export interface OperationMetrics {
  claims: Counter<"kind">;
  finished: Counter<"kind" | "result">;
}

/** Template builds (templates/build-coordinator.ts). */
export interface BuildMetrics {
  buildSeconds: Histogram<"result">;
  /** Build steps by whether a node's layer cache served them. */
  cacheSteps: Counter<"result">;
  /** Image blob bytes registry-image builds fetched (the layout shares blobs by digest: a known layer costs 0). */
  registryPulledBytes: Counter;
}

/** The sandbox gateway (api/gateway). */
export interface GatewayMetrics {
  requests: Counter<"route" | "status">;
  bytes: Counter<"route" | "direction">;
}

export interface SpaceMetrics {
  sandboxes: SandboxLifecycleMetrics;
  operations: OperationMetrics;
  builds: BuildMetrics;
  gateway: GatewayMetrics;
}

/** The shared families on `registry` (idempotent per registry); none = unregistered (tests). */
export function spaceMetrics(registry?: Registry): SpaceMetrics {
  const cached = registry && byRegistry.get(registry);
  if (cached) return cached;
  const registers = registry ? [registry] : [];
  const m: SpaceMetrics = {
    sandboxes: {
      createSeconds: new Histogram({
        name: "space_sandbox_create_seconds",
        help: "Sandbox creates that succeeded, request to running, by path (cold, warm, restore)",
        labelNames: ["path"],
        buckets: LIFECYCLE_BUCKETS,
        registers,
      }),
      createFailures: new Counter({
        name: "space_sandbox_create_failures_total",
        help: "Sandbox creates that failed, by reason code",
        labelNames: ["reason"],
        registers,
      }),
      pauseSeconds: new Histogram({
        name: "space_sandbox_pause_seconds",
        help: "Sandbox pauses that succeeded, by path (resident, suspend)",
        labelNames: ["path"],
        buckets: LIFECYCLE_BUCKETS,
        registers,
      }),
      resumeSeconds: new Histogram({
        name: "space_sandbox_resume_seconds",
        help: "Sandbox resumes that succeeded, by path (resident, restore)",
        labelNames: ["path"],
        buckets: LIFECYCLE_BUCKETS,
        registers,
      }),
      forkSeconds: new Histogram({
        name: "space_sandbox_fork_seconds",
        help: "Sandbox forks that succeeded (capture plus every copy's restore)",
        buckets: LIFECYCLE_BUCKETS,
        registers,
      }),
    },
    operations: {
      claims: new Counter({ name: "space_operation_claims_total", help: "Operations claimed by the dispatcher, by kind", labelNames: ["kind"], registers }),
      finished: new Counter({
        name: "space_operation_finished_total",
        help: "Operations the dispatcher finished, by kind and result (succeeded, failed, retried)",
        labelNames: ["kind", "result"],
        registers,
      }),
    },
    builds: {
      buildSeconds: new Histogram({
        name: "space_template_build_seconds",
        help: "Template builds, start to end, by result (ready, failed)",
        labelNames: ["result"],
        buckets: [1, 5, 10, 30, 60, 120, 300, 600, 1200, 3600],
        registers,
      }),
      cacheSteps: new Counter({
        name: "space_template_build_cache_steps_total",
        help: "Template build steps by layer cache result (hit, miss)",
        labelNames: ["result"],
        registers,
      }),
      registryPulledBytes: new Counter({
        name: "space_registry_pulled_bytes_total",
        help: "Bytes of image blobs template builds fetched from registries (layers a node already holds, by digest, are not fetched again)",
        registers,
      }),
    },
    gateway: {
      requests: new Counter({
        name: "space_gateway_requests_total",
        help: "Gateway requests by route class (envd, port) and status",
        labelNames: ["route", "status"],
        registers,
      }),
      bytes: new Counter({
        name: "space_gateway_bytes_total",
        help: "Gateway body bytes by route class and direction (in = client to sandbox, out = sandbox to client)",
        labelNames: ["route", "direction"],
        registers,
      }),
    },
  };
  if (registry) byRegistry.set(registry, m);
  return m;
}

const byRegistry = new WeakMap<Registry, SpaceMetrics>();

/** A gauge whose values are read at scrape time (a store query, a node's own state); errors leave it empty. */
export function scrapedGauge<L extends string>(
  registry: Registry,
  name: string,
  help: string,
  labelNames: readonly L[],
  read: () => Promise<ReadonlyArray<{ labels: Record<L, string>; value: number }>> | ReadonlyArray<{ labels: Record<L, string>; value: number }>,
): Gauge<L> {
  const existing = registry.getSingleMetric(name);
  if (existing) return existing as Gauge<L>;
  return new Gauge<L>({
    name,
    help,
    labelNames,
    registers: [registry],
    async collect() {
      this.reset();
      try {
        for (const r of await read()) this.set(r.labels, r.value);
      } catch {
        // A scrape must answer; a failed read shows as a missing series, not a 500.
      }
    },
  });
}

/**
 * `read` shared by every family of one scrape: prom-client calls each family's collect()
 * in one synchronous pass, so a result kept until the next macrotask serves exactly that
 * scrape (a time-based cache would hand a later scrape stale values).
 */
export function perScrape<T>(read: () => Promise<T>): () => Promise<T> {
  let current: Promise<T> | undefined;
  return () => {
    if (!current) {
      current = read();
      setImmediate(() => (current = undefined));
    }
    return current;
  };
}

/** Seconds since `startMs` (performance.now() based, like the histograms' own timers). */
export function secondsSince(startMs: number): number {
  return (performance.now() - startMs) / 1000;
}
