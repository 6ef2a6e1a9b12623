/**
 * Warm pools (desired state) and their slots, with the queries the reconciler and
 * adoption need: a claim that only takes members of the pool's current build,
 * hand-back, conditional state moves, the hand-over of a member sandbox to its adopter.
 *
 * Slot states: creating → ready → adopted (terminal; the row is history) | retiring →
 * (deleted once its sandbox is killed); creating → failed → (deleted). `reserved` is a
 * ready member claimed by a Native admission for one tenant, adopted by its create.
 * Idle policy (controller/warm-pools/idle-policy.ts): ready → suspending → suspended →
 * resuming → ready; a suspended member is adopted (restored first) or retired like a ready one.
 */
import { randomId, type NodeId, type TenantId } from "../core/ids.ts";
import type { Queryable } from "./db.ts";
import { columns, json } from "./sql.ts";
import { SANDBOX_COLUMNS, type SandboxLifecycle, type SandboxRecord } from "./sandboxes.ts";
import { admitLiveSandboxCall, refusing, type QuotaClaim, type QuotaLimits } from "./tenant-quotas.ts";

/** What a pool's idle members do (controller/warm-pools/idle-policy.ts decides). */
export const idlePolicies = ["running", "suspended", "suspend_when_memory_short"] as const;
export type IdlePolicy = (typeof idlePolicies)[number];

export interface WarmPool {
  name: string;
  tenantId: TenantId | null;
  size: number;
  /** The most members a burst grows it to; null = never beyond `size`. */
  maxSize: number | null;
  vcpu: number;
  memoryMib: number;
  diskMib: number;
  source: "api" | "config";
  idlePolicy: IdlePolicy;
  minFreeMemoryPercent: number;
  templateId: string | null;
  buildId: string | null;
  status: Record<string, unknown>;
  createdAt: Date;
  updatedAt: Date;
}

/** One pre-created sandbox of a pool (the row of `warm_pool_slots`). */
export interface WarmSlot {
  id: string;
  pool: string;
  buildId: string | null;
  sandboxId: string | null;
  nodeId: NodeId | null;
  state: "creating" | "ready" | "adopted" | "failed" | "retiring" | "reserved" | "suspending" | "suspended" | "resuming";
  createdAt: Date;
  updatedAt: Date;
  readyAt: Date | null;
  adoptedAt: Date | null;
  reason: string | null;
  reservedFor: string | null;
}

const PCOLS = columns([
  "name", "tenant_id", "size", "max_size", "vcpu", "memory_mib", "disk_mib", "source", "idle_policy", "min_free_memory_percent", "template_id", "build_id", "status",
  "created_at", "updated_at",
]);
const SLOT_COLUMNS = [
  "id", "pool", "build_id", "sandbox_id", "node_id", "state", "created_at", "updated_at", "ready_at", "adopted_at", "reason", "reserved_for",
] as const;
const SCOLS = columns(SLOT_COLUMNS);

export interface WarmPoolSpec {
  name: string;
  tenantId?: TenantId | null;
  size: number;
  /** Absent or null: never beyond `size`. */
  maxSize?: number | null;
  vcpu: number;
  memoryMib: number;
  diskMib: number;
  source?: "api" | "config";
  /** Default `running`, 20 %. */
  idlePolicy?: IdlePolicy;
  minFreeMemoryPercent?: number;
}

/**
 * Creates or replaces a pool's spec. `onlyIfSource`: a config pool never overwrites one an
 * operator set through the admin API (the API wins until the pool is deleted).
 */
export async function upsertWarmPool(q: Queryable, s: WarmPoolSpec, opts: { onlyIfSource?: "config" } = {}): Promise<WarmPool | undefined> {
  return q.maybeOne<WarmPool>(
    `INSERT INTO warm_pools (name, tenant_id, size, vcpu, memory_mib, disk_mib, source, idle_policy, min_free_memory_percent, max_size)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $9, $10, $11)
     ON CONFLICT (name) DO UPDATE SET tenant_id = EXCLUDED.tenant_id, size = EXCLUDED.size, max_size = EXCLUDED.max_size, vcpu = EXCLUDED.vcpu,
       memory_mib = EXCLUDED.memory_mib, disk_mib = EXCLUDED.disk_mib, source = EXCLUDED.source,
       idle_policy = EXCLUDED.idle_policy, min_free_memory_percent = EXCLUDED.min_free_memory_percent, updated_at = now()
       WHERE $8::text IS NULL OR warm_pools.source = $8
     RETURNING ${PCOLS}`,
    [
      s.name, s.tenantId ?? null, s.size, s.vcpu, s.memoryMib, s.diskMib, s.source ?? "api", opts.onlyIfSource ?? null,
      s.idlePolicy ?? "running", s.minFreeMemoryPercent ?? 20, s.maxSize ?? null,
    ],
  );
}

export async function getWarmPool(q: Queryable, name: string): Promise<WarmPool | undefined> {
  return q.maybeOne<WarmPool>(`SELECT ${PCOLS} FROM warm_pools WHERE name = $1`, [name]);
}

export async function listWarmPools(q: Queryable): Promise<WarmPool[]> {
  return q.query<WarmPool>(`SELECT ${PCOLS} FROM warm_pools ORDER BY name`);
}

/** Absent = ok. Its slots are drained by the reconciler (a pool that is gone retires its members). */
export async function deleteWarmPool(q: Queryable, name: string, opts: { onlyIfSource?: "config" } = {}): Promise<boolean> {
  return opts.onlyIfSource
    ? (await q.execute(`DELETE FROM warm_pools WHERE name = $1 AND source = $2`, [name, opts.onlyIfSource])) > 0
    : (await q.execute(`DELETE FROM warm_pools WHERE name = $1`, [name])) > 0;
}

/**
 * A pool's demand: the creates of its template and shape in the last `windowMs` that one of
 * its members could have served (adopted or cold alike: a hand-over dates the row anew), by
 * any tenant but the pool's own, or only by `tenantId` for a tenant's pool.
 */
export async function recentCreates(
  q: Queryable,
  o: { templateId: string; vcpu: number; memoryMib: number; diskMib: number; tenantId: TenantId | null; poolTenant: TenantId; windowMs: number },
): Promise<number> {
  const r = await q.one<{ n: number }>(
    `SELECT count(*)::int AS n FROM sandboxes
      WHERE template_id = $1 AND created_at > now() - $2 * interval '1 millisecond'
        AND tenant_id <> $3 AND ($4::text IS NULL OR tenant_id = $4)
        AND vcpu = $5 AND memory_mib = $6 AND disk_mib = $7`,
    [o.templateId, o.windowMs, o.poolTenant, o.tenantId, o.vcpu, o.memoryMib, o.diskMib],
  );
  return Number(r.n);
}

/** What the reconciler resolved: the template and the build members must come from. */
export async function setWarmPoolTarget(q: Queryable, name: string, templateId: string | null, buildId: string | null): Promise<void> {
  await q.execute(
    `UPDATE warm_pools SET template_id = $2, build_id = $3, updated_at = now()
      WHERE name = $1 AND (template_id IS DISTINCT FROM $2 OR build_id IS DISTINCT FROM $3)`,
    [name, templateId, buildId],
  );
}

export async function setWarmPoolStatus(q: Queryable, name: string, status: Record<string, unknown>): Promise<void> {
  await q.execute(`UPDATE warm_pools SET status = $2::jsonb WHERE name = $1`, [name, json(status)]);
}

/** Pools whose members a create of (template, shape) by `tenantId` may adopt. */
export async function matchingWarmPools(
  q: Queryable,
  templateId: string,
  shape: { vcpu: number; memoryMib: number; diskMib: number },
  tenantId: TenantId,
): Promise<WarmPool[]> {
  return q.query<WarmPool>(
    `SELECT ${PCOLS} FROM warm_pools
      WHERE template_id = $1 AND vcpu = $2 AND memory_mib = $3 AND disk_mib = $4 AND (tenant_id IS NULL OR tenant_id = $5)
      ORDER BY (tenant_id IS NULL), name`,
    [templateId, shape.vcpu, shape.memoryMib, shape.diskMib, tenantId],
  );
}

/**
 * The build sandboxes of `templateId` boot today: nodes point the template's subvolume at
 * the build released last (templates/build-coordinator.ts), else the newest ready build; null for
 * templates the store has no build of (e.g. `base`, built by each node).
 */
export async function currentBuildOf(q: Queryable, templateId: string): Promise<string | null> {
  const r = await q.maybeOne<{ id: string }>(`SELECT ${currentBuildSql("$1")} AS id`, [templateId]);
  return r?.id ?? null;
}

/** currentBuildOf as a scalar subquery of the template id `param` (NULL: no build). */
const currentBuildSql = (param: string) =>
  `(SELECT id FROM (
      (SELECT r.build_id AS id, 0 AS k FROM releases r WHERE r.template_id = ${param} ORDER BY r.updated_at DESC LIMIT 1)
      UNION ALL
      (SELECT b.id, 1 FROM builds b WHERE b.template_id = ${param} AND b.status = 'ready' ORDER BY b.created_at DESC LIMIT 1)
   ) x ORDER BY k LIMIT 1)`;

export async function insertWarmSlot(q: Queryable, pool: string, buildId: string | null): Promise<WarmSlot> {
  return q.one<WarmSlot>(`INSERT INTO warm_pool_slots (id, pool, build_id) VALUES ($1, $2, $3) RETURNING ${SCOLS}`, [
    `wp_${randomId(16)}`,
    pool,
    buildId,
  ]);
}

export async function listSlots(q: Queryable, pool?: string): Promise<WarmSlot[]> {
  return q.query<WarmSlot>(`SELECT ${SCOLS} FROM warm_pool_slots WHERE ($1::text IS NULL OR pool = $1) ORDER BY created_at, id`, [pool ?? null]);
}

/** Pool names that still have slots (a deleted pool's members are drained by name). */
export async function slotPoolNames(q: Queryable): Promise<string[]> {
  return (await q.query<{ pool: string }>(`SELECT DISTINCT pool FROM warm_pool_slots`)).map((r) => r.pool);
}

/** Moves a slot only if it is in one of `from`; false when another actor moved it first. */
export async function moveSlot(
  q: Queryable,
  id: string,
  from: readonly WarmSlot["state"][],
  to: WarmSlot["state"],
  patch: { sandboxId?: string; nodeId?: string; reason?: string; reservedFor?: string | null } = {},
): Promise<boolean> {
  const n = await q.execute(
    `UPDATE warm_pool_slots SET state = $3, updated_at = now(),
        sandbox_id = coalesce($4, sandbox_id), node_id = coalesce($5::uuid, node_id), reason = coalesce($6, reason),
        reserved_for = CASE WHEN $8 THEN $7 ELSE reserved_for END,
        ready_at = CASE WHEN $3 = 'ready' THEN coalesce(ready_at, now()) ELSE ready_at END,
        adopted_at = CASE WHEN $3 = 'adopted' THEN now() ELSE adopted_at END
      WHERE id = $1 AND state = ANY($2::text[])`,
    [id, [...from], to, patch.sandboxId ?? null, patch.nodeId ?? null, patch.reason ?? null, patch.reservedFor ?? null, patch.reservedFor !== undefined],
  );
  return n > 0;
}

export async function deleteSlot(q: Queryable, id: string): Promise<void> {
  await q.execute(`DELETE FROM warm_pool_slots WHERE id = $1`, [id]);
}

/** A claimed slot and the state it was claimed from (a `suspended` member must be restored first). */
/** `memberToken`: whether the member has an envd access token of its own (members made before they had one do not). */
export type ClaimedSlot = WarmSlot & { claimedFrom: "ready" | "suspended"; memberToken: boolean };

/**
 * Claims one member of `pools` from the current build of `templateId` (currentBuildOf, read
 * in the same statement), skipping `exclude`: a running (`ready`) one, oldest first, else a
 * `suspended` one. One statement: the row lock (SKIP LOCKED) plus the state check in the
 * outer WHERE mean two concurrent claims never return the same slot. A member of any other
 * build is never returned, whether or not the reconciler has drained it yet.
 *
 * With `admit`, the tenant's quota admits the claim in the same statement first (no extra
 * round trip on the create path; the hand-over enforces it again): a refusal is
 * `resource_exhausted` and claims nothing, so it costs no member.
 */
export async function claimReadySlot(
  q: Queryable,
  pools: readonly string[],
  templateId: string,
  exclude: readonly string[],
  to: "adopted" | "reserved" = "adopted",
  reservedFor: string | null = null,
  admit?: { tenantId: TenantId; quotas: QuotaLimits; claim: QuotaClaim },
): Promise<ClaimedSlot | undefined> {
  const params: unknown[] = [[...pools], templateId, [...exclude], to, reservedFor];
  let admitted = "";
  if (admit) {
    // The admission's eight parameters follow the claim's, then the shape (as admitLiveSandbox numbers them).
    const n = params.length;
    const call = admitLiveSandboxCall(n + 1, { vcpu: `$${n + 9}::bigint`, memoryMib: `$${n + 10}::bigint`, diskMib: `$${n + 11}::bigint` });
    params.push(...call.params(admit.tenantId, admit.quotas, null), admit.claim.vcpu, admit.claim.memoryMib, admit.claim.diskMib);
    admitted = `admitted AS (SELECT ${call.sql}), `;
  }
  return refusing(
    q.maybeOne<ClaimedSlot>(
      `WITH ${admitted}c AS (SELECT id, state FROM warm_pool_slots
                   WHERE pool = ANY($1::text[]) AND state IN ('ready', 'suspended') AND sandbox_id IS NOT NULL
                     AND build_id IS NOT DISTINCT FROM ${currentBuildSql("$2::text")} AND NOT (id = ANY($3::text[]))
                     ${admit ? "AND EXISTS (SELECT 1 FROM admitted)" : ""}
                   ORDER BY state = 'suspended', ready_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
       UPDATE warm_pool_slots w SET state = $4, updated_at = now(), reserved_for = $5,
          adopted_at = CASE WHEN $4 = 'adopted' THEN now() ELSE w.adopted_at END
         FROM c WHERE w.id = c.id AND w.state = c.state
       RETURNING ${columns(SLOT_COLUMNS, "w")}, c.state AS "claimedFrom",
         (SELECT s.envd_access_token IS NOT NULL FROM sandboxes s WHERE s.id = w.sandbox_id) AS "memberToken"`,
      params,
    ),
  );
}

/** The slot holding `sandboxId` in state `reserved` for `tenantId` (Native admission → create). */
export async function reservedSlotOf(q: Queryable, sandboxId: string, tenantId: string): Promise<WarmSlot | undefined> {
  return q.maybeOne<WarmSlot>(`SELECT ${SCOLS} FROM warm_pool_slots WHERE sandbox_id = $1 AND state = 'reserved' AND reserved_for = $2`, [
    sandboxId,
    tenantId,
  ]);
}

export interface Handover {
  sandboxId: string;
  fromTenant: TenantId;
  toTenant: TenantId;
  alias: string | null;
  metadata: Record<string, string>;
  envVars: Record<string, string>;
  /** The adopter's envd access token: a new one, null (not secure), or `member`: the one the member has, kept. */
  envdAccessToken: string | null | "member";
  trafficAccessToken: string | null;
  allowInternetAccess: boolean;
  network: Record<string, unknown>;
  lifecycle: SandboxLifecycle;
  startedAt: Date;
  endAt: Date;
}

/**
 * Gives a running member sandbox to its adopter in one statement (only while it is still
 * the pool's and running) and returns its row as handed over; null when it is not (killed
 * under us, lost node). With
 * `quotas`, the adopter's tenant quota admits it in the same statement (it then counts
 * against the adopter; `resource_exhausted` when it would pass a limit): one round trip.
 */
export async function handOverSandbox(db: Queryable, h: Handover, quotas?: QuotaLimits): Promise<SandboxRecord | null> {
  // $6 NULL with $14: the member's own token stays (and with it `secure`).
  const token = `CASE WHEN $14::boolean THEN envd_access_token ELSE $6::text END`;
  const set = `UPDATE sandboxes SET tenant_id = $2, alias = $3, metadata = $4::jsonb, env_vars = $5::jsonb, envd_access_token = ${token},
          traffic_access_token = $7, secure = (${token} IS NOT NULL), allow_internet_access = $8, network = $9::jsonb, lifecycle = $10::jsonb,
          started_at = $11, end_at = $12, created_at = now(), generation = generation + 1, updated_at = now()
        WHERE id = $1 AND tenant_id = $13 AND state = 'running'`;
  const returning = `RETURNING ${SANDBOX_COLUMNS}`;
  const keep = h.envdAccessToken === "member";
  const params = [
    h.sandboxId, h.toTenant, h.alias, json(h.metadata), json(h.envVars), keep ? null : h.envdAccessToken, h.trafficAccessToken,
    h.allowInternetAccess, json(h.network), json(h.lifecycle), h.startedAt, h.endAt, h.fromTenant, keep,
  ];
  if (!quotas) return (await db.maybeOne<SandboxRecord>(`${set} ${returning}`, params)) ?? null;
  // The member's shape is read by the statement itself; no member (not the pool's, not running) = nothing admitted.
  const admit = admitLiveSandboxCall(params.length + 1, { vcpu: "m.vcpu", memoryMib: "m.memory_mib", diskMib: "m.disk_mib" });
  const row = await refusing(
    db.maybeOne<SandboxRecord>(
      `WITH m AS (SELECT vcpu::bigint, memory_mib::bigint, disk_mib::bigint FROM sandboxes WHERE id = $1 AND tenant_id = $13 AND state = 'running'),
            admitted AS (SELECT ${admit.sql} FROM m)
       ${set} AND EXISTS (SELECT 1 FROM admitted) ${returning}`,
      [...params, ...admit.params(h.toTenant, quotas, h.sandboxId)],
    ),
  );
  return row ?? null;
}

/** State, node and shape of the sandboxes behind slots (one query per reconcile). */
export async function slotSandboxes(
  q: Queryable,
  ids: readonly string[],
): Promise<Map<string, { state: string; tenantId: string; nodeId: string | null; templateId: string | null; vcpu: number; memoryMib: number; diskMib: number }>> {
  if (!ids.length) return new Map();
  const rows = await q.query<{ id: string; state: string; tenantId: string; nodeId: string | null; templateId: string | null; vcpu: number; memoryMib: number; diskMib: number }>(
    `SELECT id, state, tenant_id AS "tenantId", node_id AS "nodeId", template_id AS "templateId", vcpu, memory_mib AS "memoryMib", disk_mib AS "diskMib"
       FROM sandboxes WHERE id = ANY($1::text[])`,
    [[...ids]],
  );
  return new Map(rows.map((r) => [r.id, r]));
}

/** Live sandboxes of the pool tenant no slot references, older than `olderThanMs` (a controller died mid-refill). */
export async function orphanMembers(q: Queryable, poolTenant: TenantId, olderThanMs: number): Promise<string[]> {
  const rows = await q.query<{ id: string }>(
    `SELECT s.id FROM sandboxes s
      WHERE s.tenant_id = $1 AND s.state IN ('creating', 'running', 'paused', 'suspending', 'suspended', 'resuming', 'failed')
        AND s.created_at < now() - $2 * interval '1 millisecond'
        AND NOT EXISTS (SELECT 1 FROM warm_pool_slots w WHERE w.sandbox_id = s.id)
      LIMIT 100`,
    [poolTenant, olderThanMs],
  );
  return rows.map((r) => r.id);
}
