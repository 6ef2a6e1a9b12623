/** Tenants: the isolation boundary of every other row. */
import { SpaceError } from "../core/errors.ts";
import { newTenantId, type TenantId } from "../core/ids.ts";
import type { Queryable } from "./db.ts";
import { columns, isUniqueViolation } from "./sql.ts";

export interface Tenant {
  id: TenantId;
  name: string;
  createdAt: Date;
  disabledAt: Date | null;
}

const COLS = columns(["id", "name", "created_at", "disabled_at"]);

/** Creates a tenant; `already_exists` when the name is taken. */
export async function createTenant(q: Queryable, input: { name: string; id?: TenantId }): Promise<Tenant> {
  try {
    return await q.one<Tenant>(`INSERT INTO tenants (id, name) VALUES ($1, $2) RETURNING ${COLS}`, [input.id ?? newTenantId(), input.name]);
  } catch (e) {
    if (isUniqueViolation(e)) throw new SpaceError("already_exists", `tenant ${JSON.stringify(input.name)} already exists`);
    throw e;
  }
}

/** The tenant named `name`, created if missing (bootstrap; safe under concurrency). */
export async function ensureTenant(q: Queryable, input: { name: string; id?: TenantId }): Promise<Tenant> {
  await q.query(`INSERT INTO tenants (id, name) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`, [input.id ?? newTenantId(), input.name]);
  return q.one<Tenant>(`SELECT ${COLS} FROM tenants WHERE name = $1`, [input.name], `tenant ${input.name}`);
}

export async function getTenant(q: Queryable, id: TenantId): Promise<Tenant> {
  return q.one<Tenant>(`SELECT ${COLS} FROM tenants WHERE id = $1`, [id], `tenant ${id}`);
}

export async function findTenantByName(q: Queryable, name: string): Promise<Tenant | undefined> {
  return q.maybeOne<Tenant>(`SELECT ${COLS} FROM tenants WHERE name = $1`, [name]);
}

export async function listTenants(q: Queryable): Promise<Tenant[]> {
  return q.query<Tenant>(`SELECT ${COLS} FROM tenants ORDER BY created_at, id`);
}

/** Disables (true) or re-enables (false) a tenant; its keys stop authenticating while disabled. */
export async function setTenantDisabled(q: Queryable, id: TenantId, disabled: boolean): Promise<Tenant> {
  return q.one<Tenant>(
    `UPDATE tenants SET disabled_at = CASE WHEN $2 THEN coalesce(disabled_at, now()) ELSE NULL END WHERE id = $1 RETURNING ${COLS}`,
    [id, disabled],
    `tenant ${id}`,
  );
}

/** Deletes a tenant and (cascade) everything it owns. Absent = ok. */
export async function deleteTenant(q: Queryable, id: TenantId): Promise<void> {
  await q.execute(`DELETE FROM tenants WHERE id = $1`, [id]);
}
