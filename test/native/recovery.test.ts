/**
 * Recovery (in-process, both engines): queued creates survive the API going away; a
 * create whose claimer died mid-way is re-run safely (one running sandbox, no leak); a
 * command that ran to its end while its claimer was dead ends with its real exit code.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { testEngines, waitFor } from "../support/db.ts";
import { getOperation } from "../../src/store/operations.ts";
import { markCommandRunning } from "../../src/store/commands.ts";
import { createSandbox, startHarness } from "./harness.ts";

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

    for (const pidRecorded of [true, false]) {
      test(`a command that ended while its claimer was dead ends succeeded with its exit code (pid ${pidRecorded ? "recorded" : "not recorded"})`, async () => {
        const h = await startHarness(engine.name);
        try {
          const id = await createSandbox(h);
          await h.dispatcher!.stop();
          const r = await h.req("POST", `/v1/sandboxes/${id}/commands`, { body: { cmd: "false" } });
          assert.equal(r.status, 202);
          const cid = r.body.target.split("/")[3] as string;
          // The dead claimer started it (tagged with the command id) and died; it ran to its end unwatched.
          await h.db.execute(`UPDATE operations SET state = 'claimed', claimed_by = 'dead', claim_count = 1, claimed_at = now(), heartbeat_at = now() - interval '1 hour' WHERE id = $1`, [r.body.id]);
          const p = h.envd.spawn("false", [], cid);
          if (pidRecorded) await markCommandRunning(h.db, cid, p.pid);
          await waitFor(() => p.ended, { timeoutMs: 5000 });
          await h.startDispatcher({ staleMs: 1000 });
          const op = await h.waitOp(r.body.id);
          assert.equal(op.state, "succeeded", JSON.stringify(op.failure));
          assert.deepEqual(op.result, { command_id: cid, state: "exited", exit_code: 1 });
          const c = await h.req("GET", `/v1/sandboxes/${id}/commands/${cid}`);
          assert.equal(c.body.exit_code, 1);
          assert.equal(c.body.pid, p.pid);
          assert.deepEqual(h.envd.started.filter((t) => t === cid), [cid], "never started twice");
          const out = await h.req("GET", `/v1/sandboxes/${id}/commands/${cid}/output`);
          assert.equal(out.status, 200);
          const stored = (out.body.chunks as { stream: string; data: string }[]).map((ch) => [ch.stream, Buffer.from(ch.data, "base64").toString()]);
          assert.deepEqual(stored, [["stderr", "failing\n"]], "the output envd kept while detached is stored");
        } finally {
          await h.close().catch(() => {});
        }
      });
    }
  });
}
