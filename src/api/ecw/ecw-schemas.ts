/**
 * ECW wire schemas (e2b-wire.md §2): one zod schema per body/query, giving validation
 * and static types. Request objects are loose (unknown fields pass, as newer SDKs add
 * fields); response builders live in ecw-present.ts.
 */
import { z } from "zod";
import { LogLevel, LOGS_PAGE_MAX } from "../../contract/envd-logs.ts";
import { LIMITS, boundedStringMap, timeoutSeconds } from "../../core/limits.ts";

/** E2B network config. `denyOut` takes IPs/CIDRs only; `allowOut` also domains. */
export const NetworkConfig = z.looseObject({
  allowOut: z.array(z.string()).optional(),
  denyOut: z.array(z.string()).optional(),
  allowPublicTraffic: z.boolean().optional(),
  maskRequestHost: z.string().optional(),
  httpsPorts: z.array(z.number().int().min(1).max(65535)).optional(),
  rules: z.unknown().optional(),
  egressProxy: z.unknown().optional(),
});
export type NetworkConfig = z.infer<typeof NetworkConfig>;

export const NewSandbox = z.looseObject({
  templateID: z.string().min(1).default("base"),
  metadata: boundedStringMap("metadata", LIMITS.metadata).optional(),
  envVars: boundedStringMap("envVars", LIMITS.envVars).optional(),
  /** Seconds. Default depends on the path (v1 15 s, v2 300 s). */
  timeout: timeoutSeconds("timeout").optional(),
  secure: z.boolean().optional(),
  allow_internet_access: z.boolean().optional(),
  network: NetworkConfig.optional(),
  autoPause: z.boolean().optional(),
  autoPauseMemory: z.boolean().optional(),
  autoResume: z.looseObject({ enabled: z.boolean() }).optional(),
  mcp: z.unknown().optional(),
  /** E2B's SandboxVolumeMount; a name ending in `:ro` mounts read-only (SPACE's extension: E2B's wire has no flag). */
  volumeMounts: z.array(z.looseObject({ name: z.string().min(1).max(70), path: z.string().min(1).max(1024) })).max(16).optional(),
});
export type NewSandbox = z.infer<typeof NewSandbox>;

/** metadata["space.resources"]: JSON `{"vcpu","memory_mib","disk_mib"}`, each optional. */
export const SpaceResources = z.strictObject({
  vcpu: z.number().optional(),
  memory_mib: z.number().optional(),
  disk_mib: z.number().optional(),
});
export const RESOURCES_METADATA_KEY = "space.resources";

export const ConnectBody = z.looseObject({ timeout: timeoutSeconds("timeout").optional(), memory: z.boolean().optional() });
export const TimeoutBody = z.looseObject({ timeout: timeoutSeconds("timeout") });
/** Keep alive at least this long more; 0 changes nothing (refreshes never shorten). */
export const RefreshBody = z.looseObject({ duration: z.number().int().min(0).max(LIMITS.timeoutSec.max).optional() });
export const PauseBody = z.looseObject({ memory: z.boolean().optional() });
export const ForkBody = z.looseObject({ timeout: timeoutSeconds("timeout").optional(), count: z.number().int().min(1).optional() });
export const SnapshotBody = z.looseObject({ name: z.string().optional() });
export const NetworkUpdateBody = NetworkConfig.extend({ allow_internet_access: z.boolean().optional() });

export const ListQuery = z.looseObject({
  metadata: z.string().optional(),
  /** Comma-joined `running,paused`; absent = both. Repeated params are accepted too. */
  state: z.union([z.string(), z.array(z.string())]).optional(),
  startedAfter: z.iso.datetime({ offset: true }).optional(),
  template: z.string().optional(),
  order: z.enum(["asc", "desc"]).default("desc"),
  limit: z.coerce.number().int().min(1).max(100).default(100),
  nextToken: z.string().optional(),
});

export const MetricsQuery = z.looseObject({
  start: z.coerce.number().int().optional(),
  end: z.coerce.number().int().optional(),
});

/** `GET /sandboxes/metrics`: comma-joined ids (repeated params too), as the SDKs send them. */
export const MetricsBatchQuery = z.looseObject({
  sandbox_ids: z.union([z.string(), z.array(z.string())]),
});

/** v1 `GET /sandboxes/{id}/logs`: `start` in ms, oldest first from it. */
export const LogsQuery = z.looseObject({
  start: z.coerce.number().int().nonnegative().optional(),
  limit: z.coerce.number().int().min(0).max(LOGS_PAGE_MAX).default(LOGS_PAGE_MAX),
});

/** v2 `GET /v2/sandboxes/{id}/logs`: `cursor` in ms; backward pages newest first from it (default now). */
export const LogsV2Query = z.looseObject({
  cursor: z.coerce.number().int().nonnegative().optional(),
  limit: z.coerce.number().int().min(0).max(LOGS_PAGE_MAX).default(LOGS_PAGE_MAX),
  direction: z.enum(["forward", "backward"]).default("forward"),
  level: z.optional(LogLevel),
  search: z.string().max(1024).optional(),
});

export const IdParams = z.object({ sandboxID: z.string().min(1).max(128) });
