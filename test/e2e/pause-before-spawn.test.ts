/**
 * A sandbox paused before envd served any process or filesystem call: after connect, its
 * first such call works (envd restored from the memory image must survive its first wasm
 * compile, see ENVD_NODE_FLAGS in src/node/sandboxes/envd-launch.ts). Needs root.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox, type ConnectionOpts } from "e2b";
import { startStack, type Stack } from "../support/stack.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, CRIU, network namespaces, btrfs)" : false;

describe("pause before the first command", { skip, timeout: 10 * 60_000 }, () => {
  let stack: Stack;
  let opts: ConnectionOpts & { sandboxUrl: string };
  const created: string[] = [];

  before(async () => {
    stack = await startStack();
    opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 300_000 };
  });
  after(async () => {
    await Promise.allSettled(created.map((id) => Sandbox.kill(id, opts)));
    await stack?.stop();
  });

  test("create → pause (no command yet) → connect → commands.run works", async () => {
    const sb = await Sandbox.create(opts);
    created.push(sb.sandboxId);
    assert.equal(await sb.pause(), true);
    const back = await Sandbox.connect(sb.sandboxId, opts);
    assert.equal((await back.commands.run("echo back")).stdout, "back\n");
    assert.equal((await back.commands.run("echo again")).stdout, "again\n");
  });

  test("create → pause (no call yet) → connect → files.list, then commands.run works", async () => {
    const sb = await Sandbox.create(opts);
    created.push(sb.sandboxId);
    assert.equal(await sb.pause(), true);
    const back = await Sandbox.connect(sb.sandboxId, opts);
    assert.ok((await back.files.list("/")).some((e) => e.name === "tmp"));
    assert.equal((await back.commands.run("echo back")).stdout, "back\n");
  });
});
