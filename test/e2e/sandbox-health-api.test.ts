/**
 * The watchdog's verdict as the API shows it (issue 27 item 2): once a frozen envd made
 * a sandbox `failed`, Native GET /v1/sandboxes/{id} answers 200 with state `failed` and
 * the `unhealthy: …` reason (a caller asks why its sandbox is gone), the Native list of
 * failed sandboxes carries the same reason, and ECW agrees that it is gone everywhere (GET
 * 404, not in the list, connect 404). A killed sandbox stays 404 on Native GET. Needs root.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { Sandbox, type ConnectionOpts } from "e2b";
import { startStack, waitFor, type Stack } from "../support/stack.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : false;

describe("the watchdog's verdict through the API", { skip, timeout: 10 * 60_000 }, () => {
  let stack: Stack;
  let opts: ConnectionOpts & { sandboxUrl: string };
  const stopped: number[] = [];

  before(async () => {
    stack = await startStack({ env: { SPACE_NODE_HEALTH_INTERVAL_MS: "1000", SPACE_NODE_HEALTH_THRESHOLD: "3" } });
    opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 120_000 };
  });
  after(async () => {
    for (const pid of stopped) spawnSync("kill", ["-CONT", String(pid)]);
    await stack?.stop();
  });

  const native = () => ({ authorization: `Bearer ${stack.apiKey}` });
  const ecw = () => ({ "x-api-key": stack.apiKey });

  test("failed by the watchdog: Native GET and list carry the reason, ECW says gone", async () => {
    const sbx = await Sandbox.create("base", opts);
    const state = spawnSync("runc", ["--root", join(stack.dataDir, "runc"), "state", sbx.sandboxId], { encoding: "utf8" });
    const pid = (JSON.parse(state.stdout) as { pid: number }).pid;
    process.kill(pid, "SIGSTOP");
    stopped.push(pid);

    let last = "";
    await waitFor(
      async () => {
        const r = await fetch(`${stack.apiUrl}/v1/sandboxes?state=failed`, { headers: native() });
        last = await r.text();
        return (JSON.parse(last) as { sandboxes: Array<{ id: string }> }).sandboxes.some((s) => s.id === sbx.sandboxId) || undefined;
      },
      "the sandbox in the failed list",
      60_000,
      250,
    ).catch((e: unknown) => {
      throw new Error(`${(e as Error).message}; last: ${last}`);
    });
    const listed = (JSON.parse(last) as { sandboxes: Array<{ id: string; state: string; reason: string | null }> }).sandboxes.find((s) => s.id === sbx.sandboxId)!;
    assert.equal(listed.state, "failed");
    assert.match(String(listed.reason), /^unhealthy: envd did not answer/);

    const got = await fetch(`${stack.apiUrl}/v1/sandboxes/${sbx.sandboxId}`, { headers: native() });
    const body = (await got.json()) as { id: string; state: string; reason: string | null };
    assert.equal(got.status, 200, JSON.stringify(body));
    assert.deepEqual([body.id, body.state, body.reason], [sbx.sandboxId, "failed", listed.reason]);

    assert.equal((await fetch(`${stack.apiUrl}/sandboxes/${sbx.sandboxId}`, { headers: ecw() })).status, 404);
    const ecwList = (await (await fetch(`${stack.apiUrl}/v2/sandboxes?state=running,paused`, { headers: ecw() })).json()) as Array<{ sandboxID: string }>;
    assert.ok(!ecwList.some((s) => s.sandboxID === sbx.sandboxId), "not in the ECW list");
    await assert.rejects(Sandbox.connect(sbx.sandboxId, opts), /not found|404/i);
    assert.equal(await Sandbox.getInfo(sbx.sandboxId, opts).then(() => "found", (e: Error) => e.constructor.name), "SandboxNotFoundError");
  });

  test("a killed sandbox stays 404 on Native GET", async () => {
    const sbx = await Sandbox.create("base", opts);
    await sbx.kill();
    assert.equal((await fetch(`${stack.apiUrl}/v1/sandboxes/${sbx.sandboxId}`, { headers: native() })).status, 404);
  });
});
