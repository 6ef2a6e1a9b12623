/**
 * Warm pools with idle policy `suspended`, end to end: the real stack (`space up`: api +
 * controller + node with runc and CRIU) and the unmodified e2b SDK. Members of a pool of
 * 2 are suspended on their node (runc lists no container for them); an SDK create adopts
 * one (restored on its node, then personalised: its env var is visible to a command); the
 * pool refills with a suspended member.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { Sandbox, type ConnectionOpts } from "e2b";
import { adminRequest, metricSum, startStack, waitFor, type Stack } from "../support/stack.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, CRIU, network namespaces, btrfs)" : false;

describe("warm pools: suspended idle members with the e2b SDK", { skip, timeout: 10 * 60_000 }, () => {
  let stack: Stack;
  let opts: ConnectionOpts & { sandboxUrl: string };
  const created: Sandbox[] = [];

  const admin = (method: string, path: string, body?: unknown) => adminRequest(stack, method, path, body);
  const members = async () => ((await admin("GET", "/warm-pools/base")).body as { members: Array<{ state: string; sandbox_id: string }> }).members;
  const suspendedIds = async () => (await members()).filter((m) => m.state === "suspended").map((m) => m.sandbox_id);
  const metric = (name: string) => metricSum(stack.apiUrl, name);
  /** Containers the stack's node runs (runc state dir of its host scope), by id. */
  const containers = () => {
    const r = spawnSync("runc", ["--root", join(stack.dataDir, "runc"), "list", "-f", "json"], { encoding: "utf8" });
    return new Map(((JSON.parse(r.stdout || "null") ?? []) as { id: string; status: string }[]).map((c) => [c.id, c.status]));
  };

  before(async () => {
    stack = await startStack({ env: { SPACE_DEFAULT_VCPU: "1" } });
    opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 120_000 };
  });
  after(async () => {
    await Promise.allSettled(created.map((s) => s.kill()));
    await stack?.stop();
  });

  test("members are suspended (no container on the node); an SDK create adopts one, restored and personalised; the pool refills suspended", async () => {
    const bad = await admin("PUT", "/warm-pools/base", { size: 2, idle_policy: "asleep" });
    assert.equal(bad.status, 400);
    assert.match(JSON.stringify(bad.body), /idle_policy/);
    const put = await admin("PUT", "/warm-pools/base", { size: 2, idle_policy: "suspended" });
    assert.equal(put.status, 200, JSON.stringify(put.body));
    assert.equal(put.body.idle_policy, "suspended");

    await waitFor(async () => (await suspendedIds()).length === 2, "2 suspended members", 180_000, 250);
    const pool = new Set(await suspendedIds());
    const running = containers();
    for (const id of pool) assert.equal(running.get(id), undefined, `member ${id} has no container on the node while suspended`);
    await waitFor(async () => (await metric("space_warm_pool_suspended")) === 2, "space_warm_pool_suspended = 2", 10_000, 250);

    const adoptionsBefore = await metric("space_warm_pool_adoptions_total");
    const t0 = Date.now();
    const sb = await Sandbox.create({ ...opts, envs: { WARM_S: "s1" }, metadata: { who: "e2e" }, timeoutMs: 120_000 });
    const createMs = Date.now() - t0;
    created.push(sb);
    assert.ok(pool.has(sb.sandboxId), `the create adopted a suspended member (${sb.sandboxId})`);
    assert.equal(await metric("space_warm_pool_adoptions_total"), adoptionsBefore + 1);
    assert.equal(containers().get(sb.sandboxId), "running", "restored on the node");
    const r = await sb.commands.run("echo $WARM_S; hostname");
    assert.equal(r.stdout, `s1\n${sb.sandboxId}\n`);
    assert.deepEqual((await sb.getInfo()).metadata, { who: "e2e" });
    console.log(`# SDK create adopting a suspended member: ${createMs} ms (restore + personalisation)`);

    await waitFor(
      async () => {
        const ids = await suspendedIds();
        return ids.length === 2 && !ids.includes(sb.sandboxId);
      },
      "the pool refilled with a suspended member",
      180_000,
      250,
    );
    await sb.kill();
    assert.equal((await admin("DELETE", "/warm-pools/base")).status, 204);
  });
});
