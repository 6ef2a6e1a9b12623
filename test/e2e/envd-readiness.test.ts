/**
 * How the node learns that a sandbox's envd is ready, through the unmodified SDK on the
 * real stack: a fresh create by envd's word on the readiness FIFO the node passes to the
 * init (no /health poll), a sandbox restored from its memory checkpoint (pause → connect)
 * over HTTP, since envd comes back listening with no such fd. The node's breakdown, in its
 * record of the sandbox (`<node dir>/sandboxes/<id>.json`), names the path that ran:
 * `envdEventMs` or `envdPollMs`. Needs root (runc, CRIU, network namespaces, btrfs).
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { Sandbox, type ConnectionOpts } from "e2b";
import { startStack, type Stack } from "../support/stack.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, CRIU, network namespaces, btrfs)" : false;

describe("envd readiness: event on create, HTTP after a restore", { skip, timeout: 10 * 60_000 }, () => {
  let stack: Stack;
  let opts: ConnectionOpts & { sandboxUrl: string };
  const created: string[] = [];
  const timings = async (id: string) =>
    (JSON.parse(await readFile(join(stack.dataDir, "node", "sandboxes", `${id}.json`), "utf8")) as { timings?: Record<string, number> }).timings ?? {};

  before(async () => {
    stack = await startStack();
    opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 300_000 };
  });
  after(async () => {
    await Promise.allSettled(created.map((id) => Sandbox.kill(id, opts)));
    await stack?.stop();
  });

  test("create: ready by envd's word; the first command runs at once; a restore is checked over HTTP", async () => {
    const sb = await Sandbox.create(opts);
    created.push(sb.sandboxId);
    assert.equal((await sb.commands.run("echo hi")).stdout, "hi\n");
    const t = await timings(sb.sandboxId);
    assert.equal(typeof t.envdEventMs, "number", JSON.stringify(t));
    assert.equal(t.envdPollMs, undefined, JSON.stringify(t));
    // The memory checkpoint succeeds: envd closed the readiness fd once it had said ready
    // (CRIU cannot dump a FIFO whose path the sandbox does not see).
    assert.equal(await sb.pause(), true);
    const back = await Sandbox.connect(sb.sandboxId, opts);
    assert.equal((await back.commands.run("echo back")).stdout, "back\n");
    const r = await timings(sb.sandboxId);
    assert.equal(typeof r.envdPollMs, "number", JSON.stringify(r));
    assert.equal(r.envdEventMs, undefined, JSON.stringify(r));
  });
});
