/**
 * Recovery (in-process, both engines): queued creates survive the API going away; a
 * create whose claimer died mid-way is re-run safely (one running sandbox, no leak).
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { testEngines, waitFor } from "../support/db.ts";
import { getOperation } from "../../src/store/operations.ts";
import { startHarness } from "./harness.ts";

for (const engine of testEngines()) {
  describe(`native recovery on ${engine.name}`, { skip: engine.skip }, () => {
    test("queued_create_survives_api_restart: creates queued while no controller runs complete after it starts", async () => {
      const h = await startHarness(engine.name, { dispatcher: false });
      try {
        const ids: string[] = [];
        for (let i = 0; i < 5; i++) {
          const r = await h.req("POST", "/v1/sandboxes", { body: { template: "base", metadata: { i: String(i) } } });
          assert.equal(r.status, 202);
          assert.equal(r.body.state, "queued");
          ids.push(r.body.id);
        }
        await h.app.close(); // the API goes away; the rows stay
        await h.startDispatcher();
        for (const id of ids) {
          const op = await waitFor(async () => {
            const o = await getOperation(h.db, id);
            return o.state === "succeeded" || o.state === "failed" ? o : undefined;
          }, { timeoutMs: 10_000 });
          assert.equal(op.state, "succeeded", op.failureMessage ?? "");
        }
        const n = await h.db.one<{ n: number }>(`SELECT count(*)::int AS n FROM sandboxes WHERE state = 'running'`);
        assert.equal(n.n, 5);
      } finally {
        await h.close().catch(() => {});
      }
    });

    test("a create re-run after its claimer died leaves one running sandbox", async () => {
      const h = await startHarness(engine.name, { dispatcher: false });
      try {
        const r = await h.req("POST", "/v1/sandboxes", { body: { template: "base" } });
        const target = r.body.target as string;
        // First claimer: starts the create, then "dies" (its row stays claimed, heartbeat stale).
        h.substrate.startDelayMs = 60_000;
        await h.db.execute(`UPDATE operations SET state = 'claimed', claimed_by = 'dead', claim_count = 1, claimed_at = now(), heartbeat_at = now() - interval '1 hour' WHERE id = $1`, [r.body.id]);
        h.substrate.startDelayMs = 0;
        await h.startDispatcher({ staleMs: 1000 });
        const op = await waitFor(async () => {
          const o = await getOperation(h.db, r.body.id);
          return o.state === "succeeded" || o.state === "failed" ? o : undefined;
        }, { timeoutMs: 10_000 });
        assert.equal(op.state, "succeeded", op.failureMessage ?? "");
        assert.equal(op.claimCount, 2);
        const running = await h.db.query<{ id: string }>(`SELECT id FROM sandboxes WHERE state = 'running'`);
        assert.equal(running.length, 1);
        assert.equal(`sandboxes/${running[0]!.id}`, (await getOperation(h.db, r.body.id)).targetId);
        assert.ok(target);
      } finally {
        await h.close().catch(() => {});
      }
    });
  });
}
