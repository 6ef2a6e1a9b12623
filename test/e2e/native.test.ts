/* eslint-disable @typescript-eslint/no-explicit-any -- JSON response bodies of the API under test are read loosely */
/**
 * Native API end to end over HTTP against the real stack (`space up`: api + controller
 * dispatcher + node with runc): the Native scenarios of behaviours.md section E.
 * Recovery with kill -9 lives in native-restart.test.ts.
 */
import { after, before, describe, test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { startStack, type Stack } from "../support/stack.ts";
import { ALL, NativeClient, nativeSkipReason, tenantWithToken, tokenFor } from "./native-client.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : false;

describe("Native API end to end", { skip, timeout: 20 * 60_000 }, () => {
  let stack: Stack;
  let a: NativeClient;
  let b: NativeClient;
  let readOnly: NativeClient;
  let noExec: NativeClient;
  let notMounted: string | false = false;
  let sid: string; // one shared running sandbox of tenant A
  const guard = (t: TestContext) => {
    if (notMounted) t.skip(notMounted);
    return !!notMounted;
  };

  before(async () => {
    stack = await startStack();
    notMounted = await nativeSkipReason(stack.apiUrl);
    if (notMounted) return;
    const ta = await tenantWithToken(stack.apiUrl, stack.adminToken, "native-a", ALL);
    const tb = await tenantWithToken(stack.apiUrl, stack.adminToken, "native-b", ALL);
    a = new NativeClient(stack.apiUrl, ta.token);
    b = new NativeClient(stack.apiUrl, tb.token);
    readOnly = a.as(await tokenFor(stack.apiUrl, stack.adminToken, ta.tenantId, ["sandboxes:read"]));
    noExec = a.as(await tokenFor(stack.apiUrl, stack.adminToken, ta.tenantId, ["sandboxes:read", "sandboxes:write"]));
    sid = await a.create({ metadata: { suite: "native-e2e" } });
  });
  after(async () => {
    if (a && sid) await a.req("DELETE", `/v1/sandboxes/${sid}`).catch(() => {});
    await stack?.stop();
  });

  // ------------------------------------------------------------------ contract

  test("zero_vcpu_admission", async (t) => {
    if (guard(t)) return;
    for (const [body, field] of [[{ vcpu: 0 }, "vcpu"], [{ vcpu: -1 }, "vcpu"], [{ memory_mib: 0 }, "memory_mib"], [{ memory_mib: -64 }, "memory_mib"]] as const) {
      const r = await a.req("POST", "/v1/sandboxes", { body: { template: "base", ...body } });
      assert.equal(r.status, 400, JSON.stringify(r.body));
      assert.match(r.body.message, new RegExp(field));
    }
  });

  test("command_validation", async (t) => {
    if (guard(t)) return;
    for (const [body, field] of [[{}, "cmd"], [{ cmd: "" }, "cmd"], [{ cmd: "ls", args: "-l" }, "args"], [{ cmd: "ls", cwd: "" }, "cwd"], [{ cmd: "ls", bogus: 1 }, "bogus"]] as const) {
      const r = await a.req("POST", `/v1/sandboxes/${sid}/commands`, { body });
      assert.equal(r.status, 400, `${JSON.stringify(body)}: ${JSON.stringify(r.body)}`);
      assert.match(r.body.message, new RegExp(field));
    }
  });

  test("permanent_command_error", async (t) => {
    if (guard(t)) return;
    const { op, cmd } = await a.run(sid, { cmd: "/definitely/not/here" });
    assert.equal(op.state, "failed");
    assert.equal(op.failure.code, "invalid_request");
    assert.match(op.failure.message, /not\/here/);
    assert.equal(cmd.state, "failed");
    const bad = await a.run(sid, { cmd: "/bin/true", cwd: "/no/such/dir" });
    assert.equal(bad.op.state, "failed");
    assert.match(bad.op.failure.message, /no\/such\/dir/);
  });

  test("a command's output, exit code and follow stream", async (t) => {
    if (guard(t)) return;
    const ok = await a.run(sid, { cmd: "/bin/sh", args: ["-c", "echo out; echo err >&2; exit 3"] });
    assert.equal(ok.op.state, "succeeded", JSON.stringify(ok.op.failure));
    assert.equal(ok.op.result.exit_code, 3);
    assert.equal(ok.stdout, "out\n");
    assert.equal(ok.stderr, "err\n");
    assert.equal((await a.run(sid, { cmd: "/usr/bin/id", args: ["-un"] })).stdout, "user\n", "default user");
    assert.equal((await a.run(sid, { cmd: "/usr/bin/id", args: ["-un"], user: "root" })).stdout, "root\n", "user field");
    const env = await a.run(sid, { cmd: "/bin/sh", args: ["-c", "echo $FOO; pwd"], env: { FOO: "bar" }, cwd: "/tmp" });
    assert.equal(env.stdout, "bar\n/tmp\n");
    const r = await a.req("POST", `/v1/sandboxes/${sid}/commands`, { body: { cmd: "/bin/sh", args: ["-c", "for i in 1 2 3; do echo $i; sleep 0.2; done"] } });
    const cid = r.body.target.split("/")[3];
    const f = await a.req("GET", `/v1/sandboxes/${sid}/commands/${cid}/output?follow=true`);
    const lines = String(f.body).trim().split("\n").map((l) => JSON.parse(l));
    const text = lines.filter((l) => l.data).map((l) => Buffer.from(l.data, "base64").toString()).join("");
    assert.equal(text, "1\n2\n3\n");
    assert.deepEqual([lines.at(-1).end, lines.at(-1).exit_code], [true, 0]);
  });

  test("idempotency_conflict", async (t) => {
    if (guard(t)) return;
    const r1 = await a.req("POST", `/v1/sandboxes/${sid}/commands`, { body: { cmd: "/bin/echo", args: ["1"] }, key: "e2e-conflict" });
    assert.equal(r1.status, 202);
    const r2 = await a.req("POST", `/v1/sandboxes/${sid}/commands`, { body: { cmd: "/bin/echo", args: ["2"] }, key: "e2e-conflict" });
    assert.equal(r2.status, 409);
    assert.deepEqual([r2.body.code, r2.body.reason], [409, "idempotency_conflict"]);
  });

  test("completed_delete_replay", async (t) => {
    if (guard(t)) return;
    const id = await a.create();
    const d1 = await a.req("DELETE", `/v1/sandboxes/${id}`, { key: `del-${id}` });
    assert.equal(d1.status, 202);
    assert.equal((await a.wait(d1.body.id)).state, "succeeded");
    const d2 = await a.req("DELETE", `/v1/sandboxes/${id}`, { key: `del-${id}` });
    assert.equal(d2.status, 202);
    assert.equal(d2.body.id, d1.body.id);
    assert.equal(d2.body.state, "succeeded");
    assert.equal((await a.req("DELETE", `/v1/sandboxes/${id}`)).status, 404);
  });

  test("tenant_isolation", async (t) => {
    if (guard(t)) return;
    assert.equal((await b.req("GET", `/v1/sandboxes/${sid}`)).status, 404);
    assert.equal((await b.req("DELETE", `/v1/sandboxes/${sid}`)).status, 404);
    assert.equal((await b.req("POST", `/v1/sandboxes/${sid}/commands`, { body: { cmd: "/bin/true" } })).status, 404);
    assert.ok(!(await b.req("GET", "/v1/sandboxes")).body.sandboxes.some((s: { id: string }) => s.id === sid));
    const op = (await a.req("GET", "/v1/operations?limit=1")).body.operations[0];
    assert.equal((await b.req("GET", `/v1/operations/${op.id}`)).status, 404);
    assert.equal((await a.req("GET", `/v1/sandboxes/${sid}`)).status, 200);
  });

  test("token_scope", async (t) => {
    if (guard(t)) return;
    const c = await readOnly.req("POST", "/v1/sandboxes", { body: { template: "base" } });
    assert.equal(c.status, 403);
    assert.match(c.body.message, /sandboxes:write/);
    assert.equal((await readOnly.req("GET", `/v1/sandboxes/${sid}`)).status, 200);
    const x = await noExec.req("POST", `/v1/sandboxes/${sid}/commands`, { body: { cmd: "/bin/true" } });
    assert.equal(x.status, 403);
    assert.match(x.body.message, /commands:exec/);
    assert.equal((await a.req("GET", "/v1/sandboxes", { token: "spt_not_a_token_at_all_000" })).status, 401);
  });

  // ------------------------------------------------------------------ concurrency

  test("create_idempotency", async (t) => {
    if (guard(t)) return;
    const body = { template: "base", metadata: { e2e: "create-idem" } };
    const rs = await Promise.all(Array.from({ length: 10 }, () => a.req("POST", "/v1/sandboxes", { body, key: "e2e-create-idem" })));
    assert.ok(rs.every((r) => r.status === 202));
    assert.equal(new Set(rs.map((r) => r.body.id)).size, 1);
    const op = await a.wait(rs[0]!.body.id);
    assert.equal(op.state, "succeeded", JSON.stringify(op.failure));
    const list = await a.req("GET", "/v1/sandboxes?limit=1000");
    assert.equal(list.body.sandboxes.filter((s: { metadata: Record<string, string> }) => s.metadata.e2e === "create-idem").length, 1);
    await a.req("DELETE", `/v1/sandboxes/${op.result.id}`);
  });

  test("command_idempotency", async (t) => {
    if (guard(t)) return;
    const body = { cmd: "/bin/sh", args: ["-c", "echo x >> /tmp/idem-count"] };
    const rs = await Promise.all(Array.from({ length: 6 }, () => a.req("POST", `/v1/sandboxes/${sid}/commands`, { body, key: "e2e-cmd-idem" })));
    assert.equal(new Set(rs.map((r) => r.body.id)).size, 1);
    assert.equal((await a.wait(rs[0]!.body.id)).state, "succeeded");
    const again = await a.req("POST", `/v1/sandboxes/${sid}/commands`, { body, key: "e2e-cmd-idem" });
    assert.equal(again.body.id, rs[0]!.body.id);
    const count = await a.run(sid, { cmd: "/bin/sh", args: ["-c", "wc -l < /tmp/idem-count"] });
    assert.equal(count.stdout.trim(), "1", "ran exactly once");
  });

  test("independent_commands", async (t) => {
    if (guard(t)) return;
    const long = await a.req("POST", `/v1/sandboxes/${sid}/commands`, { body: { cmd: "/bin/sleep", args: ["30"] } });
    const t0 = Date.now();
    const quick = await Promise.all(Array.from({ length: 5 }, (_, i) => a.run(sid, { cmd: "/bin/echo", args: [String(i)] })));
    assert.ok(quick.every((q, i) => q.op.state === "succeeded" && q.stdout === `${i}\n`));
    assert.ok(Date.now() - t0 < 15_000, "short commands were not held back by the long one");
    assert.equal((await a.req("GET", `/v1/operations/${long.body.id}`)).body.state, "claimed");
    const cancel = await a.req("POST", `/v1/sandboxes/${sid}/commands/${long.body.target.split("/")[3]}/cancel`, { body: {} });
    assert.equal((await a.wait(cancel.body.id)).state, "succeeded");
    const lop = await a.wait(long.body.id);
    assert.equal(lop.state, "failed");
    assert.equal(lop.failure.code, "conflict");
  });

  test("slow_reader", async (t) => {
    if (guard(t)) return;
    // ~4 MiB of numbered lines, read through a follow stream that is consumed slowly.
    const r = await a.req("POST", `/v1/sandboxes/${sid}/commands`, { body: { cmd: "/bin/sh", args: ["-c", "seq 1 500000"] } });
    const cid = r.body.target.split("/")[3];
    const res = await fetch(`${stack.apiUrl}/v1/sandboxes/${sid}/commands/${cid}/output?follow=true`, { headers: { authorization: `Bearer ${a.token}` } });
    const reader = res.body!.getReader();
    // Meanwhile other work proceeds.
    const other = await a.run(sid, { cmd: "/bin/echo", args: ["meanwhile"] });
    assert.equal(other.stdout, "meanwhile\n");
    let buf = "";
    const out: Buffer[] = [];
    let end: any;
    for (let n = 0; ; n++) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += Buffer.from(value).toString();
      let i: number;
      while ((i = buf.indexOf("\n")) >= 0) {
        const line = JSON.parse(buf.slice(0, i));
        buf = buf.slice(i + 1);
        if (line.data) out.push(Buffer.from(line.data, "base64"));
        if (line.end) end = line;
      }
      if (n % 20 === 0) await new Promise((res) => setTimeout(res, 20));
    }
    assert.equal(end?.exit_code, 0);
    const lines = Buffer.concat(out).toString().trim().split("\n");
    assert.equal(lines.length, 500000);
    assert.equal(lines[0], "1");
    assert.equal(lines.at(-1), "500000");
  });

  test("lifecycle_contention", async (t) => {
    if (guard(t)) return;
    const id = await a.create();
    const verbs = ["pause", "resume", "pause", "resume"];
    const rs = await Promise.all(verbs.map((v) => a.req("POST", `/v1/sandboxes/${id}/${v}`, { body: {} })));
    const ops = await Promise.all(rs.map((r) => a.wait(r.body.id)));
    for (const op of ops) assert.ok(op.state === "succeeded" || op.failure.code === "conflict", JSON.stringify(op));
    const del = await a.req("DELETE", `/v1/sandboxes/${id}`);
    const res = await a.req("POST", `/v1/sandboxes/${id}/resume`, { body: {} });
    assert.equal((await a.wait(del.body.id)).state, "succeeded");
    if (res.status === 202) {
      const rop = await a.wait(res.body.id);
      assert.ok(rop.state === "succeeded" || ["conflict", "not_found"].includes(rop.failure.code), JSON.stringify(rop));
    }
    assert.equal((await a.req("GET", `/v1/sandboxes/${id}`)).status, 404);
  });

  // ------------------------------------------------------------------ lifecycle

  test("resident_pause", async (t) => {
    if (guard(t)) return;
    const id = await a.create();
    try {
      await a.run(id, { cmd: "/bin/sh", args: ["-c", "echo before > /tmp/state"] });
      const bg = await a.req("POST", `/v1/sandboxes/${id}/commands`, { body: { cmd: "/bin/sleep", args: ["600"] } });
      const bgCid = bg.body.target.split("/")[3];
      await waitForState(a, id, bgCid, "running");
      const pid = (await a.req("GET", `/v1/sandboxes/${id}/commands/${bgCid}`)).body.pid;
      const p = await a.wait((await a.req("POST", `/v1/sandboxes/${id}/pause`, { body: {} })).body.id);
      assert.equal(p.state, "succeeded", JSON.stringify(p.failure));
      assert.equal((await a.req("GET", `/v1/sandboxes/${id}`)).body.state, "paused");
      const during = await a.run(id, { cmd: "/bin/true" });
      assert.equal(during.op.state, "failed");
      assert.match(during.op.failure.message, /paused/);
      const r = await a.wait((await a.req("POST", `/v1/sandboxes/${id}/resume`, { body: {} })).body.id);
      assert.equal(r.state, "succeeded", JSON.stringify(r.failure));
      const after = await a.run(id, { cmd: "/bin/sh", args: ["-c", `cat /tmp/state; kill -0 ${pid} && echo alive`] });
      assert.equal(after.stdout, "before\nalive\n", "memory and processes kept across a resident pause");
    } finally {
      await a.req("DELETE", `/v1/sandboxes/${id}`);
    }
  });

  test("stopped_restart_preserves_rootfs", async (t) => {
    if (guard(t)) return;
    const id = await a.create();
    try {
      await a.run(id, { cmd: "/bin/sh", args: ["-c", "echo kept > /home/user/kept.txt"] });
      const stop = await a.req("POST", `/v1/sandboxes/${id}/stop`, { body: {} });
      if (stop.status === 501) return t.skip(`stop/start not available in this build: ${stop.body.message}`);
      assert.equal((await a.wait(stop.body.id)).state, "succeeded");
      const start = await a.req("POST", `/v1/sandboxes/${id}/start`, { body: {} });
      assert.equal((await a.wait(start.body.id)).state, "succeeded");
      assert.equal((await a.run(id, { cmd: "/bin/cat", args: ["/home/user/kept.txt"] })).stdout, "kept\n");
    } finally {
      await a.req("DELETE", `/v1/sandboxes/${id}`);
    }
  });
});

async function waitForState(c: NativeClient, sid: string, cid: string, state: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  while ((await c.req("GET", `/v1/sandboxes/${sid}/commands/${cid}`)).body.state !== state) {
    if (Date.now() > deadline) throw new Error(`command ${cid} never became ${state}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
