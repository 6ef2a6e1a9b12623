/**
 * Honest capacity end to end (docs/capacity.md), through the e2b SDK against a real
 * `space up` whose node has 3 network slots: a burst of concurrent creates fills the node
 * exactly (overfill 0) and the rest are refused with 429 naming the resource; killing a
 * sandbox frees its room for the next create at once (no 429 window waiting for a
 * heartbeat); a Native create that asks to wait for capacity stays queued on the full node
 * and runs once a kill frees room; one that does not fails at once. Needs root.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { RateLimitError, Sandbox, type ConnectionOpts } from "e2b";
import { startStack, type Stack } from "../support/stack.ts";
import { NativeClient } from "./native-client.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : false;

describe("capacity: reserved at placement, freed at once (e2b SDK)", { skip, timeout: 20 * 60_000 }, () => {
  let stack: Stack;
  let base: ConnectionOpts & { sandboxUrl: string };
  const created: Sandbox[] = [];

  before(async () => {
    // A heartbeat far slower than the test: nothing here may wait for one.
    stack = await startStack({ env: { SPACE_NODE_MAX_SLOTS: "3", SPACE_NODE_HEARTBEAT_MS: "60000", SPACE_CAPACITY_RETRY_AFTER_S: "1" } });
    base = { apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, apiKey: stack.apiKey, requestTimeoutMs: 120_000 };
  });
  after(async () => {
    await Promise.allSettled(created.splice(0).map((s) => s.kill()));
    await stack?.stop();
  });

  test("8 concurrent creates against 3 slots: exactly 3 run, 5 get 429 naming the slots; a kill admits the next create at once", async () => {
    const results = await Promise.allSettled(Array.from({ length: 8 }, () => Sandbox.create("base", { ...base, timeoutMs: 300_000 })));
    for (const r of results) if (r.status === "fulfilled") created.push(r.value);
    assert.equal(created.length, 3, JSON.stringify(results.map((r) => (r.status === "fulfilled" ? "ok" : String(r.reason)))));
    for (const r of results) {
      if (r.status === "rejected") {
        assert.ok(r.reason instanceof RateLimitError, String(r.reason));
        assert.match(r.reason.message, /full \(network slots\)/);
      }
    }
    // Every admitted sandbox really runs.
    for (const sb of created) assert.equal((await sb.commands.run("echo ok")).stdout.trim(), "ok");

    const gone = created.shift()!;
    await gone.kill();
    // One raw create, no retry (an SDK that retries a 429 could hide a refusal window): 201 at once.
    const rawCreate = () =>
      fetch(`${stack.apiUrl}/sandboxes`, {
        method: "POST",
        headers: { "X-API-Key": stack.apiKey, "content-type": "application/json" },
        body: JSON.stringify({ templateID: "base", timeout: 300 }),
      });
    const admitted = await rawCreate();
    assert.equal(admitted.status, 201, await admitted.clone().text());
    const next = await Sandbox.connect(((await admitted.json()) as { sandboxID: string }).sandboxID, base);
    created.push(next);
    assert.equal((await next.commands.run("echo next")).stdout.trim(), "next");
    // Full again: E2B's answer, 429 with Retry-After, naming the resource.
    const full = await rawCreate();
    assert.equal(full.status, 429, await full.clone().text());
    assert.equal(full.headers.get("retry-after"), "1");
    assert.match(await full.text(), /full \(network slots\)/);
    await assert.rejects(Sandbox.create("base", { ...base, timeoutMs: 300_000 }), (e: unknown) => e instanceof RateLimitError && /full \(network slots\)/.test(e.message));
  });

  test("Native wait_for_capacity: queued while the node is full, placed when a kill frees room; without it the create fails at once", async () => {
    assert.equal(created.length, 3, "the node is full from the test before");
    const native = new NativeClient(stack.apiUrl, stack.apiKey);
    const refused = await native.req("POST", "/v1/sandboxes", { body: { template: "base", timeout_s: 300 } });
    assert.equal(refused.status, 202, JSON.stringify(refused.body));
    const failed = await native.wait(refused.body.id, 60_000);
    assert.equal(failed.state, "failed");
    assert.match(failed.failure.message, /full \(network slots\)/);

    const bad = await native.req("POST", "/v1/sandboxes", { body: { template: "base", wait_for_capacity: "yes" } });
    assert.equal(bad.status, 400, JSON.stringify(bad.body));
    assert.match(JSON.stringify(bad.body), /wait_for_capacity/);

    const queued = await native.req("POST", "/v1/sandboxes", { body: { template: "base", timeout_s: 300, wait_for_capacity: true } });
    assert.equal(queued.status, 202, JSON.stringify(queued.body));
    await new Promise((r) => setTimeout(r, 3_000));
    const still = await native.req("GET", `/v1/operations/${queued.body.id}`);
    assert.ok(still.body.state !== "failed" && still.body.state !== "succeeded", `still queued: ${JSON.stringify(still.body)}`);
    await created.shift()!.kill();
    const op = await native.wait(queued.body.id, 120_000);
    assert.equal(op.state, "succeeded", JSON.stringify(op.failure));
    const run = await native.run(op.result.id, { cmd: "echo", args: ["queued"] });
    assert.equal(run.stdout.trim(), "queued");
    assert.equal((await native.req("DELETE", `/v1/sandboxes/${op.result.id}`)).status, 202);
  });
});
