/**
 * Templates, builds and releases. A template belongs to a tenant (or to the platform when
 * `tenantId` is null) and is visible to others when `public`. A release maps an alias + tag
 * to a build; `resolveTemplate` turns what a client sends (`alias`, `alias:tag`, template id)
 * into a build the tenant may use.
 */
import { randomUUID } from "node:crypto";
import { SpaceError } from "../core/errors.ts";
import { randomId, type TenantId } from "../core/ids.ts";
import type { Queryable } from "./db.ts";
import { columns, isUniqueViolation, json, setClause } from "./sql.ts";

export interface Template {
  id: string;
  tenantId: TenantId | null;
  name: string;
  public: boolean;
  createdAt: Date;
  updatedAt: Date;
  deletedAt: Date | null;
}

export const buildStatuses = ["waiting", "building", "ready", "failed"] as const;
export type BuildStatus = (typeof buildStatuses)[number];

export interface Build {
  id: string;
  templateId: string;
  status: BuildStatus;
  spec: Record<string, unknown>;
  vcpu: number | null;
  memoryMib: number | null;
  diskMib: number | null;
  rootfsSizeMib: number | null;
  /** Execution-environment digest the build was made in (its binding). */
  environment: string | null;
  /** Content digest of the rootfs. */
  digest: string | null;
  logs: string;
  error: string | null;
  createdAt: Date;
  startedAt: Date | null;
  finishedAt: Date | null;
}

export interface Release {
  id: string;
  tenantId: TenantId | null;
  templateId: string;
  alias: string;
  tag: string;
  buildId: string;
  createdAt: Date;
  updatedAt: Date;
}

const TCOLS_LIST = ["id", "tenant_id", "name", "public", "created_at", "updated_at", "deleted_at"] as const;
const TCOLS = columns(TCOLS_LIST);
const BCOLS_LIST = [
  "id", "template_id", "status", "spec", "vcpu", "memory_mib", "disk_mib", "rootfs_size_mib", "environment", "digest", "logs",
  "error", "created_at", "started_at", "finished_at",
] as const;
const BCOLS = columns(BCOLS_LIST);
const RCOLS_LIST = ["id", "tenant_id", "template_id", "alias", "tag", "build_id", "created_at", "updated_at"] as const;
const RCOLS = columns(RCOLS_LIST);

/** `tenant_id` is visible to `$n` (own, platform, or public). */
const visible = (alias: string, n: number) => `(${alias}.tenant_id = $${n} OR ${alias}.tenant_id IS NULL OR ${alias}.public)`;

export const newTemplateId = () => randomId(20);
/** E2B's spec types build ids as UUIDs (the Python SDK parses them); rows from before keep their `bd_` ids. */
export const newBuildId = () => randomUUID();

export async function createTemplate(q: Queryable, input: { tenantId: TenantId | null; name: string; public?: boolean; id?: string }): Promise<Template> {
  try {
    return await q.one<Template>(`INSERT INTO templates (id, tenant_id, name, public) VALUES ($1, $2, $3, $4) RETURNING ${TCOLS}`, [
      input.id ?? newTemplateId(),
      input.tenantId,
      input.name,
      input.public ?? false,
    ]);
  } catch (e) {
    if (isUniqueViolation(e)) throw new SpaceError("already_exists", `template ${JSON.stringify(input.name)} already exists`);
    throw e;
  }
}

/** A template visible to `tenantId` (own, platform or public); without tenant, any. */
export async function getTemplate(q: Queryable, id: string, tenantId?: TenantId): Promise<Template> {
  const t =
    tenantId === undefined
      ? await q.maybeOne<Template>(`SELECT ${TCOLS} FROM templates WHERE id = $1 AND deleted_at IS NULL`, [id])
      : await q.maybeOne<Template>(`SELECT ${TCOLS} FROM templates t WHERE id = $1 AND deleted_at IS NULL AND ${visible("t", 2)}`, [id, tenantId]);
  if (!t) throw new SpaceError("not_found", `template ${id} not found`);
  return t;
}

/** Templates visible to `tenantId`, own first. */
export async function listTemplates(q: Queryable, tenantId: TenantId): Promise<Template[]> {
  return q.query<Template>(
    `SELECT ${TCOLS} FROM templates t WHERE deleted_at IS NULL AND ${visible("t", 1)}
      ORDER BY (tenant_id = $1) DESC, created_at, id`,
    [tenantId],
  );
}

/** The tenant's own template by id or name (the id wins), or undefined. */
export async function findOwnTemplate(q: Queryable, tenantId: TenantId, idOrName: string): Promise<Template | undefined> {
  return q.maybeOne<Template>(
    `SELECT ${TCOLS} FROM templates
      WHERE (id = $1 OR name = $1) AND tenant_id = $2 AND deleted_at IS NULL ORDER BY (id = $1) DESC LIMIT 1`,
    [idOrName, tenantId],
  );
}

/** The template named `name`, the tenant's own first (else another's, visible or not), or undefined. */
export async function findTemplateByName(q: Queryable, name: string, tenantId: TenantId): Promise<Template | undefined> {
  return q.maybeOne<Template>(
    `SELECT ${TCOLS} FROM templates WHERE name = $1 AND deleted_at IS NULL ORDER BY (tenant_id = $2) DESC NULLS LAST LIMIT 1`,
    [name, tenantId],
  );
}

export async function updateTemplate(q: Queryable, id: string, tenantId: TenantId | null, patch: { name?: string; public?: boolean }): Promise<Template> {
  const params: unknown[] = [id, tenantId];
  const sets = [...setClause({ ...patch }, { name: { col: "name" }, public: { col: "public" } }, params), "updated_at = now()"];
  return q.one<Template>(
    `UPDATE templates SET ${sets.join(", ")} WHERE id = $1 AND tenant_id IS NOT DISTINCT FROM $2 AND deleted_at IS NULL RETURNING ${TCOLS}`,
    params,
    `template ${id}`,
  );
}

/** Soft-deletes a template owned by `tenantId` and removes its releases. Absent = ok. */
export async function deleteTemplate(q: Queryable, id: string, tenantId: TenantId | null): Promise<void> {
  const n = await q.execute(`UPDATE templates SET deleted_at = now() WHERE id = $1 AND tenant_id IS NOT DISTINCT FROM $2 AND deleted_at IS NULL`, [id, tenantId]);
  if (n) await q.execute(`DELETE FROM releases WHERE template_id = $1`, [id]);
}

export async function createBuild(
  q: Queryable,
  input: { templateId: string; spec?: Record<string, unknown>; vcpu?: number; memoryMib?: number; diskMib?: number; id?: string; status?: BuildStatus },
): Promise<Build> {
  return q.one<Build>(
    `INSERT INTO builds (id, template_id, spec, vcpu, memory_mib, disk_mib, status) VALUES ($1, $2, $3::jsonb, $4, $5, $6, $7) RETURNING ${BCOLS}`,
    [input.id ?? newBuildId(), input.templateId, json(input.spec ?? {}), input.vcpu ?? null, input.memoryMib ?? null, input.diskMib ?? null, input.status ?? "waiting"],
  );
}

export async function getBuild(q: Queryable, id: string): Promise<Build> {
  return q.one<Build>(`SELECT ${BCOLS} FROM builds WHERE id = $1`, [id], `build ${id}`);
}

export async function listBuilds(q: Queryable, templateId: string): Promise<Build[]> {
  return q.query<Build>(`SELECT ${BCOLS} FROM builds WHERE template_id = $1 ORDER BY created_at, id`, [templateId]);
}

/** The newest ready build of a template. */
export async function latestReadyBuild(q: Queryable, templateId: string): Promise<Build | undefined> {
  return q.maybeOne<Build>(`SELECT ${BCOLS} FROM builds WHERE template_id = $1 AND status = 'ready' ORDER BY created_at DESC, id DESC LIMIT 1`, [templateId]);
}

export interface BuildPatch {
  status?: BuildStatus;
  rootfsSizeMib?: number | null;
  environment?: string | null;
  digest?: string | null;
  error?: string | null;
  spec?: Record<string, unknown>;
}

/** Updates a build; `started_at` is set on `building`, `finished_at` on `ready`/`failed`. */
export async function updateBuild(q: Queryable, id: string, patch: BuildPatch): Promise<Build> {
  const params: unknown[] = [id];
  const sets = setClause(
    { ...patch },
    {
      status: { col: "status" },
      rootfsSizeMib: { col: "rootfs_size_mib" },
      environment: { col: "environment" },
      digest: { col: "digest" },
      error: { col: "error" },
      spec: { col: "spec", json: true },
    },
    params,
  );
  if (patch.status === "building") sets.push("started_at = coalesce(started_at, now())");
  if (patch.status === "ready" || patch.status === "failed") sets.push("finished_at = coalesce(finished_at, now())");
  if (!sets.length) return getBuild(q, id);
  return q.one<Build>(`UPDATE builds SET ${sets.join(", ")} WHERE id = $1 RETURNING ${BCOLS}`, params, `build ${id}`);
}

/** Appends to a build's log text. */
export async function appendBuildLogs(q: Queryable, id: string, text: string): Promise<void> {
  const n = await q.execute(`UPDATE builds SET logs = logs || $2 WHERE id = $1`, [id, text]);
  if (!n) throw new SpaceError("not_found", `build ${id} not found`);
}

/** Points `alias:tag` (of `tenantId`, or the platform when null) at a build (upsert). */
export async function setRelease(
  q: Queryable,
  input: { tenantId: TenantId | null; templateId: string; alias: string; tag?: string; buildId: string },
): Promise<Release> {
  const tag = input.tag ?? "default";
  // Upsert by hand: the unique index is on an expression (coalesce), which ON CONFLICT cannot name portably.
  const updated = await q.maybeOne<Release>(
    `UPDATE releases SET template_id = $2, build_id = $3, updated_at = now()
      WHERE tenant_id IS NOT DISTINCT FROM $1 AND alias = $4 AND tag = $5 RETURNING ${RCOLS}`,
    [input.tenantId, input.templateId, input.buildId, input.alias, tag],
  );
  if (updated) return updated;
  try {
    return await q.one<Release>(
      `INSERT INTO releases (id, tenant_id, template_id, alias, tag, build_id) VALUES ($1, $2, $3, $4, $5, $6) RETURNING ${RCOLS}`,
      [`rl_${randomId(16)}`, input.tenantId, input.templateId, input.alias, tag, input.buildId],
    );
  } catch (e) {
    if (isUniqueViolation(e)) throw new SpaceError("aborted", `release ${input.alias}:${tag} was set concurrently; retry`);
    throw e;
  }
}

export async function listReleases(q: Queryable, templateId: string): Promise<Release[]> {
  return q.query<Release>(`SELECT ${RCOLS} FROM releases WHERE template_id = $1 ORDER BY alias, tag`, [templateId]);
}

/** Absent = ok. */
export async function deleteRelease(q: Queryable, tenantId: TenantId | null, alias: string, tag = "default"): Promise<void> {
  await q.execute(`DELETE FROM releases WHERE tenant_id IS NOT DISTINCT FROM $1 AND alias = $2 AND tag = $3`, [tenantId, alias, tag]);
}

export interface ResolvedTemplate {
  template: Template;
  build: Build;
  release: Release | null;
}

/**
 * Resolves `ref` for `tenantId`: `alias[:tag]` through releases (own, then platform, then
 * public templates' releases), else a template id (its `default` release, else its newest
 * ready build). not_found names `ref`; failed_precondition when the template has no ready build.
 */
export async function resolveTemplate(q: Queryable, tenantId: TenantId, ref: string): Promise<ResolvedTemplate> {
  const colon = ref.lastIndexOf(":");
  const alias = colon > 0 ? ref.slice(0, colon) : ref;
  const tag = colon > 0 ? ref.slice(colon + 1) : "default";
  const byAlias = await q.maybeOne<{ r: Release; t: Template; b: Build }>(
    `SELECT row_to_json(r) AS r, row_to_json(t) AS t, row_to_json(b) AS b
       FROM releases r JOIN templates t ON t.id = r.template_id AND t.deleted_at IS NULL JOIN builds b ON b.id = r.build_id
      WHERE r.alias = $2 AND r.tag = $3 AND (r.tenant_id = $1 OR r.tenant_id IS NULL OR t.public)
      ORDER BY (r.tenant_id = $1) DESC NULLS LAST, (r.tenant_id IS NULL) DESC LIMIT 1`,
    [tenantId, alias, tag],
  );
  if (byAlias) return { template: camel(byAlias.t), build: camel(byAlias.b), release: camel(byAlias.r) };
  if (colon > 0 && tag !== "default") throw new SpaceError("not_found", `template ${ref} not found`);
  const t = await q.maybeOne<Template>(`SELECT ${TCOLS} FROM templates t WHERE id = $1 AND deleted_at IS NULL AND ${visible("t", 2)}`, [ref, tenantId]);
  if (!t) throw new SpaceError("not_found", `template ${ref} not found`);
  const release = await q.maybeOne<Release>(
    `SELECT ${RCOLS} FROM releases WHERE template_id = $1 AND tag = 'default' ORDER BY (tenant_id = $2) DESC NULLS LAST LIMIT 1`,
    [t.id, tenantId],
  );
  const build = release ? await getBuild(q, release.buildId) : await latestReadyBuild(q, t.id);
  if (!build) throw new SpaceError("failed_precondition", `template ${ref} has no ready build yet`);
  return { template: t, build, release: release ?? null };
}

/** row_to_json gives snake_case keys and ISO strings; convert to the TS shapes. */
function camel<T>(row: unknown): T {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(row as Record<string, unknown>)) {
    const key = k.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
    out[key] = typeof v === "string" && /_at$/.test(k) ? new Date(v) : v;
  }
  return out as T;
}
