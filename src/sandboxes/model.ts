/**
 * The sandbox as the service layer sees it (shared by ECW and the Native API), and the
 * ports it needs from storage. `queries.ts` implements the ports over the store's Db;
 * tests use the in-memory double in `memory-repo.ts`.
 */
import type { SandboxId, TenantId } from "../core/ids.ts";
import type { EgressPolicy } from "../contract/egress-policy.ts";
import type { EnvironmentBinding } from "../substrate/placement.ts";
import type { SnapshotKind } from "../substrate/substrate.ts";

/**
 * The lifecycle states are the store's (src/store/sandboxes.ts, with its transition
 * table). The service uses: creating → running | failed; live → killing → killed.
 */
import { canTransition, sandboxStates, transitions, type SandboxState } from "../store/sandboxes.ts";
export type { SandboxState };

/** States that no longer serve anything: the sandbox is gone for callers (404). */
export const endedStates: readonly SandboxState[] = ["killing", "killed", "failed"];
export const isLive = (s: SandboxState) => !endedStates.includes(s);
/** Every live state from which the store allows a move to `killing`. */
export const killableStates: readonly SandboxState[] = sandboxStates.filter((s) => isLive(s) && canTransition(s, "killing"));
/** The two ways a running sandbox pauses: frozen in memory, or checkpointed. */
const pauseSteps = ["pausing", "suspending"] as const satisfies readonly SandboxState[];
/**
 * States in which ECW `pause` answers 409 "already paused": a pause step, or where one
 * lands (a live state it moves to, other than back to running).
 */
export const pausedStates: readonly SandboxState[] = [
  ...pauseSteps,
  ...pauseSteps.flatMap((p) => transitions[p].filter((s) => s !== "running" && isLive(s))),
];

/** E2B network config (stored as given; the node applies what it supports). */
export interface NetworkPolicy {
  allowOut?: string[];
  denyOut?: string[];
  allowPublicTraffic?: boolean;
  maskRequestHost?: string;
  httpsPorts?: number[];
  rules?: unknown;
  egressProxy?: unknown;
  /** Native policy v1, compiled (src/sandboxes/egress-rules.ts); replaces allowOut/denyOut when present. */
  spacePolicy?: EgressPolicy;
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
  /** Secrets: never log. Kept so a restore re-initialises envd with them. */
  envVars?: Record<string, string>;
  envdAccessToken: string | null;
  trafficAccessToken: string | null;
  allowInternetAccess: boolean;
  network: NetworkPolicy | null;
  onTimeout: OnTimeout;
  /** What a timeout pause keeps (`onTimeout: "pause"`); absent = `full` (memory and disk). */
  pauseKind?: SnapshotKind;
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
  /** At or after (>=). */
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
  /** The execution environment creates from this template are bound to (absent = unbound). */
  binding?(templateId: string): Promise<EnvironmentBinding>;
}

export interface ApiKeyAuth {
  /** The tenant owning this raw API key, or null. Implementations compare hashes. */
  tenantForApiKey(rawKey: string): Promise<TenantId | null>;
}
