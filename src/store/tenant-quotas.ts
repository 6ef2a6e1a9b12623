/**
 * Per-tenant quotas: how much a tenant may hold live at once (sandboxes, vCPU, memory,
 * disk, named snapshots) and how fast it may create (the rate limiter's buckets,
 * rate-buckets.ts). Defaults come from the process's config; a `tenant_quotas` row
 * overrides any of them (NULL = the default).
 *
 * Admission runs inside the transaction that makes a sandbox live (insert, resume,
 * warm hand-over): it first locks the tenant's row (`FOR NO KEY UPDATE`), so two API
 * replicas admitting for one tenant are serialised and cannot both take the last slot;
 * other tenants never wait. Only transitions INTO a counted state admit: a sandbox that
 * is already counted never re-checks, so lowering a quota never kills anything.
 */
import { SpaceError } from "../core/errors.ts";
import type { TenantId } from "../core/ids.ts";
import type { Config } from "../core/config.ts";
import type { Queryable } from "./db.ts";
import { liveSnapshotStates } from "./snapshots.ts";
import type { SandboxState } from "./sandboxes.ts";

/**
 * States that count against a tenant's quota: the sandbox holds (or is about to hold)
 * CPU and memory on a node — running, frozen in memory (`paused`), or on the way in or
 * out of those. Suspended (ECW-paused) and stopped sandboxes hold no node memory and do
 * not count; neither do killing, killed or failed ones, so a kill frees the quota at once.
 */
export const quotaStates: readonly SandboxState[] = ["creating", "running", "pausing", "paused", "suspending", "resuming", "stopping"];

/** The tenant that owns warm-pool members until they are adopted: exempt (its members count against their adopter). */
export const WARM_POOL_TENANT_NAME = "space-warm-pools";

/** Every limit of a tenant. Rates are creates per second; 0 = no rate limit. */
export interface QuotaLimits {
  sandboxes: number;
  vcpu: number;
  memoryMib: number;
  diskMib: number;
  snapshots: number;
  /** Volumes a tenant keeps, and their summed size (MiB). */
  volumes: number;
  volumeMib: number;
  createsPerS: number;
  createBurst: number;
  keyCreatesPerS: number;
  keyCreateBurst: number;
}
export type QuotaName = keyof QuotaLimits;
export const quotaNames = [
  "sandboxes", "vcpu", "memoryMib", "diskMib", "snapshots", "volumes", "volumeMib", "createsPerS", "createBurst", "keyCreatesPerS", "keyCreateBurst",
] as const satisfies readonly QuotaName[];

/** A tenant's overrides: null = the default. */
export type QuotaOverrides = { [K in QuotaName]: number | null };

/** What a tenant holds live now (counted states, named snapshots, volumes). */
export interface QuotaUsage {
  sandboxes: number;
  vcpu: number;
  memoryMib: number;
  diskMib: number;
  snapshots: number;
  volumes: number;
  volumeMib: number;
}

/** The defaults of SPACE_QUOTA_* and SPACE_RATE_LIMIT_*. */
export function quotaDefaults(config: Config): QuotaLimits {
  return {
    sandboxes: config.SPACE_QUOTA_SANDBOXES,
    vcpu: config.SPACE_QUOTA_VCPU,
    memoryMib: config.SPACE_QUOTA_MEMORY_MIB,
    diskMib: config.SPACE_QUOTA_DISK_MIB,
    snapshots: config.SPACE_QUOTA_SNAPSHOTS,
    volumes: config.SPACE_QUOTA_VOLUMES,
    volumeMib: config.SPACE_QUOTA_VOLUME_MIB,
    createsPerS: config.SPACE_RATE_LIMIT_CREATES_PER_S,
    createBurst: config.SPACE_RATE_LIMIT_CREATE_BURST,
    keyCreatesPerS: config.SPACE_RATE_LIMIT_KEY_CREATES_PER_S,
    keyCreateBurst: config.SPACE_RATE_LIMIT_KEY_CREATE_BURST,
  };
}

const COLUMN: Record<QuotaName, string> = {
  sandboxes: "sandboxes",
  vcpu: "vcpu",
  memoryMib: "memory_mib",
  diskMib: "disk_mib",
  snapshots: "snapshots",
  volumes: "volumes",
  volumeMib: "volume_mib",
  createsPerS: "creates_per_s",
  createBurst: "create_burst",
  keyCreatesPerS: "key_creates_per_s",
  keyCreateBurst: "key_create_burst",
};
const OVERRIDE_COLS = quotaNames.map((n) => `q.${COLUMN[n]} AS "${n}"`).join(", ");
const noOverrides = (): QuotaOverrides => Object.fromEntries(quotaNames.map((n) => [n, null])) as QuotaOverrides;

/** The tenant's overrides (all null when it has none); not_found for an unknown tenant. */
export async function getQuotaOverrides(q: Queryable, tenantId: TenantId): Promise<QuotaOverrides> {
  const row = await q.maybeOne<QuotaOverrides & { exists: boolean }>(
    `SELECT ${OVERRIDE_COLS}, true AS "exists" FROM tenants t LEFT JOIN tenant_quotas q ON q.tenant_id = t.id WHERE t.id = $1`,
    [tenantId],
  );
  if (!row) throw new SpaceError("not_found", `tenant ${tenantId} not found`);
  const { exists: _, ...o } = row;
  return { ...noOverrides(), ...numbers(o) };
}

/** Replaces the tenant's overrides (null = back to the default); not_found for an unknown tenant. */
export async function putQuotaOverrides(q: Queryable, tenantId: TenantId, o: QuotaOverrides): Promise<QuotaOverrides> {
  const cols = quotaNames.map((n) => COLUMN[n]);
  const values = quotaNames.map((n) => o[n]);
  const exists = await q.maybeOne(`SELECT 1 FROM tenants WHERE id = $1`, [tenantId]);
  if (!exists) throw new SpaceError("not_found", `tenant ${tenantId} not found`);
  await q.execute(
    `INSERT INTO tenant_quotas (tenant_id, ${cols.join(", ")}, updated_at)
     VALUES ($1, ${cols.map((_, i) => `$${i + 2}`).join(", ")}, now())
     ON CONFLICT (tenant_id) DO UPDATE SET ${cols.map((c) => `${c} = EXCLUDED.${c}`).join(", ")}, updated_at = now()`,
    [tenantId, ...values],
  );
  return getQuotaOverrides(q, tenantId);
}

/** Defaults with the overrides applied. */
export function effectiveQuotas(defaults: QuotaLimits, o: QuotaOverrides): QuotaLimits {
  return Object.fromEntries(quotaNames.map((n) => [n, o[n] ?? defaults[n]])) as unknown as QuotaLimits;
}

/** What the tenant holds now (no lock: for reads). */
export async function quotaUsage(q: Queryable, tenantId: TenantId): Promise<QuotaUsage> {
  return { ...(await liveUsage(q, tenantId, null)), snapshots: await namedSnapshotCount(q, tenantId), ...(await volumeUsage(q, tenantId)) };
}

/** The tenant's volumes and their summed size. */
export async function volumeUsage(q: Queryable, tenantId: TenantId): Promise<{ volumes: number; volumeMib: number }> {
  const r = await q.one<{ volumes: unknown; volumeMib: unknown }>(
    `SELECT count(*)::int AS volumes, coalesce(sum(size_mib), 0)::bigint AS "volumeMib" FROM volumes WHERE tenant_id = $1`,
    [tenantId],
  );
  return { volumes: Number(r.volumes), volumeMib: Number(r.volumeMib) };
}

type LiveUsage = Pick<QuotaUsage, "sandboxes" | "vcpu" | "memoryMib" | "diskMib">;

/** Sum over the tenant's sandboxes in counted states, `exceptSandbox` left out. */
async function liveUsage(q: Queryable, tenantId: TenantId, exceptSandbox: string | null): Promise<LiveUsage> {
  const r = await q.one<Record<keyof LiveUsage, unknown>>(
    `SELECT count(*)::int AS sandboxes, coalesce(sum(vcpu), 0)::bigint AS vcpu, coalesce(sum(memory_mib), 0)::bigint AS "memoryMib",
            coalesce(sum(disk_mib), 0)::bigint AS "diskMib"
       FROM sandboxes WHERE tenant_id = $1 AND state = ANY($2::text[]) AND ($3::text IS NULL OR id <> $3)`,
    [tenantId, [...quotaStates], exceptSandbox],
  );
  return numbers(r) as unknown as LiveUsage;
}

async function namedSnapshotCount(q: Queryable, tenantId: TenantId): Promise<number> {
  const r = await q.one<{ n: unknown }>(
    `SELECT count(*)::int AS n FROM snapshots n JOIN sandboxes s ON s.id = n.sandbox_id
      WHERE s.tenant_id = $1 AND n.purpose = 'named' AND n.state = ANY($2::text[])`,
    [tenantId, [...liveSnapshotStates]],
  );
  return Number(r.n);
}

/** What a new live sandbox adds. */
export interface QuotaClaim {
  vcpu: number;
  memoryMib: number;
  diskMib: number;
}

/** `tenant quota exceeded: sandboxes 3 of 3` (detail `quota_exceeded`, the limit and numbers in `details`). */
export function quotaExceeded(limit: keyof QuotaUsage, used: number, adding: number, max: number): SpaceError {
  const what = { sandboxes: "sandboxes", vcpu: "vcpu", memoryMib: "memory_mib", diskMib: "disk_mib", snapshots: "snapshots", volumes: "volumes", volumeMib: "volume_mib" }[limit];
  const msg =
    limit === "sandboxes" || limit === "snapshots" || limit === "volumes"
      ? `tenant quota exceeded: ${what} ${used} of ${max}`
      : `tenant quota exceeded: ${what} ${used} of ${max} in use, ${adding} more requested`;
  return new SpaceError("resource_exhausted", msg, { retryable: false, detail: "quota_exceeded", details: { limit: what, used, requested: adding, max } });
}

/**
 * Locks the tenant's row (call inside the admitting transaction) and returns its limits.
 * null = the tenant is exempt (the warm-pool tenant) or gone (the insert's foreign key refuses it).
 */
async function lockLimits(tx: Queryable, tenantId: TenantId, defaults: QuotaLimits): Promise<QuotaLimits | null> {
  const t = await tx.maybeOne<QuotaOverrides & { name: string }>(
    `SELECT t.name, ${OVERRIDE_COLS} FROM tenants t LEFT JOIN tenant_quotas q ON q.tenant_id = t.id WHERE t.id = $1 FOR NO KEY UPDATE OF t`,
    [tenantId],
  );
  if (!t || t.name === WARM_POOL_TENANT_NAME) return null;
  const { name: _, ...o } = t;
  return effectiveQuotas(defaults, { ...noOverrides(), ...numbers(o) });
}

/**
 * Locks the tenant's row and returns its limits (null = exempt or gone), for admissions
 * other modules count under the same lock (volumes).
 */
export const lockQuotaLimits = lockLimits;

/**
 * Admits one more live sandbox of `claim` for the tenant, or throws `resource_exhausted`
 * naming the first limit it would pass. `self`: the sandbox being admitted, when its row
 * exists already (a resume, a hand-over): it is not counted twice. One round trip: the
 * lock and the sum run in `space_admit_live_sandbox` (migration 010), whose lock the
 * calling transaction holds until it ends.
 */
export async function admitLiveSandbox(tx: Queryable, tenantId: TenantId, defaults: QuotaLimits, claim: QuotaClaim, self: string | null): Promise<void> {
  const call = admitLiveSandboxCall(1, { vcpu: "$9::bigint", memoryMib: "$10::bigint", diskMib: "$11::bigint" });
  await refusing(tx.query(`SELECT ${call.sql}`, [...call.params(tenantId, defaults, self), claim.vcpu, claim.memoryMib, claim.diskMib]));
}

/**
 * The admission as an expression for a statement that admits and writes at once (the warm
 * hand-over): `sql` takes its parameters from `$first` on (eight of them, `params`), the
 * claim from the given SQL expressions (columns of the row being admitted, or parameters).
 * Run the statement through `refusing` so a refusal becomes `quota_exceeded`.
 */
export function admitLiveSandboxCall(first: number, claim: Record<keyof QuotaClaim, string>) {
  const p = (i: number) => `$${first + i}`;
  return {
    sql: `space_admit_live_sandbox(${p(0)}::text, ${p(1)}::text[], ${p(2)}::text, ${p(3)}::text, ${p(4)}::bigint, ${p(5)}::bigint, ${p(6)}::bigint, ${p(7)}::bigint, ${claim.vcpu}, ${claim.memoryMib}, ${claim.diskMib})`,
    params: (tenantId: TenantId, defaults: QuotaLimits, self: string | null): unknown[] => [
      tenantId, [...quotaStates], WARM_POOL_TENANT_NAME, self, defaults.sandboxes, defaults.vcpu, defaults.memoryMib, defaults.diskMib,
    ],
  };
}

const REFUSED = "SPQ01";
const LIMIT_OF: Record<string, keyof QuotaUsage> = { sandboxes: "sandboxes", vcpu: "vcpu", memory_mib: "memoryMib", disk_mib: "diskMib" };

/** `p`, with the admission's refusal (SQLSTATE SPQ01, numbers in DETAIL) as `quota_exceeded`. */
export async function refusing<T>(p: Promise<T>): Promise<T> {
  try {
    return await p;
  } catch (e: unknown) {
    const pe = e as { code?: unknown; detail?: unknown };
    if (pe.code !== REFUSED || typeof pe.detail !== "string") throw e;
    const d = JSON.parse(pe.detail) as { limit: string; used: number; requested: number; max: number };
    throw quotaExceeded(LIMIT_OF[d.limit] ?? "sandboxes", Number(d.used), Number(d.requested), Number(d.max));
  }
}

/** Admits one more named snapshot for the tenant (same lock), or throws `resource_exhausted`. */
export async function admitNamedSnapshot(tx: Queryable, tenantId: TenantId, defaults: QuotaLimits): Promise<void> {
  const limits = await lockLimits(tx, tenantId, defaults);
  if (!limits) return;
  const n = await namedSnapshotCount(tx, tenantId);
  if (n + 1 > limits.snapshots) throw quotaExceeded("snapshots", n, 1, limits.snapshots);
}

/** pg returns bigint sums and float8 as numbers already (db.ts); PGlite may hand strings for numerics. */
function numbers<T extends Record<string, unknown>>(r: T): { [K in keyof T]: number | null } {
  return Object.fromEntries(Object.entries(r).map(([k, v]) => [k, v === null || v === undefined ? null : Number(v)])) as { [K in keyof T]: number | null };
}
