/**
 * ECW wire schemas (e2b-wire.md §2): one zod schema per body/query, giving validation
 * and static types. Request objects are loose (unknown fields pass, as newer SDKs add
 * fields); response builders live in ecw-present.ts.
 */
import { z } from "zod";

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
  metadata: z.record(z.string(), z.string()).optional(),
  envVars: z.record(z.string(), z.string()).optional(),
  /** Seconds. Default depends on the path (v1 15 s, v2 300 s). */
  timeout: z.number().int().min(0).optional(),
  secure: z.boolean().optional(),
  allow_internet_access: z.boolean().optional(),
  network: NetworkConfig.optional(),
  autoPause: z.boolean().optional(),
  autoPauseMemory: z.boolean().optional(),
  autoResume: z.looseObject({ enabled: z.boolean() }).optional(),
  mcp: z.unknown().optional(),
  volumeMounts: z.array(z.unknown()).optional(),
});
export type NewSandbox = z.infer<typeof NewSandbox>;

/** metadata["space.resources"]: JSON `{"vcpu","memory_mib","disk_mib"}`, each optional. */
export const SpaceResources = z.strictObject({
  vcpu: z.number().optional(),
  memory_mib: z.number().optional(),
  disk_mib: z.number().optional(),
});
export const RESOURCES_METADATA_KEY = "space.resources";

export const ConnectBody = z.looseObject({ timeout: z.number().int().min(0).optional(), memory: z.boolean().optional() });
export const TimeoutBody = z.looseObject({ timeout: z.number().int().min(0) });
export const RefreshBody = z.looseObject({ duration: z.number().int().min(0).optional() });
export const PauseBody = z.looseObject({ memory: z.boolean().optional() });
export const ForkBody = z.looseObject({ timeout: z.number().int().min(0).optional(), count: z.number().int().min(1).optional() });
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

export const IdParams = z.object({ sandboxID: z.string().min(1).max(128) });
