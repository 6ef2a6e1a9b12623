/**
 * Crash and stop recovery end to end (issue 27 items 7 and 10), on `space up` spawned as a
 * real process: a `kill -9` in the middle of an ECW create leaves no phantom record once
 * it is restarted (the record converges with what the node really has), and a terminal's
 * Ctrl-C (SIGINT to the whole process group) releases the node: no container, no mount,
 * no veth left, exit 0. Needs root (runc, network namespaces, btrfs).
 */
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox, type ConnectionOpts } from "e2b";
import { removeNodeContainers, removeNodeNetwork } from "../support/node-network-cleanup.ts";
import { runSpace, type SpaceProcess, type SpaceProcessOptions } from "../support/space-process.ts";
import { adminRequest, freePort, hostScopeFor, nodeNetworkOf, removeDataDir, waitFor } from "../support/stack.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : false;

interface Up {
  proc: SpaceProcess;
  apiUrl: string;
  sandboxUrl: string;
  apiKey: string;
  adminToken: string;
}

async function up(env: Record<string, string>, opts: SpaceProcessOptions = {}): Promise<Up> {
  const proc = runSpace(["up"], { SPACE_LOG_LEVEL: process.env.SPACE_LOG_LEVEL ?? "warn", ...env }, opts);
  try {
    await proc.waitFor(/^export SPACE_ADMIN_TOKEN=\S+\n/m, 10 * 60_000);
    const v = (name: string) => new RegExp(`^export ${name}=(\\S+)$`, "m").exec(proc.out())?.[1] ?? "";
    return { proc, apiUrl: v("E2B_API_URL"), sandboxUrl: v("E2B_SANDBOX_URL"), apiKey: v("E2B_API_KEY"), adminToken: v("SPACE_ADMIN_TOKEN") };
  } catch (e) {
    await proc.stop();
    throw e;
  }
}

/** A fresh data directory with its own host scope and ports. */
async function scopeEnv(name: string) {
  const dataDir = mkdtempSync(join(tmpdir(), `space-${name}-`));
  const env: Record<string, string> = {
    SPACE_DATA_DIR: dataDir,
    ...hostScopeFor(dataDir),
    SPACE_API_PORT: String(await freePort()),
    SPACE_GATEWAY_PORT: String(await freePort()),
    SPACE_NODE_PORT: String(await freePort()),
  };
  return { dataDir, env };
}

const runcIds = (stateDir: string) =>
  spawnSync("runc", ["--root", stateDir, "list", "-q"], { encoding: "utf8" }).stdout.split("\n").filter(Boolean);

describe("crash and stop recovery", { skip, timeout: 20 * 60_000 }, () => {
  const cleanups: Array<() => Promise<void> | void> = [];
  after(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  test("kill -9 during an ECW create: after the restart the record is failed or killed, or running with a real sandbox", async () => {
    const { dataDir, env } = await scopeEnv("crash-create");
    const stateDir = env.SPACE_NODE_RUNTIME_STATE_DIR!;
    let current: Up | undefined = await up(env);
    cleanups.push(async () => {
      await current?.proc.stop();
      removeNodeContainers("runc", stateDir);
      removeNodeNetwork(nodeNetworkOf(env));
      removeDataDir(dataDir);
    });
    const { apiUrl, apiKey } = current;
    const create = fetch(`${apiUrl}/sandboxes`, {
      method: "POST",
      headers: { "x-api-key": apiKey, "content-type": "application/json" },
      body: JSON.stringify({ templateID: "base", timeout: 300 }),
    }).catch(() => undefined);
    // The container exists (runc wrote its state) while the create still waits for envd.
    const sandboxId = await waitFor(
      () => (existsSync(stateDir) ? readdirSync(stateDir).find((d) => /^[a-z0-9]{20}$/.test(d)) : undefined),
      "a container being created",
      120_000,
      10,
    );
    await current.proc.stop("SIGKILL");
    await create;

    current = await up(env);
    const native = { authorization: `Bearer ${current.apiKey}` };
    let last = "";
    await waitFor(
      async () => {
        const r = await fetch(`${current!.apiUrl}/v1/sandboxes/${sandboxId}`, { headers: native });
        const body = (await r.json()) as { state?: string };
        last = `${r.status} ${JSON.stringify(body)}; containers: ${runcIds(stateDir).join(",")}`;
        if (r.status === 404) return true;
        if (body.state === "failed" || body.state === "killed") return true;
        return body.state === "running" && runcIds(stateDir).includes(sandboxId) ? true : undefined;
      },
      `the record of ${sandboxId} to converge with the node (last: ${last})`,
      30_000,
      250,
    ).catch((e: unknown) => {
      throw new Error(`${(e as Error).message}\nlast answer: ${last}`);
    });
    // ECW agrees: no running sandbox without a container behind it.
    const ecw = await fetch(`${current.apiUrl}/sandboxes/${sandboxId}`, { headers: { "x-api-key": current.apiKey } });
    const ecwBody = (await ecw.json()) as { state?: string };
    if (ecw.status === 200 && ecwBody.state === "running") assert.ok(runcIds(stateDir).includes(sandboxId), `ECW says running: ${JSON.stringify(ecwBody)}`);
  });

  test("Ctrl-C (SIGINT to the process group) releases the node: no container, mount or veth left, exit 0", async () => {
    const { dataDir, env } = await scopeEnv("ctrl-c");
    const stateDir = env.SPACE_NODE_RUNTIME_STATE_DIR!;
    const network = nodeNetworkOf(env);
    const stack = await up(env, { processGroup: true });
    cleanups.push(async () => {
      await stack.proc.stop();
      removeNodeContainers("runc", stateDir);
      removeNodeNetwork(network);
      removeDataDir(dataDir);
    });
    const sbx = await Sandbox.create("base", { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 120_000 } as ConnectionOpts & { sandboxUrl: string });
    // Its template's capture after boot may be under way beside it: a container of the node's too.
    assert.ok(runcIds(stateDir).includes(sbx.sandboxId));

    process.kill(-stack.proc.child.pid!, "SIGINT");
    const code = await new Promise<number | null>((r) => {
      if (stack.proc.exited()) r(stack.proc.child.exitCode);
      else stack.proc.child.once("exit", (c) => r(c));
    });
    assert.equal(code, 0, stack.proc.out().slice(-3000));
    const failures = stack.proc.out().match(/cleanup \w+: [^"\\]*|spawn server exited[^"\\]*/g) ?? [];
    assert.deepEqual(failures, [], "the shutdown's commands all ran");
    assert.deepEqual(runcIds(stateDir), [], "no container left");
    const mounts = readFileSync("/proc/self/mounts", "utf8")
      .split("\n")
      .filter((l) => l.includes(sbx.sandboxId));
    assert.deepEqual(mounts, [], "no mount of the sandbox left");
    const veths = spawnSync("ip", ["-o", "link", "show"], { encoding: "utf8" })
      .stdout.split("\n")
      .filter((l) => new RegExp(`^\\d+: ${network.vethPrefix}\\d+[@:]`).test(l));
    assert.deepEqual(veths, [], "no veth of the node left");
  });

  test("Ctrl-C while sandboxes are being killed: their kills and the release finish, nothing left, exit 0 at once", async () => {
    const { dataDir, env } = await scopeEnv("ctrl-c-kill");
    const stateDir = env.SPACE_NODE_RUNTIME_STATE_DIR!;
    const network = nodeNetworkOf(env);
    const stack = await up(env, { processGroup: true });
    cleanups.push(async () => {
      await stack.proc.stop();
      removeNodeContainers("runc", stateDir);
      removeNodeNetwork(network);
      removeDataDir(dataDir);
    });
    const conn = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 120_000 } as ConnectionOpts & { sandboxUrl: string };
    const sbxs = await Promise.all([1, 2, 3].map(() => Sandbox.create("base", conn)));
    // The kills are running on the node (runc, umount, ip in flight) when the terminal's Ctrl-C comes:
    // a runc of theirs seen, or a record `killing` (the node tearing it down). A kill's runc
    // processes live a few ms each, shorter than a pgrep on a busy machine can be sure to see.
    const nodeId = String(((await adminRequest(stack, "GET", "/nodes")).body.nodes as Array<{ id: string }>)[0]!.id);
    const kills = sbxs.map((s) => fetch(`${stack.apiUrl}/sandboxes/${s.sandboxId}`, { method: "DELETE", headers: { "x-api-key": stack.apiKey } }).catch(() => undefined));
    const killing = async () => ((await adminRequest(stack, "GET", `/nodes/${nodeId}`)).body.sandboxes as Array<{ state: string }>).some((x) => x.state === "killing");
    await waitFor(async () => spawnSync("pgrep", ["-f", `runc --root ${stateDir} (kill|delete)`]).status === 0 || (await killing()), "a kill in flight", 30_000, 5);
    process.kill(-stack.proc.child.pid!, "SIGINT");
    await Promise.all(kills);
    const answered = Date.now();
    const code = await new Promise<number | null>((r) => {
      if (stack.proc.exited()) r(stack.proc.child.exitCode);
      else stack.proc.child.once("exit", (c) => r(c));
    });
    assert.equal(code, 0, stack.proc.out().slice(-3000));
    // The kills' connections close once answered, not at their keep-alive timeout (72 s).
    assert.ok(Date.now() - answered < 30_000, `exited ${Date.now() - answered} ms after the kills were answered`);
    const failures = stack.proc.out().match(/cleanup \w+: [^"\\]*|spawn server exited[^"\\]*/g) ?? [];
    assert.deepEqual(failures, [], "the shutdown's commands all ran");
    assert.deepEqual(runcIds(stateDir), [], "no container left");
    const mounts = readFileSync("/proc/self/mounts", "utf8")
      .split("\n")
      .filter((l) => sbxs.some((s) => l.includes(s.sandboxId)));
    assert.deepEqual(mounts, [], "no mount of the sandbox left");
    const veths = spawnSync("ip", ["-o", "link", "show"], { encoding: "utf8" })
      .stdout.split("\n")
      .filter((l) => new RegExp(`^\\d+: ${network.vethPrefix}\\d+[@:]`).test(l));
    assert.deepEqual(veths, [], "no veth of the node left");
  });
});
