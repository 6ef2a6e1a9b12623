/**
 * Sandbox logs across nodes (issue 20 item 11): a sandbox paused on node A (`space up`)
 * and connected on node B (a standalone `space node` sharing only the blob store) keeps
 * the lines it logged on A: envd's ring travels in the memory checkpoint, and B, which
 * never saw the sandbox, pulls all of it. The e2b SDK drives the sandbox; logs go through
 * its own `ApiClient`. Needs root (runc, CRIU, network namespaces, btrfs).
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { ApiClient, ConnectionConfig, Sandbox, type ConnectionOpts, type components } from "e2b";
import type { Stack } from "../support/stack.ts";
import { startTwoNodes, type TwoNodes } from "../support/two-nodes.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, CRIU, network namespaces, btrfs)" : false;

describe("sandbox logs follow a sandbox restored on another node", { skip, timeout: 10 * 60_000 }, () => {
  let two: TwoNodes;
  let stack: Stack;
  let opts: ConnectionOpts & { sandboxUrl: string };
  const created: string[] = [];
  const only = (on: "a" | "b") => two.only(on);
  const runcList = (stateDir: string) => two.runcList(stateDir);

  before(async () => {
    two = await startTwoNodes("logs");
    stack = two.stack;
    opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 300_000 };
  });

  after(async () => {
    await Promise.allSettled(created.map((id) => Sandbox.kill(id, opts)));
    await two?.stop();
  });

  test("paused on A, connected on B: the lines logged on A are there, and B's after them", async () => {
    const api = new ApiClient(new ConnectionConfig(opts)).api;
    const logs = async (id: string): Promise<components["schemas"]["SandboxLogEntry"][]> => {
      const r = await api.GET("/v2/sandboxes/{sandboxID}/logs", { params: { path: { sandboxID: id } } });
      assert.equal(r.response.status, 200);
      return r.data!.logs;
    };
    const started = (l: components["schemas"]["SandboxLogEntry"][], arg: string) => l.findIndex((e) => e.message === "process started" && (e.fields.args ?? "").includes(arg));

    await only("a");
    const sb = await Sandbox.create({ ...opts, timeoutMs: 600_000 });
    created.push(sb.sandboxId);
    assert.ok(runcList(join(stack.dataDir, "runc")).includes(sb.sandboxId), "created on node A");
    await sb.commands.run("echo on-node-a");
    assert.equal(await sb.pause(), true);
    await only("b");
    const back = await Sandbox.connect(sb.sandboxId, { ...opts, timeoutMs: 600_000 });
    assert.ok(runcList(two.bRuntimeStateDir).includes(sb.sandboxId), "restored on node B");
    await back.commands.run("echo on-node-b");
    const l = await logs(sb.sandboxId);
    const a = started(l, "on-node-a");
    const b = started(l, "on-node-b");
    assert.ok(a >= 0 && b > a, `A's line then B's: ${JSON.stringify(l.slice(-8).map((e) => [e.message, e.fields.args]))}`);
  });
});
