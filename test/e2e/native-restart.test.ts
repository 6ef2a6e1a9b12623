/**
 * Native recovery end to end: kill -9 `space up` with queued work, restart it on the same
 * data directory, and the work completes (queued_create_survives_api_restart); a command
 * running across the restart is reattached (command_survives_data_plane_restart: in
 * `space up` the data plane restarts with everything else).
 */
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { freePort } from "../support/stack.ts";
import { ALL, NativeClient, nativeSkipReason, tenantWithToken } from "./native-client.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : false;

interface Up {
  child: ChildProcess;
  apiUrl: string;
  adminToken: string;
  output: () => string;
}

async function up(env: Record<string, string>): Promise<Up> {
  const full: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith("SPACE_") && !k.startsWith("E2B_")) full[k] = v;
  Object.assign(full, { SPACE_LOG_LEVEL: process.env.SPACE_LOG_LEVEL ?? "warn" }, env);
  const child = spawn(process.execPath, [resolve("bin/space.mjs"), "up"], { env: full, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout!.on("data", (b: Buffer) => (out += b.toString()));
  child.stderr!.on("data", (b: Buffer) => (out += b.toString()));
  const deadline = Date.now() + 10 * 60_000;
  for (;;) {
    const api = /^export E2B_API_URL=(.*)$/m.exec(out)?.[1];
    const admin = /^export SPACE_ADMIN_TOKEN=(.*)$/m.exec(out)?.[1];
    if (out.includes("SPACE is up") && api && admin) return { child, apiUrl: api.trim(), adminToken: admin.trim(), output: () => out };
    if (child.exitCode !== null) throw new Error(`space up exited ${child.exitCode}:\n${out.slice(-3000)}`);
    if (Date.now() > deadline) throw new Error(`space up not up:\n${out.slice(-3000)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function kill9(u: Up): Promise<void> {
  const exited = new Promise((r) => u.child.once("exit", r));
  u.child.kill("SIGKILL");
  await exited;
}

describe("Native recovery end to end", { skip, timeout: 20 * 60_000 }, () => {
  const dataDir = mkdtempSync(join(tmpdir(), "space-native-restart-"));
  let current: Up | undefined;
  after(async () => {
    if (current && current.child.exitCode === null) {
      const exited = new Promise((r) => current!.child.once("exit", r));
      current.child.kill("SIGTERM");
      await exited;
    }
    // The node leaves its cache mounts behind after a kill -9 (and today after SIGTERM too).
    for (const m of ["roots", "cache"]) spawnSync("umount", [join(dataDir, "node", m)], { stdio: "ignore", timeout: 30_000 });
    try {
      rmSync(dataDir, { recursive: true, force: true, maxRetries: 3 });
    } catch {
      /* the node cache mount of the killed process may linger; the OS temp cleaner gets it */
    }
  });

  test("queued_create_survives_api_restart and command_survives_data_plane_restart", async (t) => {
    const ports = { SPACE_API_PORT: String(await freePort()), SPACE_GATEWAY_PORT: String(await freePort()), SPACE_NODE_PORT: String(await freePort()) };
    // Stale claims of the killed process are re-claimed after 2 s instead of 60 s.
    const env = { SPACE_DATA_DIR: dataDir, SPACE_CONTROLLER_CLAIM_STALE_MS: "2000", ...ports };
    current = await up(env);
    const why = await nativeSkipReason(current.apiUrl);
    if (why) return t.skip(why);
    const { token } = await tenantWithToken(current.apiUrl, current.adminToken, "restart", ALL);
    let c = new NativeClient(current.apiUrl, token);

    const sid = await c.create();
    const long = await c.req("POST", `/v1/sandboxes/${sid}/commands`, { body: { cmd: "/bin/sh", args: ["-c", "sleep 4; echo survived"] } });
    assert.equal(long.status, 202);
    const queued: string[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await c.req("POST", "/v1/sandboxes", { body: { template: "base", metadata: { restart: String(i) } } });
      assert.equal(r.status, 202);
      queued.push(r.body.id);
    }
    await kill9(current); // no graceful hand-back: claimed work must be re-claimed after staleness

    current = await up(env);
    c = new NativeClient(current.apiUrl, token);
    for (const id of queued) {
      const op = await c.wait(id);
      assert.equal(op.state, "succeeded", `queued create ${id}: ${JSON.stringify(op.failure)}`);
      assert.equal((await c.req("GET", `/v1/sandboxes/${op.result.id}`)).body.state, "running");
    }
    const lop = await c.wait(long.body.id);
    assert.equal(lop.state, "succeeded", `command across the restart: ${JSON.stringify(lop.failure)}`);
    const out = await c.output(sid, long.body.target.split("/")[3]);
    assert.match(out.stdout, /survived/);
  });
});
