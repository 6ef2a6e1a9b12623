/**
 * warm_pool_environment end to end: the real stack (`space up`: api + controller + node
 * with runc) and the unmodified e2b SDK. A pool with a max size grows after a burst that
 * found it short, and the next burst adopts. A pool of 5 set through the admin API fills;
 * 5 sequential SDK creates each adopt a member and see their own env var and metadata
 * inside; the pool refills; 6 concurrent creates take 5 distinct members and 1 goes
 * cold; Native HTTP creates adopt too (the 202 already names the member); a deleted pool
 * drains. (Release change: test/warm-pools, against the store.)
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox, type ConnectionOpts } from "e2b";
import { adminRequest, metricSum, startStack, waitFor, type Stack } from "../support/stack.ts";
import { ALL, NativeClient, tenantWithToken } from "./native-client.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : false;

describe("warm pools with the e2b SDK", { skip, timeout: 20 * 60_000 }, () => {
  let stack: Stack;
  let opts: ConnectionOpts & { sandboxUrl: string };
  const created: Sandbox[] = [];

  const admin = (method: string, path: string, body?: unknown) => adminRequest(stack, method, path, body);
  const pool = async () => (await admin("GET", "/warm-pools/base")).body as { status: { ready?: number }; members: Array<{ state: string; sandbox_id: string }> };
  const readyIds = async () => (await pool()).members.filter((m) => m.state === "ready").map((m) => m.sandbox_id);
  const metric = (name: string) => metricSum(stack.apiUrl, name);

  before(async () => {
    // 1 vCPU sandboxes: this suite holds up to 16 at once (5 members, 5 adopted, 5 refills,
    // 1 cold), and members count against the node's vCPU capacity like any sandbox.
    stack = await startStack({ env: { SPACE_DEFAULT_VCPU: "1" } });
    opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 120_000 };
  });
  after(async () => {
    await Promise.allSettled(created.map((s) => s.kill()));
    await stack?.stop();
  });

  // First: the demand a pool grows to counts every create of its template in the window.
  test("a pool with a max size grows for a burst: the next burst adopts", async () => {
    const refused = await admin("PUT", "/warm-pools/base", { size: 3, max_size: 2 });
    assert.equal(refused.status, 400);
    assert.match(String(refused.body.message), /max_size: must be at least size \(3\) \(got 2\)/);
    const put = await admin("PUT", "/warm-pools/base", { size: 1, max_size: 4 });
    assert.equal(put.status, 200, JSON.stringify(put.body));
    assert.deepEqual([put.body.size, put.body.max_size], [1, 4]);
    await waitFor(async () => (await readyIds()).length === 1, "1 ready member", 120_000, 250);
    const burst = async () => {
      const before = await metric("space_warm_pool_adoptions_total");
      const sbs = await Promise.all(Array.from({ length: 4 }, () => Sandbox.create(opts)));
      created.push(...sbs);
      const adopted = (await metric("space_warm_pool_adoptions_total")) - before;
      await Promise.all(sbs.map((s) => s.kill()));
      return adopted;
    };
    assert.equal(await burst(), 1, "the first burst of 4 finds 1 member");
    await waitFor(async () => (await readyIds()).length === 4, "grown to 4 ready members", 120_000, 250);
    const status = (await pool()).status as { size?: number; demand?: number };
    assert.deepEqual([status.size, status.demand], [4, 4]);
    await waitFor(async () => (await metric("space_warm_pool_creating")) === 0, "no refill in flight", 30_000, 100);
    assert.equal(await burst(), 4, "the next burst of 4 adopts 4");
  });

  test("admin API: validation and a pool of 5 fills", async () => {
    assert.equal((await admin("PUT", "/warm-pools/base", { size: -1 })).status, 400);
    assert.equal((await admin("PUT", "/warm-pools/base", { size: 1, extra: true })).status, 400);
    const unauth = await fetch(`${stack.apiUrl}/admin/api/v1/warm-pools`);
    assert.equal(unauth.status, 401);
    const put = await admin("PUT", "/warm-pools/base", { size: 5 });
    assert.equal(put.status, 200);
    assert.equal(put.body.size, 5);
    await waitFor(async () => (await readyIds()).length === 5, "5 ready members", 120_000, 250);
    const list = await admin("GET", "/warm-pools");
    assert.equal((list.body.pools as unknown[]).length, 1);
    await waitFor(async () => (await metric("space_warm_pool_ready")) === 5, "space_warm_pool_ready = 5", 10_000, 250);
  });

  test("5 sequential SDK creates each adopt a member; env var and metadata visible inside; timeout applied", async () => {
    for (let i = 0; i < 5; i++) {
      const members = new Set(await readyIds());
      const before = await metric("space_warm_pool_adoptions_total");
      const sb = await Sandbox.create({ ...opts, envs: { WARM_I: `v${i}` }, metadata: { n: String(i) }, timeoutMs: 90_000 });
      created.push(sb);
      assert.equal(await metric("space_warm_pool_adoptions_total"), before + 1, `create ${i} adopted`);
      assert.ok(members.has(sb.sandboxId), `create ${i} got a ready member (${sb.sandboxId})`);
      const r = await sb.commands.run("echo $WARM_I; hostname");
      assert.equal(r.stdout, `v${i}\n${sb.sandboxId}\n`);
      const info = await sb.getInfo();
      assert.deepEqual(info.metadata, { n: String(i) });
      const left = info.endAt.getTime() - Date.now();
      assert.ok(left > 60_000 && left <= 91_000, `timeout counts from adoption (${left} ms left)`);
      // A file round trip through envd with the per-sandbox access token.
      await sb.files.write("/home/user/w.txt", `w${i}`);
      assert.equal(await sb.files.read("/home/user/w.txt"), `w${i}`);
      // Members count against node capacity like any sandbox: free it for the refills.
      await sb.kill();
    }
  });

  test("a secure create keeps the member's own envd token, which envd requires; a create that is not secure clears it", async () => {
    await waitFor(async () => (await readyIds()).length >= 2, "two ready members", 120_000, 250);
    const members = new Set(await readyIds());
    const envs = (id: string, token?: string) =>
      fetch(`${stack.sandboxUrl}/envs`, { headers: { "e2b-sandbox-id": id, "e2b-sandbox-port": "49983", ...(token ? { "x-access-token": token } : {}) } });
    const secure = await Sandbox.create({ ...opts, timeoutMs: 60_000 });
    created.push(secure);
    assert.ok(members.has(secure.sandboxId), "adopted");
    assert.equal((await secure.commands.run("echo ok")).stdout, "ok\n");
    const token = (secure as unknown as { envdAccessToken?: string }).envdAccessToken;
    assert.ok(token, "the create answered a token");
    assert.equal((await envs(secure.sandboxId)).status, 401, "envd refuses a call without it");
    assert.equal((await envs(secure.sandboxId, token)).status, 200);
    await secure.kill();

    // ECW v1 without `secure`: not secure.
    const res = await fetch(`${stack.apiUrl}/sandboxes`, { method: "POST", headers: { "x-api-key": stack.apiKey, "content-type": "application/json" }, body: JSON.stringify({ templateID: "base", timeout: 60 }) });
    const body = (await res.json()) as { sandboxID: string; envdAccessToken?: string | null };
    assert.equal(res.status, 201, JSON.stringify(body));
    assert.ok(members.has(body.sandboxID), "adopted");
    assert.ok(!body.envdAccessToken, "no token for a create that is not secure");
    assert.equal((await envs(body.sandboxID)).status, 200, "envd's token was cleared");
    const open = await Sandbox.connect(body.sandboxID, opts);
    created.push(open);
    assert.equal((await open.commands.run("echo open")).stdout, "open\n");
    await open.kill();
  });

  test("the pool refills; 6 concurrent creates never share a member and the 6th goes cold", async () => {
    await waitFor(async () => (await readyIds()).length === 5, "refilled to 5", 120_000, 250);
    const members = new Set(await readyIds());
    const before = await metric("space_warm_pool_adoptions_total");
    await waitFor(async () => (await metric("space_warm_pool_creating")) === 0, "no refill in flight", 30_000, 100);
    const missesBefore = await metric("space_warm_pool_misses_total");
    const sbs = await Promise.all(Array.from({ length: 6 }, (_, i) => Sandbox.create({ ...opts, envs: { C: `c${i}` } })));
    created.push(...sbs);
    const ids = sbs.map((s) => s.sandboxId);
    assert.equal(new Set(ids).size, 6);
    assert.equal(ids.filter((id) => members.has(id)).length, 5, "5 members adopted, each once");
    assert.equal(await metric("space_warm_pool_adoptions_total"), before + 5);
    assert.equal(await metric("space_warm_pool_misses_total"), missesBefore + 1);
    const outs = await Promise.all(sbs.map((s) => s.commands.run("echo $C")));
    assert.deepEqual(outs.map((o) => o.stdout).sort(), ["c0\n", "c1\n", "c2\n", "c3\n", "c4\n", "c5\n"]);
    // Killing an adopted sandbox is the caller's: the pool is untouched.
    await Promise.all(sbs.map((s) => s.kill()));
    assert.equal(await sbs[0]!.isRunning(), false);
  });

  test("Native HTTP creates adopt members too: the 202 names the member; env and metadata visible inside; a replayed create keeps no reservation", async () => {
    await waitFor(async () => (await readyIds()).length === 5, "refilled to 5", 120_000, 250);
    await waitFor(async () => (await metric("space_warm_pool_creating")) === 0, "no refill in flight", 30_000, 100);
    const { token } = await tenantWithToken(stack.apiUrl, stack.adminToken, "warm-native", ALL);
    const native = new NativeClient(stack.apiUrl, token);
    const members = new Set(await readyIds());
    const before = await metric("space_warm_pool_adoptions_total");
    const r = await native.req("POST", "/v1/sandboxes", { body: { template: "base", env: { NATIVE_W: "n1" }, metadata: { k: "v" }, timeout_s: 120 } });
    assert.equal(r.status, 202, JSON.stringify(r.body));
    const id = String(r.body.target).split("/")[1]!;
    assert.ok(members.has(id), `the operation names a ready member (${id})`);
    const op = await native.wait(r.body.id);
    assert.equal(op.state, "succeeded", JSON.stringify(op.failure));
    assert.equal(op.result.id, id);
    assert.equal(await metric("space_warm_pool_adoptions_total"), before + 1, "the Native create adopted");
    const got = await native.req("GET", `/v1/sandboxes/${id}`);
    assert.equal(got.status, 200);
    assert.equal(got.body.state, "running");
    assert.deepEqual(got.body.metadata, { k: "v" });
    const out = await native.run(id, { cmd: "/bin/sh", args: ["-c", "echo $NATIVE_W; hostname"] });
    assert.equal(out.stdout, `n1\n${id}\n`);
    // Concurrent duplicates converge to one operation; the loser's reservation goes back to the pool.
    const [d1, d2] = await Promise.all([0, 1].map(() => native.req("POST", "/v1/sandboxes", { key: "warm-dup", body: { template: "base", timeout_s: 120 } })));
    assert.equal(d1!.body.id, d2!.body.id);
    const dupOp = await native.wait(d1!.body.id);
    assert.equal(dupOp.state, "succeeded", JSON.stringify(dupOp.failure));
    assert.deepEqual(
      (await pool()).members.filter((m) => m.state === "reserved"),
      [],
      "no member is left reserved for a create that will not run",
    );
    for (const sid of [id, dupOp.result.id as string]) assert.equal((await native.req("DELETE", `/v1/sandboxes/${sid}`)).status, 202);
  });

  test("a deleted pool drains its members", async () => {
    await waitFor(async () => (await readyIds()).length === 5, "refilled to 5", 120_000, 250);
    assert.equal((await admin("DELETE", "/warm-pools/base")).status, 204);
    await waitFor(async () => (await admin("GET", "/warm-pools/base")).status === 404, "pool gone");
    await waitFor(async () => (await metric("space_warm_pool_ready")) === 0, "members drained", 60_000, 250);
    const sb = await Sandbox.create(opts);
    created.push(sb);
    assert.equal((await sb.commands.run("echo cold")).stdout, "cold\n");
  });
});
