/**
 * The store-wide counts behind the controller's scraped gauges (controller/fleet-metrics.ts).
 * Each is one aggregate over an indexed set: live sandboxes (`sandboxes_state`), pending
 * operations (`operations_pending`), registered nodes.
 */
import type { Queryable } from "./db.ts";

/** Live sandboxes (not killed or failed) by state and template (its alias when it has one). */
export async function countSandboxesByState(q: Queryable): Promise<Array<{ state: string; template: string; count: number }>> {
  const rows = await q.query<{ state: string; template: string | null; count: string | number }>(
    `SELECT state, coalesce(alias, template_id) AS template, count(*) AS count FROM sandboxes
      WHERE state NOT IN ('killed', 'failed') GROUP BY state, coalesce(alias, template_id)`,
  );
  return rows.map((r) => ({ state: r.state, template: r.template ?? "", count: Number(r.count) }));
}

/** Operations waiting or being worked on, by kind and state, with the age of the oldest (seconds since queued). */
export async function operationQueue(q: Queryable): Promise<Array<{ kind: string; state: string; count: number; oldestAgeSeconds: number }>> {
  const rows = await q.query<{ kind: string; state: string; count: string | number; oldest: string | number | null }>(
    `SELECT kind, state, count(*) AS count, extract(epoch FROM now() - min(queued_at)) AS oldest FROM operations
      WHERE state IN ('queued', 'claimed') GROUP BY kind, state`,
  );
  return rows.map((r) => ({ kind: r.kind, state: r.state, count: Number(r.count), oldestAgeSeconds: Number(r.oldest ?? 0) }));
}

/** Registered nodes by status. */
export async function countNodesByStatus(q: Queryable): Promise<Array<{ status: string; count: number }>> {
  const rows = await q.query<{ status: string; count: string | number }>(`SELECT status, count(*) AS count FROM nodes GROUP BY status`);
  return rows.map((r) => ({ status: r.status, count: Number(r.count) }));
}
