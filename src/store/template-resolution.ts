/**
 * Template lookups a create makes: by release alias, by id or name, and the newest ready
 * build (its rootfs size and the execution environment it was built in). Read-only over
 * templates, releases and builds (src/store/templates.ts writes them).
 */
import type { TenantId } from "../core/ids.ts";
import type { Queryable } from "./db.ts";

export interface TemplateMatch {
  templateId: string;
  /** The alias it was found by; null when found by id. */
  alias: string | null;
  /** Rootfs size of the build found (null when it did not record one). */
  rootfsSizeMib: number | null;
}

/** The default release of `alias`: the tenant's own first, then a platform one (tenant NULL). */
export async function findTemplateByAlias(q: Queryable, alias: string, tenantId: TenantId): Promise<TemplateMatch | undefined> {
  const r = await q.maybeOne<{ templateId: string; alias: string; rootfs: number | null }>(
    `SELECT r.template_id AS "templateId", r.alias, b.rootfs_size_mib AS rootfs
       FROM releases r JOIN builds b ON b.id = r.build_id
      WHERE r.alias = $1 AND r.tag = 'default' AND (r.tenant_id = $2 OR r.tenant_id IS NULL)
      ORDER BY (r.tenant_id IS NULL) LIMIT 1`,
    [alias, tenantId],
  );
  return r ? { templateId: r.templateId, alias: r.alias, rootfsSizeMib: r.rootfs } : undefined;
}

/**
 * A template the tenant may use (own, platform or public, not deleted) by id or, else, by
 * the tenant's or a platform template's name; the rootfs size from its newest ready build.
 */
export async function findTemplateByIdOrName(q: Queryable, idOrName: string, tenantId: TenantId): Promise<TemplateMatch | undefined> {
  const r = await q.maybeOne<{ id: string; rootfs: number | null }>(
    `SELECT t.id, (SELECT b.rootfs_size_mib FROM builds b WHERE b.template_id = t.id AND b.status = 'ready'
                    ORDER BY b.created_at DESC LIMIT 1) AS rootfs
       FROM templates t
      WHERE (t.id = $1 OR (t.name = $1 AND (t.tenant_id = $2 OR t.tenant_id IS NULL)))
        AND t.deleted_at IS NULL AND (t.tenant_id = $2 OR t.tenant_id IS NULL OR t.public)
      ORDER BY (t.id = $1) DESC LIMIT 1`,
    [idOrName, tenantId],
  );
  return r ? { templateId: r.id, alias: r.id === idOrName ? null : idOrName, rootfsSizeMib: r.rootfs } : undefined;
}

/** The newest ready build of a template and the execution environment it recorded (null = none recorded). */
export async function newestReadyBuild(q: Queryable, templateId: string): Promise<{ id: string; environment: string | null } | undefined> {
  return q.maybeOne<{ id: string; environment: string | null }>(
    `SELECT id, environment FROM builds WHERE template_id = $1 AND status = 'ready' ORDER BY created_at DESC LIMIT 1`,
    [templateId],
  );
}
