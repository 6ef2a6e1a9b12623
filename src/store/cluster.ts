/** Cluster-wide key/value settings (substrate, bootstrap secrets — hashed —, facts). */
import type { Queryable } from "./db.ts";
import { json } from "./sql.ts";

export async function getClusterValue<T = unknown>(q: Queryable, key: string): Promise<T | undefined> {
  const r = await q.maybeOne<{ value: T }>(`SELECT value FROM cluster WHERE key = $1`, [key]);
  return r?.value;
}

export async function setClusterValue(q: Queryable, key: string, value: unknown): Promise<void> {
  await q.query(
    `INSERT INTO cluster (key, value) VALUES ($1, $2::jsonb) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()`,
    [key, json(value)],
  );
}

/** Stores `value` unless the key exists; returns the value now stored (first writer wins). */
export async function ensureClusterValue<T>(q: Queryable, key: string, value: T): Promise<T> {
  await q.query(`INSERT INTO cluster (key, value) VALUES ($1, $2::jsonb) ON CONFLICT (key) DO NOTHING`, [key, json(value)]);
  return (await getClusterValue<T>(q, key)) as T;
}

/** Absent = ok. */
export async function deleteClusterValue(q: Queryable, key: string): Promise<void> {
  await q.execute(`DELETE FROM cluster WHERE key = $1`, [key]);
}

/** Stores `value` unless the key exists; true when this call stored it. */
export async function setClusterValueIfAbsent(q: Queryable, key: string, value: unknown): Promise<boolean> {
  const n = await q.execute(`INSERT INTO cluster (key, value) VALUES ($1, $2::jsonb) ON CONFLICT (key) DO NOTHING`, [key, json(value)]);
  return n === 1;
}
