/**
 * Sandboxes: desired state + generation. Only `transitionSandbox` changes `state`; it
 * checks the `transitions` table, then updates conditionally (`state = ANY(from)`, and
 * `generation = expected` when given) and bumps `generation`. Zero rows → failed_precondition.
 */
import { SpaceError } from "../core/errors.ts";
import { newSandboxId, type NodeId, type SandboxId, type TenantId } from "../core/ids.ts";
import type { EgressPolicy } from "../contract/egress-policy.ts";
import type { Db, Queryable } from "./db.ts";
import { columns, decodeCursor, encodeCursor, isUniqueViolation, json, pageLimit, setClause } from "./sql.ts";

export const sandboxStates = [
  /** Admitted; being placed and started. */
  "creating",
  /** Running on a node. */
  "running",
  /** Being frozen in memory (cgroup freezer). */
  "pausing",
  /** Frozen in memory, still resident on its node. */
  "paused",
  /** Memory checkpoint + disk snapshot being taken; the node will be freed. */
  "suspending",
  /** Checkpointed; no node holds it. ECW `pause` ends here. */
  "suspended",
  /** Being restored (from suspended) or started again (from stopped). */
  "resuming",
  /** Processes ending; the rootfs is kept. */
  "stopping",
  /** Processes ended, rootfs kept; `start` boots it again. */
  "stopped",
  /** Being killed; data reclaimed after grace. */
  "killing",
  /** Ended for good. Terminal. */
  "killed",
  /** A step failed; only kill leaves it. */
  "failed",
] as const;
export type SandboxState = (typeof sandboxStates)[number];

/** Allowed moves. Every mutation of `state` goes through this table. */
export const transitions = {
  creating: ["running", "failed", "killing"],
  running: ["pausing", "paused", "suspending", "stopping", "killing", "failed"],
  pausing: ["paused", "running", "failed", "killing"],
  paused: ["running", "suspending", "killing", "failed"],
  suspending: ["suspended", "running", "failed", "killing"],
  suspended: ["resuming", "killing"],
  resuming: ["running", "suspended", "stopped", "failed", "killing"],
  stopping: ["stopped", "failed", "killing"],
  stopped: ["resuming", "killing"],
  killing: ["killed", "failed"],
  killed: [],
  failed: ["killing", "killed"],
} as const satisfies Record<SandboxState, readonly SandboxState[]>;

export const terminalStates: readonly SandboxState[] = ["killed"];
/** States in which a sandbox holds a node (counts against capacity). */
export const residentStates: readonly SandboxState[] = ["creating", "running", "pausing", "paused", "suspending", "resuming", "stopping", "killing"];

/**
 * NOTIFY channel: payload = the id of a sandbox row that was inserted, updated or deleted,
 * sent by a trigger on the table (migration 007), so no writer can forget it.
 */
export const SANDBOX_CHANGES_CHANNEL = "space_sandbox_changes";

/** Calls `fn` with the id of every sandbox row any process changes; resolves to an unsubscribe. */
export function listenSandboxChanges(db: Db, fn: (id: SandboxId) => void): Promise<() => Promise<void>> {
  return db.listen(SANDBOX_CHANGES_CHANNEL, (payload) => fn(payload as SandboxId));
}

export function canTransition(from: SandboxState, to: SandboxState): boolean {
  return (transitions[from] as readonly SandboxState[]).includes(to);
}

export type OnTimeout = "kill" | "pause";

/** What happens at the end time (`onTimeout`, ECW `autoPause`) and whether a connect restores it (ECW `autoResume`). */
export interface SandboxLifecycle {
  onTimeout: OnTimeout;
  autoResume: boolean;
  /** What a timeout pause keeps: `disk` = the disk only (E2B `autoPauseMemory: false`); absent = memory and disk. */
  pauseKind?: "full" | "disk";
}

/** E2B network config (stored as given; the node applies what it supports). Empty when none was given. */
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

/**
 * A sandbox row: the one record type of the table, used as is by the sandbox service
 * (src/sandboxes), the API edges and the controller.
 */
export interface SandboxRecord {
  id: SandboxId;
  /** Insertion order, for stable pagination. */
  seq: number;
  tenantId: TenantId;
  templateId: string | null;
  buildId: string | null;
  alias: string | null;
  state: SandboxState;
  generation: number;
  nodeId: NodeId | null;
  address: string | null;
  vcpu: number;
  memoryMib: number;
  diskMib: number;
  metadata: Record<string, string>;
  /** Secrets: never log. */
  envVars: Record<string, string>;
  envdAccessToken: string | null;
  trafficAccessToken: string | null;
  secure: boolean;
  allowInternetAccess: boolean;
  network: NetworkPolicy;
  lifecycle: SandboxLifecycle;
  failureCode: string | null;
  failureMessage: string | null;
  startedAt: Date | null;
  endAt: Date | null;
  createdAt: Date;
  updatedAt: Date;
  killedAt: Date | null;
}

const COLUMN_NAMES = [
  "id", "seq", "tenant_id", "template_id", "build_id", "alias", "state", "generation", "node_id", "address",
  "vcpu", "memory_mib", "disk_mib", "metadata", "env_vars", "envd_access_token", "traffic_access_token",
  "secure", "allow_internet_access", "network", "lifecycle", "failure_code", "failure_message",
  "started_at", "end_at", "created_at", "updated_at", "killed_at",
] as const;
const COLS = columns(COLUMN_NAMES);
/** The select list of a `SandboxRecord` (for a statement elsewhere in the store that returns one). */
export const SANDBOX_COLUMNS = COLS;

export interface NewSandbox {
  id?: SandboxId;
  tenantId: TenantId;
  templateId?: string | null;
  buildId?: string | null;
  alias?: string | null;
  state?: SandboxState;
  nodeId?: NodeId | null;
  address?: string | null;
  vcpu: number;
  memoryMib: number;
  diskMib: number;
  metadata?: Record<string, string>;
  envVars?: Record<string, string>;
  envdAccessToken?: string | null;
  trafficAccessToken?: string | null;
  secure?: boolean;
  allowInternetAccess?: boolean;
  network?: NetworkPolicy;
  lifecycle?: SandboxLifecycle;
  startedAt?: Date | null;
  endAt?: Date | null;
}

/** Inserts a sandbox (state `creating` unless given); `already_exists` on a duplicate id. */
export async function insertSandbox(q: Queryable, s: NewSandbox): Promise<SandboxRecord> {
  const id = s.id ?? newSandboxId();
  try {
    return await q.one<SandboxRecord>(
      `INSERT INTO sandboxes (id, tenant_id, template_id, build_id, alias, state, node_id, address, vcpu, memory_mib, disk_mib,
         metadata, env_vars, envd_access_token, traffic_access_token, secure, allow_internet_access, network, lifecycle,
         started_at, end_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::jsonb, $13::jsonb, $14, $15, $16, $17, $18::jsonb, $19::jsonb, $20, $21)
       RETURNING ${COLS}`,
      [
        id, s.tenantId, s.templateId ?? null, s.buildId ?? null, s.alias ?? null, s.state ?? "creating", s.nodeId ?? null,
        s.address ?? null, s.vcpu, s.memoryMib, s.diskMib, json(s.metadata ?? {}), json(s.envVars ?? {}),
        s.envdAccessToken ?? null, s.trafficAccessToken ?? null, s.secure ?? false, s.allowInternetAccess ?? true,
        json(s.network ?? {}), json(s.lifecycle ?? { onTimeout: "kill", autoResume: false }), s.startedAt ?? null, s.endAt ?? null,
      ],
    );
  } catch (e) {
    if (isUniqueViolation(e)) throw new SpaceError("already_exists", `sandbox ${id} already exists`);
    throw e;
  }
}

/** The sandbox, or not_found. With `tenantId`, another tenant's sandbox is not_found too (never 403). */
export async function getSandbox(q: Queryable, id: string, tenantId?: TenantId): Promise<SandboxRecord> {
  const s = await findSandbox(q, id, tenantId);
  if (!s) throw new SpaceError("not_found", `sandbox ${id} not found`);
  return s;
}

export async function findSandbox(q: Queryable, id: string, tenantId?: TenantId): Promise<SandboxRecord | undefined> {
  return tenantId === undefined
    ? q.maybeOne<SandboxRecord>(`SELECT ${COLS} FROM sandboxes WHERE id = $1`, [id])
    : q.maybeOne<SandboxRecord>(`SELECT ${COLS} FROM sandboxes WHERE id = $1 AND tenant_id = $2`, [id, tenantId]);
}

export interface SandboxListFilter {
  tenantId: TenantId;
  /** Any of these states (default: all). */
  states?: readonly SandboxState[];
  /** Every pair must match exactly (AND). */
  metadata?: Record<string, string>;
  templateId?: string;
  /** started_at at or after (E2B's `startedAfter`: a sandbox's own startedAt lists it). */
  startedAfter?: Date;
  order?: "asc" | "desc";
  /** Page size (default 100, max 1000). */
  limit?: number;
  /** `nextCursor` of the previous page. */
  cursor?: string;
}

export interface Page<T> {
  items: T[];
  /** Pass back as `cursor` for the next page; null = no more rows. */
  nextCursor: string | null;
}

/**
 * Keyset pagination over (created_at, seq): a row present for the whole scan is returned
 * exactly once, however many rows are inserted or deleted between pages.
 */
export async function listSandboxes(q: Queryable, f: SandboxListFilter): Promise<Page<SandboxRecord>> {
  const params: unknown[] = [f.tenantId];
  const where = ["tenant_id = $1"];
  if (f.states) {
    params.push([...f.states]);
    where.push(`state = ANY($${params.length}::text[])`);
  }
  if (f.metadata && Object.keys(f.metadata).length) {
    params.push(json(f.metadata));
    where.push(`metadata @> $${params.length}::jsonb`);
  }
  if (f.templateId !== undefined) {
    params.push(f.templateId);
    where.push(`(template_id = $${params.length} OR alias = $${params.length})`);
  }
  if (f.startedAfter) {
    params.push(f.startedAfter);
    where.push(`started_at >= $${params.length}`);
  }
  const desc = f.order === "desc";
  if (f.cursor) {
    const c = decodeCursor(f.cursor);
    params.push(c.at, c.seq);
    where.push(`(created_at, seq) ${desc ? "<" : ">"} ($${params.length - 1}::timestamptz, $${params.length}::bigint)`);
  }
  const limit = pageLimit(f.limit);
  params.push(limit + 1);
  const dir = desc ? "DESC" : "ASC";
  const rows = await q.query<SandboxRecord & { cursorAt: string }>(
    `SELECT ${COLS}, created_at::text AS "cursorAt" FROM sandboxes WHERE ${where.join(" AND ")}
      ORDER BY created_at ${dir}, seq ${dir} LIMIT $${params.length}`,
    params,
  );
  const more = rows.length > limit;
  const page = more ? rows.slice(0, limit) : rows;
  const last = page[page.length - 1];
  const items = page.map(({ cursorAt: _, ...s }) => s as SandboxRecord);
  return { items, nextCursor: more && last ? encodeCursor({ at: last.cursorAt, seq: last.seq }) : null };
}

/** Fields a transition (or `patchSandbox`) may change besides state. */
export interface SandboxPatch {
  nodeId?: NodeId | null;
  address?: string | null;
  buildId?: string | null;
  vcpu?: number;
  memoryMib?: number;
  diskMib?: number;
  metadata?: Record<string, string>;
  network?: NetworkPolicy;
  allowInternetAccess?: boolean;
  lifecycle?: SandboxLifecycle;
  envdAccessToken?: string | null;
  trafficAccessToken?: string | null;
  failureCode?: string | null;
  failureMessage?: string | null;
  startedAt?: Date | null;
  endAt?: Date | null;
  killedAt?: Date | null;
}
const PATCHABLE: Record<keyof SandboxPatch, { col: string; json?: boolean }> = {
  nodeId: { col: "node_id" },
  address: { col: "address" },
  buildId: { col: "build_id" },
  vcpu: { col: "vcpu" },
  memoryMib: { col: "memory_mib" },
  diskMib: { col: "disk_mib" },
  metadata: { col: "metadata", json: true },
  network: { col: "network", json: true },
  allowInternetAccess: { col: "allow_internet_access" },
  lifecycle: { col: "lifecycle", json: true },
  envdAccessToken: { col: "envd_access_token" },
  trafficAccessToken: { col: "traffic_access_token" },
  failureCode: { col: "failure_code" },
  failureMessage: { col: "failure_message" },
  startedAt: { col: "started_at" },
  endAt: { col: "end_at" },
  killedAt: { col: "killed_at" },
};

export interface TransitionOptions {
  /** Only if the row is still at this generation (optimistic concurrency). */
  generation?: number;
  /** Only a sandbox of this tenant (another tenant's → not_found). */
  tenantId?: TenantId;
}

/**
 * Moves a sandbox from one of `from` to `to` (each move checked against `transitions`),
 * applying `patch` and bumping `generation`. `killed_at` is set on `killed`, `started_at`
 * on the first `running`. not_found when the sandbox does not exist (for the tenant);
 * failed_precondition (message names the current state and generation) when it is not
 * in `from` or not at `opts.generation`.
 */
export async function transitionSandbox(
  q: Queryable,
  id: string,
  from: SandboxState | readonly SandboxState[],
  to: SandboxState,
  patch: SandboxPatch = {},
  opts: TransitionOptions = {},
): Promise<SandboxRecord> {
  const froms = typeof from === "string" ? [from] : [...from];
  if (froms.length === 0) throw new SpaceError("internal", `transition of sandbox ${id} to ${to} with no source state`);
  for (const f of froms) {
    if (!canTransition(f, to)) throw new SpaceError("internal", `illegal sandbox transition ${f} → ${to}`);
  }
  const params: unknown[] = [id, froms, to];
  const sets = ["state = $3", "generation = generation + 1", "updated_at = now()", ...setClause({ ...patch }, PATCHABLE, params)];
  if (to === "killed" && patch.killedAt === undefined) sets.push("killed_at = coalesce(killed_at, now())");
  if (to === "running" && patch.startedAt === undefined) sets.push("started_at = coalesce(started_at, now())");
  return guardedUpdate(q, id, sets, params, ["id = $1", "state = ANY($2::text[])"], opts, (cur) =>
    opts.generation !== undefined && cur.generation !== opts.generation && froms.includes(cur.state)
      ? `sandbox ${id} changed concurrently (generation ${cur.generation}, expected ${opts.generation})`
      : `sandbox ${id} is ${cur.state}, cannot move to ${to} (allowed from ${froms.join(", ")})`,
  );
}

/**
 * The one guarded UPDATE behind transitions and patches: adds the generation and tenant
 * guards, and when no row matched says why — not_found, or failed_precondition with
 * `refusal(current row)` as the message.
 */
async function guardedUpdate(
  q: Queryable,
  id: string,
  sets: readonly string[],
  params: unknown[],
  where: string[],
  opts: TransitionOptions,
  refusal: (cur: SandboxRecord) => string,
): Promise<SandboxRecord> {
  if (opts.generation !== undefined) {
    params.push(opts.generation);
    where.push(`generation = $${params.length}`);
  }
  if (opts.tenantId !== undefined) {
    params.push(opts.tenantId);
    where.push(`tenant_id = $${params.length}`);
  }
  const row = await q.maybeOne<SandboxRecord>(`UPDATE sandboxes SET ${sets.join(", ")} WHERE ${where.join(" AND ")} RETURNING ${COLS}`, params);
  if (row) return row;
  const cur = await findSandbox(q, id, opts.tenantId);
  if (!cur) throw new SpaceError("not_found", `sandbox ${id} not found`);
  throw new SpaceError("failed_precondition", refusal(cur), { details: { state: cur.state, generation: cur.generation } });
}

/**
 * Changes non-state fields (e.g. refreshed `endAt`, metadata), bumping generation.
 * `inStates` restricts it to sandboxes in those states (else failed_precondition).
 */
export async function patchSandbox(
  q: Queryable,
  id: string,
  patch: SandboxPatch,
  opts: TransitionOptions & { inStates?: readonly SandboxState[] } = {},
): Promise<SandboxRecord> {
  const params: unknown[] = [id];
  const sets = ["generation = generation + 1", "updated_at = now()", ...setClause({ ...patch }, PATCHABLE, params)];
  const where = ["id = $1"];
  if (opts.inStates) {
    params.push([...opts.inStates]);
    where.push(`state = ANY($${params.length}::text[])`);
  }
  return guardedUpdate(q, id, sets, params, where, opts, (cur) => `sandbox ${id} is ${cur.state} (generation ${cur.generation}); cannot change it now`);
}

/** Sandboxes whose end time passed while running or paused (the controller's timeout sweep). */
export async function listExpiredSandboxes(q: Queryable, limit = 100): Promise<SandboxRecord[]> {
  return q.query<SandboxRecord>(
    `SELECT ${COLS} FROM sandboxes WHERE state IN ('running', 'paused') AND end_at IS NOT NULL AND end_at <= now()
      ORDER BY end_at LIMIT $1`,
    [limit],
  );
}

/** Running and creating sandboxes with their node and template (the environment placement census). */
export async function listPlacements(q: Queryable): Promise<Array<{ state: SandboxState; nodeId: string | null; templateId: string | null }>> {
  return q.query(`SELECT state, node_id AS "nodeId", template_id AS "templateId" FROM sandboxes WHERE state IN ('running', 'creating')`);
}

/** The earliest end time among running or paused sandboxes (the timeout enforcer sleeps until it). */
export async function nextSandboxEndAt(q: Queryable): Promise<Date | null> {
  const r = await q.maybeOne<{ endAt: Date | null }>(
    `SELECT min(end_at) AS "endAt" FROM sandboxes WHERE state IN ('running', 'paused') AND end_at IS NOT NULL`,
  );
  return r?.endAt ? new Date(r.endAt) : null;
}

/** Running sandboxes that carry an envd access token (signed-URL routing), newest first. */
export async function listRunningSecureSandboxes(q: Queryable, limit = 5000): Promise<SandboxRecord[]> {
  return q.query<SandboxRecord>(
    `SELECT ${COLS} FROM sandboxes WHERE state = 'running' AND envd_access_token IS NOT NULL ORDER BY seq DESC LIMIT $1`,
    [limit],
  );
}

/**
 * Executions follow their sandbox's move to `to`: running → running; killed or suspended
 * → ended; failed → failed (with `error`). Call in the transaction of the transition.
 */
export async function followSandboxExecutions(q: Queryable, sandboxId: string, to: SandboxState, nodeId: string | null, error: string | null): Promise<void> {
  const next = to === "running" ? "running" : to === "killed" || to === "suspended" ? "ended" : to === "failed" ? "failed" : null;
  if (!next) return;
  const from = next === "running" ? ["pending", "starting"] : ["pending", "starting", "running", "stopping"];
  await q.execute(
    `UPDATE executions SET state = $2, node_id = coalesce($4::uuid, node_id),
        error = CASE WHEN $2 = 'failed' THEN $5 ELSE error END,
        started_at = CASE WHEN $2 = 'running' THEN coalesce(started_at, now()) ELSE started_at END,
        ended_at = CASE WHEN $2 IN ('ended', 'failed') THEN coalesce(ended_at, now()) ELSE ended_at END
      WHERE sandbox_id = $1 AND state = ANY($3::text[])`,
    [sandboxId, next, from, nodeId, error],
  );
}

/** Sandboxes on a node (default: those holding it). */
export async function listSandboxesOnNode(q: Queryable, nodeId: NodeId, states: readonly SandboxState[] = residentStates): Promise<SandboxRecord[]> {
  return q.query<SandboxRecord>(`SELECT ${COLS} FROM sandboxes WHERE node_id = $1 AND state = ANY($2::text[]) ORDER BY seq`, [nodeId, [...states]]);
}

/** Sandboxes in given states across tenants (controller reconcile). */
export async function listSandboxesInStates(q: Queryable, states: readonly SandboxState[], limit = 1000): Promise<SandboxRecord[]> {
  return q.query<SandboxRecord>(`SELECT ${COLS} FROM sandboxes WHERE state = ANY($1::text[]) ORDER BY seq LIMIT $2`, [[...states], limit]);
}

/** Removes killed sandboxes older than `olderThanMs` (retention). Returns ids removed. */
export async function purgeKilledSandboxes(q: Queryable, olderThanMs: number, limit = 500): Promise<string[]> {
  const rows = await q.query<{ id: string }>(
    `DELETE FROM sandboxes WHERE id IN (
       SELECT id FROM sandboxes WHERE state = 'killed' AND killed_at < now() - $1 * interval '1 millisecond' LIMIT $2)
     RETURNING id`,
    [olderThanMs, limit],
  );
  return rows.map((r) => r.id);
}

/** Hard delete (tests, admin). Absent = ok. */
export async function deleteSandbox(q: Queryable, id: string): Promise<void> {
  await q.execute(`DELETE FROM sandboxes WHERE id = $1`, [id]);
}
