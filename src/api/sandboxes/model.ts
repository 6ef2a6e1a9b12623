/**
 * The sandbox as the service layer sees it (shared by ECW and the Native API), and the
 * ports it needs from storage. `queries.ts` implements the ports over the store's Db;
 * tests use the in-memory double in `memory-repo.ts`.
 */
import type { SandboxId, TenantId } from "../../core/ids.ts";

/**
 * Desired/observed lifecycle of a sandbox row.
 * - creating: row written, node not yet confirmed
 * - running: envd answered on the node
 * - paused: frozen in memory on its node (resident pause)
 * - suspended: checkpointed to storage, no node (ECW "paused")
 * - killed: ended by a caller or its timeout (terminal)
 * - failed: create failed; everything it held was released (terminal)
 */
export const sandboxStates = ["creating", "running", "paused", "suspended", "killed", "failed"] as const;
export type SandboxState = (typeof sandboxStates)[number];

export const transitions = {
  creating: ["running", "failed", "killed"],
  running: ["paused", "suspended", "killed"],
  paused: ["running", "suspended", "killed"],
  suspended: ["running", "killed"],
  killed: [],
  failed: [],
} as const satisfies Record<SandboxState, readonly SandboxState[]>;

export const isLive = (s: SandboxState) => s === "creating" || s === "running" || s === "paused" || s === "suspended";

/** E2B network config (stored as given; the node applies what it supports). */
export interface NetworkPolicy {
  allowOut?: string[];
  denyOut?: string[];
  allowPublicTraffic?: boolean;
  maskRequestHost?: string;
  httpsPorts?: number[];
  rules?: unknown;
  egressProxy?: unknown;
}

export type OnTimeout = "kill" | "pause";

export interface SandboxRecord {
  id: SandboxId;
  tenantId: TenantId;
  /** Resolved template id (never an alias). */
  templateId: string;
  /** The alias the caller used, if any. */
  alias: string | null;
  state: SandboxState;
  nodeId: string | null;
  executionId: string | null;
  address: string | null;
  vcpu: number;
  memoryMib: number;
  diskMib: number;
  metadata: Record<string, string>;
  envdAccessToken: string | null;
  trafficAccessToken: string | null;
  allowInternetAccess: boolean;
  network: NetworkPolicy | null;
  onTimeout: OnTimeout;
  autoResume: boolean;
  createdAt: Date;
  startedAt: Date;
  endAt: Date;
  /** Why it failed/ended, for operators. */
  reason: string | null;
}

export interface ListQuery {
  states: readonly SandboxState[];
  metadata: Record<string, string>;
  templateId?: string;
  startedAfter?: Date;
  order: "asc" | "desc";
  limit: number;
  /** Opaque cursor from a previous page. */
  cursor?: string;
}

export interface ListPage {
  items: SandboxRecord[];
  /** Present when more items may follow. */
  cursor: string | null;
}

export type SandboxPatch = Partial<
  Pick<SandboxRecord, "nodeId" | "executionId" | "address" | "endAt" | "startedAt" | "network" | "allowInternetAccess" | "reason">
>;

export interface SandboxRepo {
  insert(rec: SandboxRecord): Promise<void>;
  /** Scoped to a tenant: another tenant's sandbox is null. */
  get(tenantId: TenantId, id: SandboxId): Promise<SandboxRecord | null>;
  /** Unscoped (gateway, controller). */
  getById(id: SandboxId): Promise<SandboxRecord | null>;
  list(tenantId: TenantId, q: ListQuery): Promise<ListPage>;
  /** Changes state only if it is one of `from`; null when it was not (lost a race). */
  transition(id: SandboxId, from: readonly SandboxState[], to: SandboxState, patch?: SandboxPatch): Promise<SandboxRecord | null>;
  /** Patches fields of a live sandbox; null if absent. */
  update(id: SandboxId, patch: SandboxPatch): Promise<SandboxRecord | null>;
  /** Live sandboxes whose end time is at or before `now`, oldest first. */
  listExpired(now: Date, limit: number): Promise<SandboxRecord[]>;
  /** The earliest end time among running/paused sandboxes (to sleep until). */
  nextEndAt(): Promise<Date | null>;
  /** Running sandboxes that carry an envd access token (signed-URL routing). */
  listRunningSecure(): Promise<SandboxRecord[]>;
}

export interface ResolvedTemplate {
  templateId: string;
  alias: string | null;
  /** Recorded rootfs size, when the build recorded it. */
  rootfsSizeMib: number | null;
}

export interface TemplateResolver {
  /** By id or alias, visible to the tenant (own or public); null if none. */
  resolve(tenantId: TenantId, idOrAlias: string): Promise<ResolvedTemplate | null>;
}

export interface ApiKeyAuth {
  /** The tenant owning this raw API key, or null. Implementations compare hashes. */
  tenantForApiKey(rawKey: string): Promise<TenantId | null>;
}
