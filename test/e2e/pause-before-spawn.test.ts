/**
 * A sandbox paused before envd served any process or filesystem call: after connect, its
 * first such call works. envd (Node.js) compiles its first wasm then, and a process
 * restored from a memory image must be able to (no memory protection keys in a sandbox:
 * src/runtime/oci/seccomp.ts); so must any Node.js process in the sandbox. Needs root.
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

  test("a Node.js process of the sandbox compiles its first wasm after pause → connect", async () => {
    const sb = await Sandbox.create(opts);
    created.push(sb.sandboxId);
    // (module (func (export "f") (result i32) i32.const 42)), compiled once /tmp/go exists.
    const script = `const fs = require("fs");
const wasm = new Uint8Array([0,97,115,109,1,0,0,0,1,5,1,96,0,1,127,3,2,1,0,7,5,1,1,102,0,0,10,6,1,4,0,65,42,11]);
fs.writeFileSync("/tmp/ready", String(process.pid));
const t = setInterval(() => {
  if (!fs.existsSync("/tmp/go")) return;
  clearInterval(t);
  WebAssembly.instantiate(wasm).then((r) => fs.writeFileSync("/tmp/wasm", String(r.instance.exports.f())));
}, 50);
`;
    await sb.files.write("/tmp/wasm.js", script);
    // The sandbox's Node.js binary (mounted for envd).
    await sb.commands.run("/opt/space/bin/node /tmp/wasm.js", { background: true });
    assert.equal((await sb.commands.run("until test -s /tmp/ready; do sleep 0.05; done; echo up")).stdout, "up\n");
    assert.equal(await sb.pause(), true);
    const back = await Sandbox.connect(sb.sandboxId, opts);
    const r = await back.commands.run("touch /tmp/go; until test -s /tmp/wasm || ! kill -0 $(cat /tmp/ready) 2>/dev/null; do sleep 0.05; done; cat /tmp/wasm 2>/dev/null; echo");
    assert.equal(r.stdout, "42\n", "the restored Node.js process aborted at its first wasm compile");
  });
});
