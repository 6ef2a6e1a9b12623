/** Small helpers shared by the query modules. */
import { createHash } from "node:crypto";
import { SpaceError } from "../core/errors.ts";

/** sha256 hex of a secret (API keys, tokens, bootstrap secrets): what the store keeps. */
export function hashSecret(secret: string): string {
  return createHash("sha256").update(secret, "utf8").digest("hex");
}

/** A jsonb parameter: always pass through this and cast `$n::jsonb` in SQL. */
export const json = (v: unknown): string => JSON.stringify(v ?? null);

/** Postgres SQLSTATE of a driver error (pg and PGlite both expose `code`). */
export function sqlState(e: unknown): string | undefined {
  const c = (e as { code?: unknown } | null)?.code;
  return typeof c === "string" && /^[0-9A-Z]{5}$/.test(c) ? c : undefined;
}
export const isUniqueViolation = (e: unknown) => sqlState(e) === "23505";
export const isForeignKeyViolation = (e: unknown) => sqlState(e) === "23503";

/** `SELECT` list that renames snake_case columns to the camelCase of the TS types. */
export function columns(cols: readonly string[], table?: string): string {
  return cols
    .map((c) => {
      const camel = c.replace(/_([a-z])/g, (_, ch: string) => ch.toUpperCase());
      const ref = table ? `${table}.${c}` : c;
      return camel === c ? ref : `${ref} AS "${camel}"`;
    })
    .join(", ");
}

/** Keyset cursor over (created_at, seq): opaque to clients, exact to the microsecond. */
export interface KeysetCursor {
  /** `created_at::text` of the last row returned (keeps microseconds and offset). */
  at: string;
  seq: number;
}
export function encodeCursor(c: KeysetCursor): string {
  return Buffer.from(JSON.stringify([c.at, c.seq]), "utf8").toString("base64url");
}
export function decodeCursor(s: string): KeysetCursor {
  try {
    const v: unknown = JSON.parse(Buffer.from(s, "base64url").toString("utf8"));
    if (Array.isArray(v) && v.length === 2 && typeof v[0] === "string" && Number.isSafeInteger(v[1]) && /^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d{1,6})?([+-]\d{2}(:?\d{2}){0,2}|Z)?$/.test(v[0])) {
      return { at: v[0], seq: v[1] as number };
    }
  } catch {
    /* fall through */
  }
  throw new SpaceError("invalid_argument", `cursor ${JSON.stringify(s.slice(0, 64))} is not a cursor this server issued`, { details: { field: "nextToken" } });
}

/** Clamps a page size to [1, max]. */
export function pageLimit(limit: number | undefined, dflt = 100, max = 1000): number {
  if (limit === undefined) return dflt;
  if (!Number.isInteger(limit) || limit < 1) throw new SpaceError("invalid_argument", `limit ${limit} must be a positive integer`, { details: { field: "limit" } });
  return Math.min(limit, max);
}

/**
 * Builds `SET col = $n, …` from a patch whose keys are in `allowed` (camelCase → column);
 * jsonb columns get `::jsonb`. `params` is appended to; returns the SET fragments.
 */
export function setClause(
  patch: Record<string, unknown>,
  allowed: Record<string, { col: string; json?: boolean }>,
  params: unknown[],
): string[] {
  const out: string[] = [];
  for (const [k, v] of Object.entries(patch)) {
    if (v === undefined) continue;
    const spec = allowed[k];
    if (!spec) throw new SpaceError("internal", `field ${k} cannot be patched`);
    params.push(spec.json ? json(v) : v);
    out.push(`${spec.col} = $${params.length}${spec.json ? "::jsonb" : ""}`);
  }
  return out;
}
