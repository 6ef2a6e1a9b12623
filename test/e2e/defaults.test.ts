/**
 * Safe defaults (issue 27, item 9) on the real stack: `/metrics` behind
 * SPACE_METRICS_TOKEN when it is set (open without it, as docs/operations.md says).
 * Needs root (runc, netns, btrfs).
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { startStack, type Stack } from "../support/stack.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : false;
const TOKEN = "metrics-token-0123456789abcdef";

describe("defaults: /metrics with SPACE_METRICS_TOKEN", { skip, timeout: 6 * 60_000 }, () => {
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
});
