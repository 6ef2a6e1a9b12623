/**
 * The wire between the control plane and a node agent (node-api). One schema per body;
 * both sides import these (snapshot-descriptor.ts and node-builds.ts add their routes).
 * Every call carries `Authorization: Bearer <internal token>`. Errors are
 * `{ code: ErrorCode, message }` with the status from core/errors httpStatus.
 *
 *   GET    /health                              → NodeHealth
 *   GET    /v1/inventory                        → NodeInventory
 *   POST   /v1/sandboxes                        SandboxSpec → SandboxStatus (after envd is healthy)
 *   GET    /v1/sandboxes                        → { sandboxes: SandboxStatus[] }
 *   GET    /v1/sandboxes/:id                    → SandboxStatus
 *   POST   /v1/sandboxes/:id/pause|resume|stop|start → SandboxStatus
 *   POST   /v1/sandboxes/:id/init               SandboxInit → SandboxStatus (env, token re-applied to envd; back to normal CPU priority)
 *   DELETE /v1/sandboxes/:id                    → 204 (absent = ok)
 *   GET    /v1/sandboxes/:id/metrics            → SandboxMetrics (a sample taken now)
 *   GET    /v1/sandboxes/:id/metrics/history    ?startMs&endMs → SandboxMetricsHistory (sampled every SPACE_METRICS_INTERVAL_MS)
 *   GET    /v1/sandboxes/:id/logs               ?cursor&direction&level&search&limit → SandboxLogs (sandbox-logs.ts)
 *   ANY    /v1/sandboxes/:id/proxy/:port/<path> → raw HTTP proxied to the sandbox's <port> (envd is 49983)
 *   POST   /v1/sandboxes/:id/egress             SandboxEgress → SandboxStatus (replaces the egress policy)
 *
 * On the proxy the token may come in `X-Space-Node-Token` instead, so the user's own
 * `Authorization` header reaches the sandbox untouched (a Bearer token is stripped).
 */
import { z } from "zod";
import { EgressPolicy } from "./egress-policy.ts";
import { SpecVolume } from "./volume-wire.ts";

export { NetworkRecord } from "./egress-policy.ts";

export const ENVD_PORT = 49983;

/** Alternative header for the internal token (proxy calls that carry their own Authorization). */
export const NODE_TOKEN_HEADER = "x-space-node-token";

/** A sandbox id as the control plane makes them (core/ids.ts). */
export const SandboxIdWire = z.string().regex(/^[a-z0-9]{20}$/, "a sandbox id");

export const SandboxSpec = z
  .object({
    sandboxId: SandboxIdWire,
    executionId: z.string().min(1),
    template: z.string().min(1).default("base"),
    vcpu: z.number().int().positive(),
    memoryMib: z.number().int().min(64),
    diskMib: z.number().int().min(64),
    envVars: z.record(z.string(), z.string()).default({}),
    /** envd's X-Access-Token when the sandbox is secure. */
    accessToken: z.string().optional(),
    /** Egress: false = deny all outbound (refined by the network-policy issue). */
    allowInternetAccess: z.boolean().default(true),
    /** The compiled egress policy (src/sandboxes/egress-rules.ts); when present it replaces allowInternetAccess. */
    network: EgressPolicy.optional(),
    /**
     * Nobody waits for it (a warm pool member): booted at low CPU priority so creates and
     * commands someone waits for win the node's CPU; `init` (adoption) restores it.
     */
    background: z.boolean().optional(),
    /** Volumes bind-mounted into it (volume-wire.ts); the node makes one it does not have yet. */
    volumes: z.array(SpecVolume).optional(),
  })
  .strict();
export type SandboxSpec = z.infer<typeof SandboxSpec>;

export const SandboxInit = z
  .object({
    envVars: z.record(z.string(), z.string()).optional(),
    accessToken: z.string().optional(),
  })
  .strict();
export type SandboxInit = z.infer<typeof SandboxInit>;

export const SandboxEgress = z.object({ allowInternetAccess: z.boolean(), policy: EgressPolicy.optional() }).strict();
export type SandboxEgress = z.infer<typeof SandboxEgress>;

export const NodeSandboxState = z.enum(["running", "paused", "stopped"]);
export type NodeSandboxState = z.infer<typeof NodeSandboxState>;

export const SandboxStatus = z.object({
  sandboxId: z.string(),
  executionId: z.string(),
  template: z.string(),
  state: NodeSandboxState,
  /** The sandbox's address in the node's slot range. */
  address: z.string(),
  vcpu: z.number(),
  memoryMib: z.number(),
  diskMib: z.number(),
  startedAt: z.string(),
  /** Milliseconds from request to envd healthy, with its parts (for benchmarks). */
  timings: z.record(z.string(), z.number()).optional(),
});
export type SandboxStatus = z.infer<typeof SandboxStatus>;

export const SandboxMetrics = z.object({
  timestamp: z.string(),
  cpuCount: z.number(),
  cpuUsedPct: z.number(),
  memUsed: z.number(),
  memTotal: z.number(),
  memCache: z.number(),
  diskUsed: z.number(),
  diskTotal: z.number(),
});
export type SandboxMetrics = z.infer<typeof SandboxMetrics>;

export const MetricsRangeQuery = z
  .object({ startMs: z.coerce.number().int().nonnegative().optional(), endMs: z.coerce.number().int().nonnegative().optional() })
  .strict();
export type MetricsRange = z.infer<typeof MetricsRangeQuery>;

export const SandboxMetricsHistory = z.object({ samples: z.array(SandboxMetrics) });

export const TemplateInventoryEntry = z.object({
  templateId: z.string(),
  rootfsSizeMib: z.number(),
  environment: z.string(),
});

export const NodeInventory = z.object({
  nodeId: z.string(),
  name: z.string(),
  runtime: z.string(),
  capacity: z.object({
    networkSlots: z.number(),
    vcpu: z.number(),
    memoryMib: z.number(),
    diskMib: z.number(),
  }),
  used: z.object({
    networkSlots: z.number(),
    vcpu: z.number(),
    memoryMib: z.number(),
    diskMib: z.number(),
    sandboxes: z.number(),
    /**
     * Measured for the capacity model: sandboxes the memory measurement holds in full
     * (resident and done booting), host MemAvailable, memory PSI some avg10, what the thin
     * pool holds.
     */
    settled: z.number().optional(),
    memoryAvailableMib: z.number().optional(),
    memoryPressure: z.number().optional(),
    diskHeldMib: z.number().optional(),
  }),
  usableEnvironments: z.array(z.string()),
  templates: z.array(TemplateInventoryEntry),
});
export type NodeInventory = z.infer<typeof NodeInventory>;

export const NodeHealth = z.object({ nodeId: z.string(), status: z.enum(["ok", "degraded"]), detail: z.string().optional() });
export type NodeHealth = z.infer<typeof NodeHealth>;

export const NodeError = z.object({ code: z.string(), message: z.string() });
