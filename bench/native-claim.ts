/**
 * Dispatcher pickup alone (no HTTP, no-op handler): queued → claimed and → succeeded
 * medians for sequential enqueues, on PGlite or Postgres (SPACE_BENCH_ENGINE).
 */
import { pino } from "pino";
import { freshDb } from "../test/support/db.ts";
import { startDispatcher } from "../src/controller/dispatcher.ts";
import { enqueueOperation, waitForOperation } from "../src/store/operations.ts";
import { createTenant } from "../src/store/tenants.ts";
import { median } from "./support/stats.ts";

const engine = (process.env.SPACE_BENCH_ENGINE ?? "pglite") as "pglite" | "postgres";
const t = await freshDb(engine);
const tenant = await createTenant(t.db, { name: "bench" });
const d = await startDispatcher({
  db: t.db,
  log: pino({ level: "silent" }),
  config: { SPACE_CONTROLLER_TICK_MS: 25, SPACE_CONTROLLER_CLAIM_LIMIT: 16, SPACE_CONTROLLER_CLAIM_STALE_MS: 60_000 },
  handlers: { "bench.noop": async () => null },
});
const claim: number[] = [];
const done: number[] = [];
const notifyToClaim: number[] = [];
for (let i = 0; i < 200; i++) {
  const t0 = performance.now();
  const { operation } = await enqueueOperation(t.db, { tenantId: tenant.id, kind: "bench.noop", request: { i } });
  const op = await waitForOperation(t.db, operation.id, { timeoutMs: 5000, pollMs: 1 });
  notifyToClaim.push(performance.now() - t0);
  claim.push(op.claimedAt!.getTime() - op.queuedAt.getTime());
  done.push(op.succeededAt!.getTime() - op.queuedAt.getTime());
}
console.log(JSON.stringify({ engine, queued_to_claimed_median_ms: median(claim), queued_to_succeeded_median_ms: median(done), client_enqueue_to_done_median_ms: Number(median(notifyToClaim).toFixed(2)) }));
await d.stop();
await t.drop();
