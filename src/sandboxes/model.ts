/**
 * The ports the sandbox service needs from storage, over the store's one record type of
 * the sandbox row (`SandboxRecord`, src/store/sandboxes.ts). `queries.ts` implements the
 * ports over the store's Db; tests use the in-memory double in `memory-repo.ts`.
 */
import type { ExecutionId, SandboxId, TenantId } from "../core/ids.ts";
import type { EnvironmentBinding } from "../substrate/placement.ts";
import type { TemplateMatch } from "../store/template-resolution.ts";
export type { TemplateMatch };

/**
 * The lifecycle states are the store's (src/store/sandboxes.ts, with its transition
 * table). The service uses: creating → running | failed; live → killing → killed.
 */
import {
  canTransition,
  sandboxStates,
  transitions,
  type NewSandbox,
  type NetworkPolicy,
  type OnTimeout,
  type SandboxPatch,
  type SandboxRecord,
  type SandboxState,
} from "../store/sandboxes.ts";
export type { NetworkPolicy, OnTimeout, SandboxPatch, SandboxRecord, SandboxState };

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

/** When it started serving (its creation, before it first ran). */
export const startedAtOf = (r: Pick<SandboxRecord, "startedAt" | "createdAt">): Date => r.startedAt ?? r.createdAt;
/** Its end time (its creation, when none is set). */
export const endAtOf = (r: Pick<SandboxRecord, "endAt" | "createdAt">): Date => r.endAt ?? r.createdAt;
/** The network config given at create or update; null when none was (the row stores `{}`). */
export const networkOf = (r: Pick<SandboxRecord, "network">): NetworkPolicy | null => (Object.keys(r.network).length ? r.network : null);

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

/** What the service inserts: the store's new-row input, with the id chosen by the service. */
export type NewSandboxRecord = NewSandbox & { id: SandboxId };

export interface SandboxRepo {
  /** Inserts the row and its first execution (`executionId`); returns the row as stored. */
  insert(rec: NewSandboxRecord, executionId: ExecutionId): Promise<SandboxRecord>;
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
  /**
   * Refuses (`resource_exhausted`) when one more live sandbox of this shape would pass the
   * tenant's quota: a check before costly work (a fork's capture); the insert admits for
   * real. Absent = no quotas.
   */
  checkQuota?(tenantId: TenantId, shape: { vcpu: number; memoryMib: number; diskMib: number }): Promise<void>;
}


export interface TemplateResolver {
  /** By id or alias, visible to the tenant (own or public); null if none. */
  resolve(tenantId: TenantId, idOrAlias: string): Promise<TemplateMatch | null>;
  /** The execution environment creates from this template are bound to (absent = unbound). */
  binding?(templateId: string): Promise<EnvironmentBinding>;
}

export interface ApiKeyAuth {
  /** The tenant owning this raw API key, or null. Implementations compare hashes. */
  tenantForApiKey(rawKey: string): Promise<TenantId | null>;
}
