/**
 * API keys (E2B `X-API-Key`): `e2b_` + 40 hex, the format E2B SDKs expect. The store keeps
 * only sha256(key) and a short display prefix; the plaintext is returned once, by create.
 */
import { randomBytes } from "node:crypto";
import { SpaceError } from "../core/errors.ts";
import { randomId, type TenantId } from "../core/ids.ts";
import type { Queryable } from "./db.ts";
import { columns, hashSecret, isUniqueViolation } from "./sql.ts";
import type { Tenant } from "./tenants.ts";

export { hashSecret } from "./sql.ts";

export interface ApiKey {
  id: string;
  tenantId: TenantId;
  name: string;
  /** First characters of the key, for display (`e2b_1a2b3c…`). */
  prefix: string;
  createdAt: Date;
  lastUsedAt: Date | null;
  revokedAt: Date | null;
}

const COLS = columns(["id", "tenant_id", "name", "prefix", "created_at", "last_used_at", "revoked_at"]);
const PREFIX_CHARS = 10;

export const newApiKeySecret = () => `e2b_${randomBytes(20).toString("hex")}`;

/**
 * Creates a key for `tenantId`. `plaintext` lets a bootstrap re-use a key it already
 * handed out (kept by `space up` in its data directory); otherwise one is generated.
 */
export async function createApiKey(
  q: Queryable,
  input: { tenantId: TenantId; name?: string; plaintext?: string },
): Promise<{ apiKey: ApiKey; plaintext: string }> {
  const plaintext = input.plaintext ?? newApiKeySecret();
  if (plaintext.length < 16) throw new SpaceError("invalid_argument", "an API key must be at least 16 characters", { details: { field: "key" } });
  try {
    const apiKey = await q.one<ApiKey>(
      `INSERT INTO api_keys (id, tenant_id, name, hash, prefix) VALUES ($1, $2, $3, $4, $5) RETURNING ${COLS}`,
      [`ak_${randomId(16)}`, input.tenantId, input.name ?? "", hashSecret(plaintext), plaintext.slice(0, PREFIX_CHARS)],
    );
    return { apiKey, plaintext };
  } catch (e) {
    if (isUniqueViolation(e)) throw new SpaceError("already_exists", `API key ${plaintext.slice(0, PREFIX_CHARS)}… already exists`);
    throw e;
  }
}

/**
 * The key and its tenant for a presented secret, or undefined (unknown, revoked, tenant
 * disabled). Touches `last_used_at` at most once a minute (no write per request).
 */
export async function lookupApiKey(q: Queryable, plaintext: string): Promise<{ apiKey: ApiKey; tenant: Tenant } | undefined> {
  const row = await q.maybeOne<ApiKey & { tenantName: string; tenantCreatedAt: Date }>(
    `SELECT ${columns(["id", "tenant_id", "name", "prefix", "created_at", "last_used_at", "revoked_at"], "k")},
            t.name AS "tenantName", t.created_at AS "tenantCreatedAt"
       FROM api_keys k JOIN tenants t ON t.id = k.tenant_id
      WHERE k.hash = $1 AND k.revoked_at IS NULL AND t.disabled_at IS NULL`,
    [hashSecret(plaintext)],
  );
  if (!row) return undefined;
  if (!row.lastUsedAt || Date.now() - row.lastUsedAt.getTime() > 60_000) {
    await q.execute(`UPDATE api_keys SET last_used_at = now() WHERE id = $1`, [row.id]);
  }
  const { tenantName, tenantCreatedAt, ...apiKey } = row;
  return { apiKey, tenant: { id: row.tenantId, name: tenantName, createdAt: tenantCreatedAt, disabledAt: null } };
}

/** Whether a key with this plaintext was ever created (revoked or live, whatever its tenant's state). */
export async function apiKeyRecorded(q: Queryable, plaintext: string): Promise<boolean> {
  return (await q.maybeOne<{ id: string }>(`SELECT id FROM api_keys WHERE hash = $1`, [hashSecret(plaintext)])) !== undefined;
}

export async function listApiKeys(q: Queryable, tenantId: TenantId): Promise<ApiKey[]> {
  return q.query<ApiKey>(`SELECT ${COLS} FROM api_keys WHERE tenant_id = $1 ORDER BY created_at, id`, [tenantId]);
}

/** Revokes a key of `tenantId`; `not_found` when the tenant has no such key. */
export async function revokeApiKey(q: Queryable, tenantId: TenantId, id: string): Promise<ApiKey> {
  return q.one<ApiKey>(
    `UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1 AND tenant_id = $2 RETURNING ${COLS}`,
    [id, tenantId],
    `API key ${id}`,
  );
}

/** Deletes a key. Absent = ok. */
export async function deleteApiKey(q: Queryable, tenantId: TenantId, id: string): Promise<void> {
  await q.execute(`DELETE FROM api_keys WHERE id = $1 AND tenant_id = $2`, [id, tenantId]);
}
