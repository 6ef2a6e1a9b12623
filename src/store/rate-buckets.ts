/**
 * Token buckets in the database: one row per key (a tenant, an API key), refilled from
 * the database clock, taken in one statement (INSERT … ON CONFLICT DO UPDATE … RETURNING),
 * so every API replica shares the bucket and no two replicas both take its last token.
 */
import type { Queryable } from "./db.ts";

export interface BucketTake {
  allowed: boolean;
  /** Tokens left after this take (fractional: the refill is continuous). */
  tokens: number;
}

/**
 * Takes one token from `key`'s bucket (`ratePerS` refill, at most `burst` tokens; a new
 * bucket starts full). Refused when less than one token is left; the refill still counts.
 */
export async function takeBucketToken(q: Queryable, key: string, ratePerS: number, burst: number): Promise<BucketTake> {
  const refilled = `least($3::float8, b.tokens + greatest(0, extract(epoch FROM clock_timestamp() - b.updated_at)) * $2::float8)`;
  const r = await q.one<{ allowed: boolean; tokens: number }>(
    `INSERT INTO rate_buckets AS b (key, tokens, allowed, updated_at) VALUES ($1, $3::float8 - 1, true, clock_timestamp())
     ON CONFLICT (key) DO UPDATE SET
       tokens = CASE WHEN ${refilled} >= 1 THEN ${refilled} - 1 ELSE ${refilled} END,
       allowed = ${refilled} >= 1,
       updated_at = clock_timestamp()
     RETURNING allowed, tokens`,
    [key, ratePerS, burst],
  );
  return { allowed: r.allowed, tokens: Number(r.tokens) };
}
