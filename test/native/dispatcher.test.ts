/**
 * The dispatcher (behaviours.md A) with test-double handlers, on PGlite and real
 * Postgres: slow operations do not block later work, NOTIFY wakes it before the tick,
 * stale claims are re-claimed, deadlines fail as deadline_exceeded, replicas never run
 * one operation twice, and stop hands interrupted work back.
 */
import { describe, test, before, after } from "node:test";
import assert from "node:assert/strict";
import { pino } from "pino";
import { freshDb, testEngines, waitFor, type TestDb } from "../support/db.ts";
import { startDispatcher, type Dispatcher } from "../../src/controller/dispatcher.ts";
import type { HandlerMap } from "../../src/operations/handler.ts";
import { enqueueOperation, getOperation, type Operation } from "../../src/store/operations.ts";
import { createTenant, type Tenant } from "../../src/store/tenants.ts";
import { SpaceError } from "../../src/core/errors.ts";
import type { Db } from "../../src/store/db.ts";

const log = pino({ level: "silent" });
const cfg = (o: { tick?: number; stale?: number; limit?: number } = {}) => ({
  SPACE_CONTROLLER_TICK_MS: o.tick ?? 25,
  SPACE_CONTROLLER_CLAIM_LIMIT: o.limit ?? 16,
  SPACE_CONTROLLER_CLAIM_STALE_MS: o.stale ?? 60_000,
});

for (const engine of testEngines()) {
  describe(`dispatcher on ${engine.name}`, { skip: engine.skip }, () => {
    let t: TestDb;
    let tenant: Tenant;
    const running: Dispatcher[] = [];
    const start = async (db: Db, handlers: HandlerMap, o: Parameters<typeof cfg>[0] = {}, workerId?: string) => {
      const d = await startDispatcher({ db, log, config: cfg(o), handlers, ...(workerId ? { workerId } : {}) });
      running.push(d);
      return d;
    };
    const enqueue = async (kind: string, request: unknown = {}, o: { deadlineMs?: number; target?: string } = {}) =>
      (await enqueueOperation(t.db, { tenantId: tenant.id, kind, request, targetId: o.target ?? null, ...(o.deadlineMs ? { deadlineMs: o.deadlineMs } : {}) })).operation;
    const done = (id: string, timeoutMs = 10_000) =>
      waitFor(async () => {
        const op = await getOperation(t.db, id);
        return op.state === "succeeded" || op.state === "failed" ? op : undefined;
      }, { timeoutMs, what: `operation ${id} to end` });

    before(async () => {
      t = await freshDb(engine.name);
      tenant = await createTenant(t.db, { name: "t" });
    });
    after(async () => {
      for (const d of running) await d.stop();
      await t.drop();
    });

    test("slow_operation_does_not_block_later_work", async () => {
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      const d = await start(t.db, {
        "test.slow": async () => {
          await gate;
          return { slow: true };
        },
        "test.fast": async ({ op }) => ({ echo: op.request }),
      });
      const slow = await enqueue("test.slow");
      await waitFor(async () => (await getOperation(t.db, slow.id)).state === "claimed", { what: "slow claimed" });
      const fast = await Promise.all(Array.from({ length: 20 }, (_, i) => enqueue("test.fast", { i })));
      for (const f of fast) assert.equal((await done(f.id, 5000)).state, "succeeded");
      assert.equal((await getOperation(t.db, slow.id)).state, "claimed", "slow one still running");
      release();
      const s = await done(slow.id);
      assert.equal(s.state, "succeeded");
      assert.deepEqual(s.result, { slow: true });
      await d.stop();
    });

    test("NOTIFY wakes the dispatcher before its tick; failures carry toOperationFailure codes", async () => {
      const d = await start(t.db, {
        "test.ok": async () => "ok",
        "test.bad": async () => {
          throw new SpaceError("invalid_argument", "field x is wrong");
        },
        "test.gone": async () => {
          throw new SpaceError("not_found", "sandbox y not found");
        },
        "test.bug": async () => {
          throw new Error("boom");
        },
      }, { tick: 10_000 });
      // Let the first (immediate) claim pass, so the next pickup can only come from NOTIFY.
      await new Promise((r) => setTimeout(r, 100));
      const lat: number[] = [];
      for (let i = 0; i < 5; i++) {
        const op = await enqueue("test.ok");
        const end = await done(op.id, 3000);
        lat.push(end.claimedAt!.getTime() - end.queuedAt.getTime());
      }
      assert.ok(Math.max(...lat) < 1000, `claimed well before the 10 s tick: ${lat.join(",")} ms`);
      const bad = await done((await enqueue("test.bad")).id);
      assert.deepEqual([bad.state, bad.failureCode, bad.failureMessage], ["failed", "invalid_request", "field x is wrong"]);
      assert.equal((await done((await enqueue("test.gone")).id)).failureCode, "not_found");
      const bug = await done((await enqueue("test.bug")).id);
      assert.equal(bug.failureCode, "internal");
      assert.match(bug.failureMessage ?? "", /boom/);
      const unknown = await done((await enqueue("test.nohandler")).id);
      assert.equal(unknown.failureCode, "internal");
      assert.match(unknown.failureMessage ?? "", /no handler/);
      await d.stop();
    });

    test("deadline: an operation past its deadline fails deadline_exceeded (create: 30 min by default)", async () => {
      const d = await start(t.db, { "test.hang": ({ signal }) => new Promise((_, rej) => signal.addEventListener("abort", () => rej(signal.reason))) });
      const op = await enqueue("test.hang", {}, { deadlineMs: 300 });
      const end = await done(op.id);
      assert.equal(end.state, "failed");
      assert.equal(end.failureCode, "deadline_exceeded");
      await d.stop();
    });

    test("a claimed operation whose claimer died is re-claimed after the staleness window", async () => {
      const op = await enqueue("test.reclaim");
      // A dead claimer: claimed, heartbeat long ago.
      await t.db.execute(
        `UPDATE operations SET state = 'claimed', claimed_by = 'dead-worker', claim_count = 1, claimed_at = now() - interval '1 hour', heartbeat_at = now() - interval '1 hour' WHERE id = $1`,
        [op.id],
      );
      const fresh = await enqueue("test.reclaim");
      await t.db.execute(`UPDATE operations SET state = 'claimed', claimed_by = 'live-worker', claim_count = 1, claimed_at = now(), heartbeat_at = now() WHERE id = $1`, [fresh.id]);
      const seen: Operation[] = [];
      const d = await start(t.db, { "test.reclaim": async ({ op }) => void seen.push(op) }, { stale: 2000 });
      const end = await done(op.id);
      assert.equal(end.state, "succeeded");
      assert.equal(end.claimCount, 2);
      assert.notEqual(end.claimedBy, "dead-worker");
      assert.equal(seen.filter((o) => o.id === op.id)[0]!.claimCount, 2, "the handler can tell it is a re-run");
      assert.equal((await getOperation(t.db, fresh.id)).state, "claimed", "a live claim is left alone");
      await d.stop();
      await t.db.execute(`UPDATE operations SET state = 'failed', failure_code = 'internal', failure_message = 'test cleanup' WHERE id = $1`, [fresh.id]);
    });

    test("stop hands interrupted operations back to the queue; the next dispatcher runs them", async () => {
      const first = await start(t.db, { "test.long": ({ signal }) => new Promise((_, rej) => signal.addEventListener("abort", () => rej(signal.reason))) }, {}, "first");
      const op = await enqueue("test.long");
      await waitFor(async () => (await getOperation(t.db, op.id)).state === "claimed", { what: "claimed" });
      await first.stop();
      assert.equal((await getOperation(t.db, op.id)).state, "queued");
      const second = await start(t.db, { "test.long": async () => "done" }, {}, "second");
      const end = await done(op.id);
      assert.equal(end.state, "succeeded");
      assert.equal(end.claimedBy, "second");
      await second.stop();
    });

    test("operations on one sandbox run in order; one waiting behind a slow one keeps its claim", async () => {
      const order: string[] = [];
      const runs = new Map<string, number>();
      const d = await start(t.db, {
        "sandbox.pause": async ({ op }) => {
          runs.set(op.id, (runs.get(op.id) ?? 0) + 1);
          order.push(`start ${(op.request as { n: number }).n}`);
          await new Promise((r) => setTimeout(r, (op.request as { ms: number }).ms));
          order.push(`end ${(op.request as { n: number }).n}`);
        },
      }, { stale: 1000 });
      const target = "sandboxes/aaaaaaaaaaaaaaaaaaaa";
      const first = await enqueue("sandbox.pause", { n: 1, ms: 2500 }, { target });
      const second = await enqueue("sandbox.pause", { n: 2, ms: 10 }, { target });
      const other = await enqueue("sandbox.pause", { n: 3, ms: 10 }, { target: "sandboxes/bbbbbbbbbbbbbbbbbbbb" });
      assert.equal((await done(other.id)).state, "succeeded");
      assert.equal((await done(first.id)).state, "succeeded");
      const s2 = await done(second.id);
      assert.equal(s2.state, "succeeded");
      assert.equal(s2.claimCount, 1, "the waiting claim was heartbeated, never re-claimed");
      assert.deepEqual(order.filter((x) => !x.endsWith(" 3")), ["start 1", "end 1", "start 2", "end 2"]);
      assert.ok([...runs.values()].every((n) => n === 1));
      await d.stop();
    });

    test("several replicas never run one operation twice", async () => {
      const dbs = engine.name === "postgres" ? [t.db, await t.openAnother(), await t.openAnother()] : [t.db, t.db, t.db];
      const runs = new Map<string, number>();
      const handler: HandlerMap = {
        "test.count": async ({ op }) => {
          runs.set(op.id, (runs.get(op.id) ?? 0) + 1);
          await new Promise((r) => setTimeout(r, Math.random() * 10));
          return null;
        },
      };
      const replicas = await Promise.all(dbs.map((db, i) => start(db, handler, { limit: 4 }, `replica-${i}`)));
      const ops = await Promise.all(Array.from({ length: 150 }, (_, i) => enqueue("test.count", { i })));
      for (const op of ops) assert.equal((await done(op.id, 20_000)).state, "succeeded");
      assert.equal(runs.size, 150);
      assert.ok([...runs.values()].every((n) => n === 1), "each operation ran exactly once");
      const by = await t.db.query<{ claimedBy: string; n: number }>(
        `SELECT claimed_by AS "claimedBy", count(*)::int AS n FROM operations WHERE kind = 'test.count' GROUP BY claimed_by`,
      );
      if (engine.name === "postgres") assert.ok(by.length >= 2, `work spread over replicas: ${JSON.stringify(by)}`);
      for (const r of replicas) await r.stop();
    });
  });
}
