/**
 * The reads template build coordination (src/templates/build-coordinator.ts) needs beyond
 * store/templates.ts: builds a previous process left running, and a tenant's own template
 * by name (names are per team, as E2B's).
 */
import type { TenantId } from "../core/ids.ts";
import type { Queryable } from "./db.ts";
import type { Template } from "./templates.ts";

/** Ids of builds in `building` (followed again after a restart). */
export async function buildingBuildIds(q: Queryable): Promise<string[]> {
  return (await q.query<{ id: string }>(`SELECT id FROM builds WHERE status = 'building'`)).map((r) => r.id);
}

/** `tenantId`'s own live template named `name` (another team's of that name is a different template). */
export async function ownTemplateByName(q: Queryable, tenantId: TenantId, name: string): Promise<Template | undefined> {
  return q.maybeOne<Template>(
    `SELECT id, tenant_id, name, public, created_at, updated_at, deleted_at FROM templates WHERE tenant_id = $1 AND name = $2 AND deleted_at IS NULL`,
    [tenantId, name],
  );
}
