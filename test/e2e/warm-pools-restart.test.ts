/**
 * A warm pool across a restart on the same data directory (issue 24): the pool never
 * reports a member it cannot adopt. Right after `space up` comes back, every member the
 * pool (and its metric) reports ready is adopted by a create through the e2b SDK, which
 * then runs a command in it; no create falls back to a cold boot. Needs root.
 */
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { adminRequest, metricSum, removeDataDir, startStack, waitFor, type Stack } from "../support/stack.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : false;

describe("warm pool after a restart (e2b SDK)", { skip, timeout: 20 * 60_000 }, () => {
  const dataDir = mkdtempSync(join(tmpdir(), "space-e2e-capacity-restart-"));
  let stack: Stack | undefined;
  const created: Sandbox[] = [];
  const start = () => startStack({ dataDir, env: { SPACE_WARM_POOLS: "base=3", SPACE_DEFAULT_VCPU: "1" } });
  const readyIds = async (s: Stack) =>
    ((await adminRequest(s, "GET", "/warm-pools/base")).body as { members: Array<{ state: string; sandbox_id: string }> }).members
      .filter((m) => m.state === "ready")
      .map((m) => m.sandbox_id);
  after(async () => {
    await Promise.allSettled(created.map((s) => s.kill()));
    await stack?.stop();
    removeDataDir(dataDir);
  });

  test("every member reported ready right after the restart is adopted and answers", async () => {
    stack = await start();
    const first = stack;
    await waitFor(async () => (await readyIds(first)).length === 3, "3 ready members", 180_000, 250);
    await stack.stop();
    stack = await start();
    const s = stack;
    const ready = new Set(await readyIds(s));
    const reported = await metricSum(s.apiUrl, "space_warm_pool_ready");
    assert.ok(reported <= ready.size, `the metric (${reported}) never reports more than the pool lists ready (${ready.size})`);
    if (ready.size === 0) await waitFor(async () => (await readyIds(s)).length > 0, "a ready member", 180_000, 250);
    const members = new Set(await readyIds(s));
    const before = await metricSum(s.apiUrl, "space_warm_pool_adoptions_total");
    const opts = { apiKey: s.apiKey, apiUrl: s.apiUrl, sandboxUrl: s.sandboxUrl, requestTimeoutMs: 120_000 };
    const got = await Promise.all([...members].map(() => Sandbox.create("base", opts)));
    created.push(...got);
    assert.equal(await metricSum(s.apiUrl, "space_warm_pool_adoptions_total"), before + members.size, "every reported member adopted");
    for (const sb of got) {
      assert.ok(members.has(sb.sandboxId), `got a reported member (${sb.sandboxId})`);
      assert.equal((await sb.commands.run("echo ok")).stdout.trim(), "ok");
    }
  });
});
