/**
 * Whether any warm pool exists: adoption's hint (controller/warm-pools/adoption.ts), so a
 * create in a cluster without pools pays this one cheap read and nothing more.
 */
import type { Queryable } from "./db.ts";

export async function anyWarmPool(q: Queryable): Promise<boolean> {
  return (await q.maybeOne<{ one: number }>(`SELECT 1 AS one FROM warm_pools LIMIT 1`)) !== undefined;
}
