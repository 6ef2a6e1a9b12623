/**
 * Token buckets in the database: one row per key (a tenant, an API key), refilled from
 * the database clock, taken in one statement (INSERT … ON CONFLICT DO UPDATE … RETURNING),
 * so every API replica shares the bucket and no two replicas both take its last token.
 * A take may ask for several tokens (a replica's lease, api/rate-limit.ts) and give
 * unused ones back in the same statement.
 */
import type { Queryable } from "./db.ts";

export interface BucketTake {
  /** Tokens granted: `want`, or fewer (down to 0) when the bucket holds less. */
  granted: number;
  /** Tokens left after this take (fractional: the refill is continuous). */
  tokens: number;
}

/**
 * Takes up to `want` whole tokens from `key`'s bucket (`ratePerS` refill, at most `burst`
 * tokens; a new bucket starts full), after putting `giveBack` unused ones back. A take
 * granted fewer than `want` found the bucket short; the refill still counts.
 */
export async function takeBucketTokens(q: Queryable, key: string, ratePerS: number, burst: number, want = 1, giveBack = 0): Promise<BucketTake> {
  const refilled = `least($3::float8, b.tokens + $5::float8 + greatest(0, extract(epoch FROM clock_timestamp() - b.updated_at)) * $2::float8)`;
  const granted = `least($4::float8, floor(${refilled}))`;
  const r = await q.one<{ granted: number; tokens: number }>(
    `INSERT INTO rate_buckets AS b (key, tokens, allowed, granted, updated_at)
     VALUES ($1, $3::float8 - least($4::float8, floor($3::float8)), least($4::float8, floor($3::float8)) >= 1, least($4::float8, floor($3::float8)), clock_timestamp())
     ON CONFLICT (key) DO UPDATE SET
       tokens = ${refilled} - ${granted},
       granted = ${granted},
       allowed = ${granted} >= 1,
       updated_at = clock_timestamp()
     RETURNING granted, tokens`,
    [key, ratePerS, burst, want, giveBack],
  );
  return { granted: Number(r.granted), tokens: Number(r.tokens) };
}
