/**
 * ECW v1 paths with an SDK <= 2.50 (`POST /sandboxes`, `/connect`, secure:true sent by
 * the SDK), against the real stack.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox } from "e2b-250";
import { startStack, type Stack } from "../support/stack.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : false;

describe("ECW with e2b 2.50 (v1 paths)", { skip, timeout: 10 * 60_000 }, () => {
  let stack: Stack;
  before(async () => {
    stack = await startStack();
  });
  after(async () => {
    await stack?.stop();
  });

  test("create (v1) → run → files → connect → kill", async () => {
    const opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 120_000 };
    const sb = await Sandbox.create({ ...opts, timeoutMs: 60_000 });
    try {
      assert.equal((await sb.commands.run("echo v1")).stdout, "v1\n");
      await sb.files.write("/home/user/x.txt", "x");
      assert.equal(await sb.files.read("/home/user/x.txt"), "x");
      const again = await Sandbox.connect(sb.sandboxId, opts);
      assert.equal((await again.commands.run("cat x.txt")).stdout, "x");
      const listed = await Sandbox.list(opts).nextItems();
      assert.ok(listed.some((s) => s.sandboxId === sb.sandboxId));
    } finally {
      await sb.kill();
    }
    assert.equal(await Sandbox.kill(sb.sandboxId, opts), false);
  });
});
