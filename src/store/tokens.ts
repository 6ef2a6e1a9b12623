/**
 * Scoped bearer tokens (Native and Admin APIs). Hash-only at rest like API keys.
 * `tenantId` null = a cluster token (admin). Scope `*` grants everything.
 */
import { randomBytes } from "node:crypto";
import { SpaceError } from "../core/errors.ts";
import { randomId, type TenantId } from "../core/ids.ts";
import type { Queryable } from "./db.ts";
import { columns, hashSecret, isUniqueViolation } from "./sql.ts";

export interface Token {
  id: string;
  tenantId: TenantId | null;
  name: string;
  prefix: string;
  scopes: string[];
  createdAt: Date;
  expiresAt: Date | null;
  lastUsedAt: Date | null;
  revokedAt: Date | null;
}

const COLS = columns(["id", "tenant_id", "name", "prefix", "scopes", "created_at", "expires_at", "last_used_at", "revoked_at"]);

export const newTokenSecret = () => `spt_${randomBytes(24).toString("base64url")}`;

export async function createToken(
  q: Queryable,
  input: { tenantId: TenantId | null; scopes: string[]; name?: string; expiresAt?: Date | null; plaintext?: string },
): Promise<{ token: Token; plaintext: string }> {
  const plaintext = input.plaintext ?? newTokenSecret();
  if (plaintext.length < 16) throw new SpaceError("invalid_argument", "a token must be at least 16 characters", { details: { field: "token" } });
  try {
    const token = await q.one<Token>(
      `INSERT INTO tokens (id, tenant_id, name, hash, prefix, scopes, expires_at)
       VALUES ($1, $2, $3, $4, $5, $6::text[], $7) RETURNING ${COLS}`,
      [`tk_${randomId(16)}`, input.tenantId, input.name ?? "", hashSecret(plaintext), plaintext.slice(0, 10), input.scopes, input.expiresAt ?? null],
    );
    return { token, plaintext };
  } catch (e) {
    if (isUniqueViolation(e)) throw new SpaceError("already_exists", `token ${plaintext.slice(0, 10)}… already exists`);
    throw e;
  }
}

/** The live token for a presented secret (not revoked, not expired), or undefined. */
export async function verifyToken(q: Queryable, plaintext: string): Promise<Token | undefined> {
  const t = await q.maybeOne<Token>(
    `SELECT ${COLS} FROM tokens
      WHERE hash = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
        AND (tenant_id IS NULL OR tenant_id IN (SELECT id FROM tenants WHERE disabled_at IS NULL))`,
    [hashSecret(plaintext)],
  );
  if (t && (!t.lastUsedAt || Date.now() - t.lastUsedAt.getTime() > 60_000)) {
    await q.execute(`UPDATE tokens SET last_used_at = now() WHERE id = $1`, [t.id]);
  }
  return t;
}

/** Whether `token` grants `scope` (exact, `*`, or a `prefix:*` wildcard such as `sandboxes:*`). */
export function hasScope(token: Pick<Token, "scopes">, scope: string): boolean {
  return token.scopes.some((s) => s === "*" || s === scope || (s.endsWith(":*") && scope.startsWith(s.slice(0, -1))));
}

export async function listTokens(q: Queryable, tenantId: TenantId | null): Promise<Token[]> {
  return q.query<Token>(`SELECT ${COLS} FROM tokens WHERE tenant_id IS NOT DISTINCT FROM $1 ORDER BY created_at, id`, [tenantId]);
}

export async function revokeToken(q: Queryable, tenantId: TenantId, id: string): Promise<Token> {
  return q.one<Token>(
    `UPDATE tokens SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1 AND tenant_id = $2 RETURNING ${COLS}`,
    [id, tenantId],
    `token ${id}`,
  );
}
