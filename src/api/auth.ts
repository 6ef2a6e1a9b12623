/**
 * Who is calling. Three credentials, one module:
 * - ECW: `X-API-KEY` (an API key, stored hashed) → a tenant;
 * - Native: `Authorization: Bearer <token>` with scopes, or an API key as bearer (all tenant scopes);
 * - Admin: `Authorization: Bearer <admin token>` (from config), or a token with the `admin` scope.
 * Unknown credentials are 401; a missing scope is 403 naming it.
 */
import { timingSafeEqual, createHash } from "node:crypto";
import type { FastifyRequest } from "fastify";
import { SpaceError } from "../core/errors.ts";
import { Recent } from "../core/recent.ts";
import type { TenantId } from "../core/ids.ts";
import type { Queryable } from "../store/db.ts";
import { lookupApiKey } from "../store/api-keys.ts";
import { hasScope, verifyToken } from "../store/tokens.ts";
import type { ApiKeyAuth } from "../sandboxes/model.ts";

export const tenantScopes = [
  "sandboxes:read",
  "sandboxes:write",
  "commands:exec",
  "templates:read",
  "templates:write",
  "volumes:read",
  "volumes:write",
  // The tenant's own API keys and tokens (/v1/api-keys, /v1/tokens).
  "credentials:read",
  "credentials:write",
] as const;
export type Scope = (typeof tenantScopes)[number] | "admin";

/** A token's longest life: ten years (a Date holds ±8.64e15 ms). */
export const TOKEN_MAX_LIFETIME_S = 10 * 365 * 86_400;

export interface Principal {
  /** null only for the cluster admin. */
  tenantId: TenantId | null;
  scopes: string[];
  kind: "api_key" | "token" | "admin";
  /** A token's own expiry (null: none); what it creates may not outlive it. */
  expiresAt?: Date | null;
}

/** The E2B SDK reads the numeric `code` of this body; wording matches E2B's. */
export const invalidApiKey = () => new SpaceError("unauthenticated", "Invalid API key");

/**
 * Credentials verified in the last CACHE_MS, per database. Every request paid a lookup (one
 * or two queries: ~2 ms each on PGlite, on the path of a create and of its first command).
 * Revoking a key or token or disabling a tenant through this process forgets them at once
 * (forgetCredentials); a change made through another replica is seen within CACHE_MS.
 */
const CACHE_MS = 1000;
const verified = new WeakMap<Queryable, Recent<Principal>>();
/** Lookups in flight, per database: a burst of requests with one key (cache expired) pays one. */
const verifying = new WeakMap<Queryable, Map<string, Promise<Principal | undefined>>>();
/** Per database: how many times its credentials were forgotten (a lookup older than that is not remembered). */
const forgotten = new WeakMap<Queryable, number>();

/** Only what verified is kept: a key made a moment ago works at once. */
function cached(db: Queryable, kind: string, secret: string, lookup: () => Promise<{ principal: Principal; expiresAt?: Date | null } | undefined>): Promise<Principal | undefined> {
  const key = `${kind}:${createHash("sha256").update(secret).digest("hex")}`;
  const hit = verified.get(db)?.get(key);
  if (hit) return Promise.resolve(hit);
  let inflight = verifying.get(db);
  if (!inflight) verifying.set(db, (inflight = new Map()));
  const joined = inflight.get(key);
  if (joined) return joined;
  const gen = forgotten.get(db) ?? 0;
  const p = (async () => {
    const found = await lookup();
    if (!found) return undefined;
    // Forgotten while it was read: answer this request, remember nothing.
    if ((forgotten.get(db) ?? 0) !== gen) return found.principal;
    let recent = verified.get(db);
    if (!recent) verified.set(db, (recent = new Recent<Principal>(CACHE_MS, 10_000)));
    recent.set(key, found.principal, found.expiresAt ? found.expiresAt.getTime() - Date.now() : CACHE_MS);
    return found.principal;
  })().finally(() => {
    if (inflight.get(key) === p) inflight.delete(key);
  });
  inflight.set(key, p);
  return p;
}

/** Drops every remembered credential of `db` (a key or token revoked, a tenant disabled). */
export function forgetCredentials(db: Queryable): void {
  verified.get(db)?.clear();
  verifying.get(db)?.clear();
  forgotten.set(db, (forgotten.get(db) ?? 0) + 1);
}

const apiKeyPrincipal = (db: Queryable, key: string) =>
  cached(db, "key", key, async () => {
    const found = await lookupApiKey(db, key);
    return found && { principal: { tenantId: found.tenant.id, scopes: [...tenantScopes], kind: "api_key" } };
  });

/** The tenant of an ECW API key, or null (unknown, revoked, tenant disabled). */
export async function tenantOfApiKey(db: Queryable, key: string): Promise<TenantId | null> {
  return (await apiKeyPrincipal(db, key))?.tenantId ?? null;
}

/** ECW's API keys, as the sandbox service's edge checks them (remembered as above). */
export class StoreApiKeys implements ApiKeyAuth {
  constructor(private readonly db: Queryable) {}
  tenantForApiKey(rawKey: string): Promise<TenantId | null> {
    return tenantOfApiKey(this.db, rawKey);
  }
}

export async function authenticateApiKey(db: Queryable, key: string | undefined): Promise<Principal> {
  if (!key) throw new SpaceError("unauthenticated", "Invalid API key: the X-API-KEY header is missing");
  const found = await apiKeyPrincipal(db, key);
  if (!found) throw invalidApiKey();
  return found;
}

function sameSecret(a: string, b: string): boolean {
  const ha = createHash("sha256").update(a).digest();
  const hb = createHash("sha256").update(b).digest();
  return timingSafeEqual(ha, hb);
}

export function bearerOf(req: FastifyRequest): string | undefined {
  const h = req.headers.authorization;
  if (!h) return undefined;
  const m = /^Bearer\s+(.+)$/i.exec(h);
  return m?.[1]?.trim();
}

/** A Native/Admin bearer: a scoped token, an API key, or the admin token. */
export async function authenticateBearer(db: Queryable, bearer: string | undefined, adminToken: string): Promise<Principal> {
  if (!bearer) throw new SpaceError("unauthenticated", "missing credentials: send Authorization: Bearer <token>");
  if (adminToken && sameSecret(bearer, adminToken)) return { tenantId: null, scopes: ["admin"], kind: "admin" };
  const token = await cached(db, "token", bearer, async () => {
    const t = await verifyToken(db, bearer);
    return t && { principal: { tenantId: t.tenantId, scopes: t.scopes, kind: "token", expiresAt: t.expiresAt }, expiresAt: t.expiresAt };
  });
  if (token) return token;
  const key = await apiKeyPrincipal(db, bearer);
  if (key) return key;
  throw new SpaceError("unauthenticated", "invalid credentials: unknown, revoked or expired token");
}

/** The scopes of `wanted` that `p` does not hold (none for the admin scope). */
export function scopesLacking(p: Principal, wanted: readonly string[]): string[] {
  if (p.scopes.includes("admin")) return [];
  return wanted.filter((s) => !hasScope(p, s));
}

export function requireScope(p: Principal, scope: Scope): void {
  if (p.scopes.includes("admin")) return;
  if (!hasScope(p, scope)) throw new SpaceError("permission_denied", `missing scope ${scope}: this token has [${p.scopes.join(", ")}]`);
}

/** The tenant a request acts for; the admin must name one (e.g. `?tenant=`). */
export function requireTenant(p: Principal): TenantId {
  if (!p.tenantId) throw new SpaceError("invalid_argument", "this credential belongs to no tenant; use a tenant's key or token");
  return p.tenantId;
}
