/**
 * Safe defaults (issue 27, item 9) on the real stack: `/metrics` behind
 * SPACE_METRICS_TOKEN when it is set (open without it, as docs/operations.md says); a
 * create whose start fails on the node tells the client no host path (ECW through the
 * e2b SDK, Native through the operation), the server log keeps the text.
 * Needs root (runc, netns, btrfs).
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { startStack, type Stack } from "../support/stack.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : false;
const TOKEN = "metrics-token-0123456789abcdef";

describe("defaults: /metrics with SPACE_METRICS_TOKEN, start failures without host paths", { skip, timeout: 6 * 60_000 }, () => {
  let stack: Stack;

  before(async () => {
    stack = await startStack({ env: { SPACE_METRICS_TOKEN: TOKEN } });
  });
  after(async () => {
    await stack?.stop();
  });

  test("without the token (or with another credential) /metrics is 401 and shows nothing", async () => {
    for (const authorization of [undefined, `Bearer ${stack.adminToken}`, `Bearer ${TOKEN}x`]) {
      const r = await fetch(`${stack.apiUrl}/metrics`, { headers: authorization ? { authorization } : {} });
      const text = await r.text();
      assert.equal(r.status, 401, text.slice(0, 200));
      assert.doesNotMatch(text, /space_api_requests_total|process_cpu/);
      assert.match(text, /SPACE_METRICS_TOKEN/);
    }
  });

  test("with the token it is the Prometheus text", async () => {
    const r = await fetch(`${stack.apiUrl}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } });
    assert.equal(r.status, 200);
    assert.match(await r.text(), /space_api_requests_total/);
  });

  test("a start the node cannot do (its runtime state dir is read-only) answers without a host path: ECW 500, Native failed operation", async () => {
    // hostScopeFor: the stack's runc state directory, a tmpfs the node mounted (in its data
    // dir); read-only, every runtime start fails on it naming a host path.
    const state = join(stack.dataDir, "runc");
    execFileSync("mount", ["-o", "remount,ro", state]);
    try {
      const ecw = await Sandbox.create("base", { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, timeoutMs: 60_000 }).then(
        () => assert.fail("the create should fail"),
        (e: unknown) => String((e as Error).message),
      );
      assert.doesNotMatch(ecw, new RegExp(stack.dataDir), ecw);
      assert.doesNotMatch(ecw, /\/tmp\/|EEXIST|mkdir/, ecw);

      const headers = { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" };
      const created = (await (await fetch(`${stack.apiUrl}/v1/sandboxes`, { method: "POST", headers, body: JSON.stringify({ template: "base" }) })).json()) as { id: string };
      const op = (await (await fetch(`${stack.apiUrl}/v1/operations/${created.id}?wait=30s`, { headers })).json()) as { state: string; failure: { code: string; message: string } | null };
      assert.equal(op.state, "failed", JSON.stringify(op));
      assert.doesNotMatch(op.failure!.message, new RegExp(stack.dataDir), JSON.stringify(op));
      assert.doesNotMatch(op.failure!.message, /\/tmp\/|EEXIST|mkdir/, JSON.stringify(op));
    } finally {
      execFileSync("mount", ["-o", "remount,rw", state]);
    }
  });
});
