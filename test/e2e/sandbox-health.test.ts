/**
 * The node's health watchdog end to end (issue 27 item 2): a sandbox whose envd stops
 * answering (SIGSTOP from the host, as a ptrace or a lost link leaves it) does not stay
 * `running`: within a bounded number of checks its record is `failed` with an `unhealthy`
 * reason (the API answers 404 for it, as for any dead sandbox; the control plane logs the
 * reason), a call in flight gets an error instead of hanging, and a new commands.run fails
 * with the SDK's "not running anymore" error. Needs root (runc, netns).
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { Sandbox, type ConnectionOpts } from "e2b";
import { startStack, waitFor, type Stack } from "../support/stack.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : false;

describe("sandbox health watchdog", { skip, timeout: 15 * 60_000 }, () => {
  let stack: Stack;
  let opts: ConnectionOpts & { sandboxUrl: string };
  const stopped: number[] = [];

  before(async () => {
    stack = await startStack({ env: { SPACE_NODE_HEALTH_INTERVAL_MS: "1000", SPACE_NODE_HEALTH_THRESHOLD: "3" } });
    opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 120_000 };
  });
  after(async () => {
    // A frozen envd the watchdog did not end: let the stop kill it.
    for (const pid of stopped) spawnSync("kill", ["-CONT", String(pid)]);
    await stack?.stop();
  });

  test("a frozen envd: the sandbox becomes failed (unhealthy), calls get an error, not a hang", async () => {
    const sbx = await Sandbox.create("base", opts);
    assert.equal((await sbx.commands.run("echo alive")).stdout.trim(), "alive");
    const state = spawnSync("runc", ["--root", join(stack.dataDir, "runc"), "state", sbx.sandboxId], { encoding: "utf8" });
    const pid = (JSON.parse(state.stdout) as { pid: number }).pid;
    assert.ok(pid > 0, state.stderr);
    process.kill(pid, "SIGSTOP");
    stopped.push(pid);
    const inFlight = sbx.commands.run("echo late").then(
      () => "answered",
      (e: unknown) => e,
    );

    const native = { authorization: `Bearer ${stack.apiKey}` };
    let last = "";
    const rec = await waitFor(
      async () => {
        const r = await fetch(`${stack.apiUrl}/v1/sandboxes/${sbx.sandboxId}`, { headers: native });
        const body = (await r.json()) as { state?: string; reason?: string | null };
        last = `${r.status} ${JSON.stringify(body)}`;
        // A failed sandbox is dead to the API (404, as E2B answers for a sandbox that is gone).
        return r.status === 404 || body.state === "failed" ? { status: r.status, ...body } : undefined;
      },
      "the sandbox to be reported failed",
      60_000,
      250,
    ).catch((e: unknown) => {
      throw new Error(`${(e as Error).message}; last answer: ${last}`);
    });
    if (rec.status === 200) assert.match(String(rec.reason), /unhealthy: envd did not answer/);
    // Logged right after the record turned failed, which the GET above may see first.
    const logged = /envd did not answer 3 health checks in a row[^"]*"[^}]*"msg":"sandbox reported unhealthy by its node: failed"/;
    await waitFor(() => logged.test(stack.output()), "the node's verdict in the log", 10_000, 100).catch(() => assert.match(stack.output(), logged));

    const late = await inFlight;
    assert.ok(late instanceof Error, `the call in flight ended with ${String(late)}`);
    await assert.rejects(sbx.commands.run("echo again"), (e: unknown) => e instanceof Error && /not running anymore|sandbox was not found/i.test(e.message));
    // Killed on the node right after its record failed: nothing left behind it.
    const listed = () => spawnSync("runc", ["--root", join(stack.dataDir, "runc"), "list", "-q"], { encoding: "utf8" }).stdout;
    await waitFor(() => !listed().includes(sbx.sandboxId), `the container of ${sbx.sandboxId} to be gone (runc list: ${listed()})`, 60_000, 250);
  });
});
