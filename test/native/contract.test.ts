/**
 * Native contract scenarios (behaviours.md E: contract + concurrency), on PGlite and on
 * real Postgres: the real routes, sandbox layer and dispatcher; FakeSubstrate + fake envd.
 */
import { describe, test, before, after } from "node:test";
import assert from "node:assert/strict";
import { testEngines } from "../support/db.ts";
import { createSandbox, startHarness, type Harness } from "./harness.ts";

for (const engine of testEngines()) {
  describe(`native contract on ${engine.name}`, { skip: engine.skip }, () => {
    let h: Harness;
    before(async () => {
      h = await startHarness(engine.name);
    });
    after(async () => {
      await h?.close();
    });

    test("zero_vcpu_admission: zero/negative vcpu or memory is 400 naming the field, nothing queued", async () => {
      const before = await h.db.one<{ n: number }>("SELECT count(*)::int AS n FROM operations");
      for (const [body, field] of [
        [{ vcpu: 0 }, "vcpu"],
        [{ vcpu: -2 }, "vcpu"],
        [{ memory_mib: 0 }, "memory_mib"],
        [{ memory_mib: -512 }, "memory_mib"],
        [{ vcpu: 1.5 }, "vcpu"],
        [{ disk_mib: 0 }, "disk_mib"],
      ] as const) {
        const r = await h.req("POST", "/v1/sandboxes", { body: { template: "base", ...body } });
        assert.equal(r.status, 400, JSON.stringify(r.body));
        assert.equal(r.body.code, 400);
        assert.equal(r.body.reason, "invalid_argument");
        assert.match(r.body.message, new RegExp(field));
      }
      const unknown = await h.req("POST", "/v1/sandboxes", { body: { template: "base", vcpus: 2 } });
      assert.equal(unknown.status, 400);
      assert.match(unknown.body.message, /vcpus/);
      const after = await h.db.one<{ n: number }>("SELECT count(*)::int AS n FROM operations");
      assert.equal(after.n, before.n, "nothing was queued");
    });

    test("create answers 202 with an operation that moves queued → claimed → succeeded with timestamps", async () => {
      const r = await h.req("POST", "/v1/sandboxes", { body: { template: "base", vcpu: 1, memory_mib: 256, metadata: { team: "x" }, env: { A: "1" }, timeout_s: 600 } });
      assert.equal(r.status, 202);
      assert.equal(r.headers.location, `/v1/operations/${r.body.id}`);
      assert.equal(r.body.kind, "sandbox.create");
      assert.match(r.body.target, /^sandboxes\/[a-z0-9]{20}$/);
      assert.ok(["queued", "claimed", "succeeded"].includes(r.body.state));
      const op = await h.waitOp(r.body.id);
      assert.equal(op.state, "succeeded", JSON.stringify(op.failure));
      assert.ok(op.queued_at && op.claimed_at && op.succeeded_at && op.failed_at === null && op.failure === null);
      assert.ok(op.deadline_at && Date.parse(op.deadline_at) - Date.parse(op.queued_at) >= 29 * 60_000, "30 min create deadline");
      assert.equal(op.result.state, "running");
      assert.equal(op.target, `sandboxes/${op.result.id}`);
      const sb = await h.req("GET", `/v1/sandboxes/${op.result.id}`);
      assert.equal(sb.status, 200);
      assert.equal(sb.body.metadata.team, "x");
      const list = await h.req("GET", "/v1/operations?limit=5");
      assert.equal(list.status, 200);
      assert.ok(list.body.operations.some((o: { id: string }) => o.id === op.id));
    });

    test("create_idempotency: same key + same body → one operation, one sandbox (also concurrently)", async () => {
      const body = { template: "base", metadata: { k: "create-idem" } };
      const first = await h.req("POST", "/v1/sandboxes", { body, key: "create-1" });
      assert.equal(first.status, 202);
      const done = await h.waitOp(first.body.id);
      const again = await h.req("POST", "/v1/sandboxes", { body, key: "create-1" });
      assert.equal(again.status, 202);
      assert.equal(again.body.id, first.body.id);
      assert.equal(again.headers["idempotent-replayed"], "true");
      assert.equal(again.body.state, "succeeded");
      assert.deepEqual(again.body.result, done.result);

      const parallel = await Promise.all(Array.from({ length: 12 }, () => h.req("POST", "/v1/sandboxes", { body: { ...body, metadata: { k: "par" } }, key: "create-par" })));
      assert.ok(parallel.every((r) => r.status === 202), JSON.stringify(parallel.map((r) => r.status)));
      const ids = new Set(parallel.map((r) => r.body.id));
      assert.equal(ids.size, 1, "concurrent duplicates converge to one operation");
      await h.waitOp([...ids][0]!);
      const n = await h.db.one<{ n: number }>(`SELECT count(*)::int AS n FROM sandboxes WHERE metadata->>'k' = 'par'`);
      assert.equal(n.n, 1, "one sandbox");
    });

    test("idempotency_conflict: same key + different body is 409 idempotency_conflict", async () => {
      const a = await h.req("POST", "/v1/sandboxes", { body: { template: "base", metadata: { v: "1" } }, key: "conflict-1" });
      assert.equal(a.status, 202);
      const b = await h.req("POST", "/v1/sandboxes", { body: { template: "base", metadata: { v: "2" } }, key: "conflict-1" });
      assert.equal(b.status, 409);
      assert.equal(b.body.code, 409);
      assert.equal(b.body.reason, "idempotency_conflict");
      assert.match(b.body.message, /conflict-1/);
      // Same key on another endpoint is a different request too.
      const sid = (await h.waitOp(a.body.id)).result.id;
      const c = await h.req("DELETE", `/v1/sandboxes/${sid}`, { key: "conflict-1" });
      assert.equal(c.status, 409);
      assert.equal(c.body.reason, "idempotency_conflict");
    });

    test("completed_delete_replay: a completed delete replays its operation; a new delete is 404", async () => {
      const id = await createSandbox(h);
      const del = await h.req("DELETE", `/v1/sandboxes/${id}`, { key: "del-1" });
      assert.equal(del.status, 202);
      assert.equal(del.body.kind, "sandbox.delete");
      const done = await h.waitOp(del.body.id);
      assert.equal(done.state, "succeeded", JSON.stringify(done.failure));
      const replay = await h.req("DELETE", `/v1/sandboxes/${id}`, { key: "del-1" });
      assert.equal(replay.status, 202);
      assert.equal(replay.body.id, del.body.id);
      assert.equal(replay.body.state, "succeeded");
      assert.equal((await h.req("GET", `/v1/sandboxes/${id}`)).status, 404);
      const fresh = await h.req("DELETE", `/v1/sandboxes/${id}`, { key: "del-2" });
      assert.equal(fresh.status, 404);
    });

    test("tenant_isolation: another tenant's sandbox, commands and operations are 404", async () => {
      const id = await createSandbox(h);
      const b = h.tokens.b;
      assert.equal((await h.req("GET", `/v1/sandboxes/${id}`, { token: b })).status, 404);
      assert.equal((await h.req("DELETE", `/v1/sandboxes/${id}`, { token: b })).status, 404);
      assert.equal((await h.req("POST", `/v1/sandboxes/${id}/pause`, { token: b })).status, 404);
      assert.equal((await h.req("POST", `/v1/sandboxes/${id}/commands`, { token: b, body: { cmd: "echo" } })).status, 404);
      const list = await h.req("GET", "/v1/sandboxes", { token: b });
      assert.equal(list.status, 200);
      assert.ok(!list.body.sandboxes.some((s: { id: string }) => s.id === id));
      const ops = await h.req("GET", "/v1/operations", { token: h.tokens.a });
      const opId = ops.body.operations[0].id;
      assert.equal((await h.req("GET", `/v1/operations/${opId}`, { token: b })).status, 404);
      assert.ok(!(await h.req("GET", "/v1/operations", { token: b })).body.operations.some((o: { id: string }) => o.id === opId));
      // Same idempotency key in two tenants: independent.
      const ka = await h.req("POST", "/v1/sandboxes", { body: { template: "base" }, key: "shared-key" });
      const kb = await h.req("POST", "/v1/sandboxes", { body: { template: "base", metadata: { x: "y" } }, key: "shared-key", token: b });
      assert.equal(ka.status, 202);
      assert.equal(kb.status, 202);
      assert.notEqual(ka.body.id, kb.body.id);
    });

    test("token_scope: a missing scope is 403 naming it; no or bad credentials are 401", async () => {
      const ro = h.tokens.readOnly;
      const c = await h.req("POST", "/v1/sandboxes", { token: ro, body: { template: "base" } });
      assert.equal(c.status, 403);
      assert.equal(c.body.reason, "permission_denied");
      assert.match(c.body.message, /sandboxes:write/);
      const id = await createSandbox(h);
      assert.equal((await h.req("GET", `/v1/sandboxes/${id}`, { token: ro })).status, 200);
      const d = await h.req("DELETE", `/v1/sandboxes/${id}`, { token: ro });
      assert.equal(d.status, 403);
      assert.match(d.body.message, /sandboxes:write/);
      const cmd = await h.req("POST", `/v1/sandboxes/${id}/commands`, { token: h.tokens.noExec, body: { cmd: "echo" } });
      assert.equal(cmd.status, 403);
      assert.match(cmd.body.message, /commands:exec/);
      assert.equal((await h.req("GET", "/v1/sandboxes", { token: "" })).status, 401);
      assert.equal((await h.req("GET", "/v1/sandboxes", { token: "spt_not_a_real_token_at_all" })).status, 401);
    });

    test("command_validation: malformed commands are 400 naming the field, nothing queued", async () => {
      const id = await createSandbox(h);
      const before = await h.db.one<{ n: number }>("SELECT count(*)::int AS n FROM operations");
      for (const [body, field] of [
        [{}, "cmd"],
        [{ cmd: "" }, "cmd"],
        [{ cmd: 42 }, "cmd"],
        [{ cmd: "echo", args: "hi" }, "args"],
        [{ cmd: "echo", args: [1] }, "args"],
        [{ cmd: "echo", env: { "1BAD": "x" } }, "env"],
        [{ cmd: "echo", timeout_s: 0 }, "timeout_s"],
        [{ cmd: "echo", user: "Root Admin" }, "user"],
        [{ cmd: "echo", shell: true }, "shell"],
      ] as const) {
        const r = await h.req("POST", `/v1/sandboxes/${id}/commands`, { body });
        assert.equal(r.status, 400, `${JSON.stringify(body)} → ${r.status} ${JSON.stringify(r.body)}`);
        assert.match(r.body.message, new RegExp(field), JSON.stringify(r.body));
      }
      const after = await h.db.one<{ n: number }>("SELECT count(*)::int AS n FROM operations");
      assert.equal(after.n, before.n);
    });

    test("a command runs as an operation: output pages, exit code, follow as NDJSON", async () => {
      const id = await createSandbox(h);
      const r = await h.req("POST", `/v1/sandboxes/${id}/commands`, { body: { cmd: "echo", args: ["hello", "native"] } });
      assert.equal(r.status, 202);
      assert.equal(r.body.kind, "command.run");
      const cid = r.body.target.split("/")[3];
      const op = await h.waitOp(r.body.id);
      assert.equal(op.state, "succeeded", JSON.stringify(op.failure));
      assert.deepEqual(op.result, { command_id: cid, state: "exited", exit_code: 0 });
      const c = await h.req("GET", `/v1/sandboxes/${id}/commands/${cid}`);
      assert.equal(c.status, 200);
      assert.equal(c.body.exit_code, 0);
      assert.equal(c.body.state, "exited");
      assert.ok(c.body.pid > 0);
      const page = await h.req("GET", `/v1/sandboxes/${id}/commands/${cid}/output`);
      assert.equal(page.status, 200);
      assert.equal(page.body.done, true);
      assert.equal(Buffer.concat(page.body.chunks.map((x: { data: string }) => Buffer.from(x.data, "base64"))).toString(), "hello native\n");
      const follow = await h.req("GET", `/v1/sandboxes/${id}/commands/${cid}/output?follow=true`);
      const lines = String(follow.body).trim().split("\n").map((l) => JSON.parse(l));
      assert.equal(lines.at(-1).end, true);
      assert.equal(lines.at(-1).exit_code, 0);

      const f = await h.req("POST", `/v1/sandboxes/${id}/commands`, { body: { cmd: "false" } });
      const fop = await h.waitOp(f.body.id);
      assert.equal(fop.state, "succeeded", "a command that ran to its end succeeds; its exit code is the result");
      assert.equal(fop.result.exit_code, 1);
    });

    test("permanent_command_error: a command that cannot run fails its operation with the command's reason", async () => {
      const id = await createSandbox(h);
      const r = await h.req("POST", `/v1/sandboxes/${id}/commands`, { body: { cmd: "no-such-binary" } });
      assert.equal(r.status, 202);
      const op = await h.waitOp(r.body.id);
      assert.equal(op.state, "failed");
      assert.equal(op.failure.code, "invalid_request");
      assert.match(op.failure.message, /no-such-binary.*ENOENT/);
      const cid = r.body.target.split("/")[3];
      const c = await h.req("GET", `/v1/sandboxes/${id}/commands/${cid}`);
      assert.equal(c.body.state, "failed");
      assert.match(c.body.error, /ENOENT/);
    });

    test("command_idempotency: same key runs the command once; different body conflicts", async () => {
      const id = await createSandbox(h);
      const body = { cmd: "echo", args: ["once"] };
      const rs = await Promise.all(Array.from({ length: 8 }, () => h.req("POST", `/v1/sandboxes/${id}/commands`, { body, key: "cmd-1" })));
      assert.ok(rs.every((r) => r.status === 202), JSON.stringify(rs.map((r) => r.body)));
      assert.equal(new Set(rs.map((r) => r.body.id)).size, 1);
      const op = await h.waitOp(rs[0]!.body.id);
      assert.equal(op.state, "succeeded");
      const cid = op.result.command_id;
      assert.equal(h.envd.started.filter((t) => t === cid).length, 1, "started once");
      const n = await h.db.one<{ n: number }>("SELECT count(*)::int AS n FROM commands WHERE sandbox_id = $1 AND idempotency_key = 'cmd-1'", [id]);
      assert.equal(n.n, 1);
      const replay = await h.req("POST", `/v1/sandboxes/${id}/commands`, { body, key: "cmd-1" });
      assert.equal(replay.body.id, op.id);
      const other = await h.req("POST", `/v1/sandboxes/${id}/commands`, { body: { cmd: "echo", args: ["twice"] }, key: "cmd-1" });
      assert.equal(other.status, 409);
      assert.equal(other.body.reason, "idempotency_conflict");
    });

    test("independent_commands: a long command does not hold back short ones", async () => {
      const id = await createSandbox(h);
      const long = await h.req("POST", `/v1/sandboxes/${id}/commands`, { body: { cmd: "sleep", args: ["3"] } });
      const shorts = await Promise.all(Array.from({ length: 5 }, (_, i) => h.req("POST", `/v1/sandboxes/${id}/commands`, { body: { cmd: "echo", args: [String(i)] } })));
      const t0 = Date.now();
      for (const s of shorts) assert.equal((await h.waitOp(s.body.id)).state, "succeeded");
      assert.ok(Date.now() - t0 < 2000, "short commands finished while the long one runs");
      const longNow = await h.req("GET", `/v1/operations/${long.body.id}`);
      assert.equal(longNow.body.state, "claimed");
      const cancel = await h.req("POST", `/v1/sandboxes/${id}/commands/${long.body.target.split("/")[3]}/cancel`, { body: {} });
      assert.equal(cancel.status, 202);
      assert.equal((await h.waitOp(cancel.body.id)).state, "succeeded");
      const lop = await h.waitOp(long.body.id);
      assert.equal(lop.state, "failed");
      assert.equal(lop.failure.code, "conflict");
      assert.match(lop.failure.message, /cancelled/);
    });

    test("command_survives_data_plane_restart: a broken envd stream is reattached by pid, output and exit code kept", async () => {
      const id = await createSandbox(h);
      const r = await h.req("POST", `/v1/sandboxes/${id}/commands`, { body: { cmd: "fail-stream", args: ["0.5"] } });
      const op = await h.waitOp(r.body.id);
      assert.equal(op.state, "succeeded", JSON.stringify(op.failure));
      assert.equal(op.result.exit_code, 0);
      const cid = op.result.command_id;
      assert.equal(h.envd.started.filter((t) => t === cid).length, 1, "not started again");
      const page = await h.req("GET", `/v1/sandboxes/${id}/commands/${cid}/output`);
      assert.equal(Buffer.from(page.body.chunks[0].data, "base64").toString(), "slept\n");
    });

    test("slow_reader: a reader that pages slowly loses nothing and blocks no one", async () => {
      const id = await createSandbox(h);
      const r = await h.req("POST", `/v1/sandboxes/${id}/commands`, { body: { cmd: "spew", args: ["300"] } });
      const cid = r.body.target.split("/")[3];
      // Another command completes while the slow reader has not read anything.
      const other = await h.req("POST", `/v1/sandboxes/${id}/commands`, { body: { cmd: "echo", args: ["other"] } });
      assert.equal((await h.waitOp(other.body.id)).state, "succeeded");
      assert.equal((await h.waitOp(r.body.id)).state, "succeeded");
      let after = 0;
      const parts: Buffer[] = [];
      for (;;) {
        const p = await h.req("GET", `/v1/sandboxes/${id}/commands/${cid}/output?after=${after}&limit=3`);
        for (const c of p.body.chunks) parts.push(Buffer.from(c.data, "base64"));
        after = p.body.next_after;
        if (p.body.done) break;
        await new Promise((res) => setTimeout(res, 2));
      }
      const text = Buffer.concat(parts).toString();
      const lines = text.trim().split("\n");
      assert.equal(lines.length, 300);
      lines.forEach((l, i) => assert.ok(l.startsWith(String(i).padStart(6, "0"))));
    });

    test("lifecycle_contention: concurrent pause/resume/delete end consistently", async () => {
      const id = await createSandbox(h);
      const verbs = ["pause", "resume", "pause", "resume", "pause"];
      const rs = await Promise.all(verbs.map((v) => h.req("POST", `/v1/sandboxes/${id}/${v}`, { body: {} })));
      assert.ok(rs.every((r) => r.status === 202), JSON.stringify(rs.map((r) => r.body)));
      const ops = await Promise.all(rs.map((r) => h.waitOp(r.body.id)));
      for (const op of ops) assert.ok(op.state === "succeeded" || (op.state === "failed" && op.failure.code === "conflict"), JSON.stringify(op));
      const sb = await h.req("GET", `/v1/sandboxes/${id}`);
      const lastOk = ops.filter((o) => o.state === "succeeded").sort((a, b) => Date.parse(a.succeeded_at) - Date.parse(b.succeeded_at)).at(-1);
      assert.equal(sb.body.state, lastOk.kind === "sandbox.pause" ? "paused" : "running");
      const del = await Promise.all([h.req("DELETE", `/v1/sandboxes/${id}`), h.req("POST", `/v1/sandboxes/${id}/resume`, { body: {} })]);
      const dops = await Promise.all(del.filter((r) => r.status === 202).map((r) => h.waitOp(r.body.id)));
      assert.equal(dops.find((o) => o.kind === "sandbox.delete")?.state, "succeeded");
      assert.equal((await h.req("GET", `/v1/sandboxes/${id}`)).status, 404);
    });

    test("resident pause/resume, then suspend/restore/fork as operations", async () => {
      const id = await createSandbox(h);
      const p = await h.waitOp((await h.req("POST", `/v1/sandboxes/${id}/pause`, { body: {} })).body.id);
      assert.equal(p.state, "succeeded");
      assert.equal(p.result.state, "paused");
      const again = await h.waitOp((await h.req("POST", `/v1/sandboxes/${id}/pause`, { body: {} })).body.id);
      assert.equal(again.state, "failed");
      assert.equal(again.failure.code, "conflict");
      const cmd = await h.waitOp((await h.req("POST", `/v1/sandboxes/${id}/commands`, { body: { cmd: "echo" } })).body.id);
      assert.equal(cmd.state, "failed");
      assert.match(cmd.failure.message, /paused/);
      const r = await h.waitOp((await h.req("POST", `/v1/sandboxes/${id}/resume`, { body: {} })).body.id);
      assert.equal(r.state, "succeeded");
      assert.equal(r.result.state, "running");
      const sus = await h.waitOp((await h.req("POST", `/v1/sandboxes/${id}/suspend`, { body: {} })).body.id);
      assert.equal(sus.state, "succeeded", JSON.stringify(sus.failure));
      assert.equal((await h.req("GET", `/v1/sandboxes/${id}`)).body.state, "suspended");
      const twice = await h.waitOp((await h.req("POST", `/v1/sandboxes/${id}/suspend`, { body: {} })).body.id);
      assert.equal(twice.state, "failed");
      assert.equal(twice.failure.code, "conflict");
      const res = await h.waitOp((await h.req("POST", `/v1/sandboxes/${id}/restore`, { body: {} })).body.id);
      assert.equal(res.state, "succeeded", JSON.stringify(res.failure));
      assert.equal((await h.req("GET", `/v1/sandboxes/${id}`)).body.state, "running");
    });

    test("a suspended sandbox names its snapshot's durability: local while its parts are published behind the pause, then durable", async () => {
      let open!: () => void;
      h.substrate.publishGate = new Promise<void>((r) => (open = r));
      try {
        const id = await createSandbox(h);
        assert.equal((await h.req("GET", `/v1/sandboxes/${id}`)).body.snapshot, null, "a running sandbox resumes from no snapshot");
        const sus = await h.waitOp((await h.req("POST", `/v1/sandboxes/${id}/suspend`, { body: {} })).body.id);
        assert.equal(sus.state, "succeeded", JSON.stringify(sus.failure));
        const local = (await h.req("GET", `/v1/sandboxes/${id}`)).body;
        assert.equal(local.state, "suspended");
        assert.equal(local.snapshot.durability, "local");
        assert.match(local.snapshot.id, /^sn_/);
        open();
        let durable = local;
        for (let i = 0; i < 200 && durable.snapshot.durability !== "durable"; i++) {
          await new Promise((r) => setTimeout(r, 20));
          durable = (await h.req("GET", `/v1/sandboxes/${id}`)).body;
        }
        assert.deepEqual(durable.snapshot, { id: local.snapshot.id, durability: "durable" });
      } finally {
        open?.();
        h.substrate.publishGate = null;
      }
    });

    test("stopped_restart_preserves_rootfs (control plane): stop → stopped, start → running, commands refused while stopped", async () => {
      const id = await createSandbox(h);
      const s = await h.waitOp((await h.req("POST", `/v1/sandboxes/${id}/stop`, { body: {} })).body.id);
      assert.equal(s.state, "succeeded", JSON.stringify(s.failure));
      assert.equal(s.result.state, "stopped");
      assert.equal((await h.req("GET", `/v1/sandboxes/${id}`)).body.state, "stopped");
      const cmd = await h.waitOp((await h.req("POST", `/v1/sandboxes/${id}/commands`, { body: { cmd: "echo" } })).body.id);
      assert.equal(cmd.state, "failed");
      assert.match(cmd.failure.message, /stopped/);
      const again = await h.waitOp((await h.req("POST", `/v1/sandboxes/${id}/stop`, { body: {} })).body.id);
      assert.equal(again.failure?.code, "conflict");
      const st = await h.waitOp((await h.req("POST", `/v1/sandboxes/${id}/start`, { body: {} })).body.id);
      assert.equal(st.state, "succeeded", JSON.stringify(st.failure));
      assert.equal(st.result.state, "running");
      assert.ok(h.substrate.calls.includes(`restart ${id}`));
      const ok = await h.waitOp((await h.req("POST", `/v1/sandboxes/${id}/commands`, { body: { cmd: "echo", args: ["back"] } })).body.id);
      assert.equal(ok.state, "succeeded");
    });

    test("list sandboxes with cursor pagination; operations wait returns as soon as it ends", async () => {
      for (let i = 0; i < 3; i++) await createSandbox(h, {}, h.tokens.b);
      const seen = new Set<string>();
      let cursor: string | null = null;
      do {
        const r: { body: { sandboxes: { id: string }[]; next_cursor: string | null } } = await h.req("GET", `/v1/sandboxes?limit=2${cursor ? `&cursor=${cursor}` : ""}`, { token: h.tokens.b });
        for (const s of r.body.sandboxes) {
          assert.ok(!seen.has(s.id));
          seen.add(s.id);
        }
        cursor = r.body.next_cursor;
      } while (cursor);
      assert.ok(seen.size >= 3);
      h.substrate.startDelayMs = 300;
      try {
        const c = await h.req("POST", "/v1/sandboxes", { body: { template: "base" }, token: h.tokens.b });
        const t0 = Date.now();
        const w = await h.req("GET", `/v1/operations/${c.body.id}?wait=30s`, { token: h.tokens.b });
        assert.equal(w.body.state, "succeeded");
        assert.ok(Date.now() - t0 < 3000, "long-poll returned when the operation ended");
      } finally {
        h.substrate.startDelayMs = 0;
      }
      assert.equal((await h.req("GET", `/v1/operations/op_nope?wait=xyz`)).status, 400);
    });

    test("OpenAPI 3.1 document from the same schemas", async () => {
      const r = await h.req("GET", "/v1/openapi.json");
      assert.equal(r.status, 200);
      assert.equal(r.body.openapi, "3.1.0");
      assert.ok(r.body.paths["/v1/sandboxes"].post);
      assert.ok(r.body.paths["/v1/operations/{id}"].get);
      const create = r.body.components.schemas.CreateSandbox;
      assert.equal(create.additionalProperties, false);
      assert.equal(create.properties.vcpu.exclusiveMinimum, 0);
    });
  });
}
