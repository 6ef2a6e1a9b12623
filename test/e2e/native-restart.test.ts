/**
 * Native recovery end to end: kill -9 `space up` with queued work, restart it on the same
 * data directory, and the work completes (queued_create_survives_api_restart); a command
 * running across the restart is reattached (command_survives_data_plane_restart: in
 * `space up` the data plane restarts with everything else); a suspend whose publication
 * behind the answer died with the process is published by the controller after the
 * restart (its snapshot goes `local` → `durable`, #25), and the sandbox resumes.
 */
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { removeNodeNetwork } from "../support/node-network-cleanup.ts";
import { runSpace, type SpaceProcess } from "../support/space-process.ts";
import { freePort, hostScopeFor, nodeNetworkOf, removeDataDir } from "../support/stack.ts";
import { ALL, NativeClient, nativeSkipReason, tenantWithToken } from "./native-client.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : false;

interface Up {
  proc: SpaceProcess;
  apiUrl: string;
  adminToken: string;
}

async function up(env: Record<string, string>): Promise<Up> {
  const proc = runSpace(["up"], { SPACE_LOG_LEVEL: process.env.SPACE_LOG_LEVEL ?? "warn", ...env });
  try {
    // The admin token is the last line `space up` prints once it is up.
    const adminToken = /^export SPACE_ADMIN_TOKEN=(\S+)$/m.exec(await proc.waitFor(/^export SPACE_ADMIN_TOKEN=\S+\n/m, 10 * 60_000))![1]!;
    const apiUrl = /^export E2B_API_URL=(\S+)$/m.exec(proc.out())?.[1];
    if (!apiUrl) throw new Error(`space up printed no E2B_API_URL:\n${proc.out().slice(-3000)}`);
    return { proc, apiUrl, adminToken };
  } catch (e) {
    await proc.stop();
    throw e;
  }
}

describe("Native recovery end to end", { skip, timeout: 20 * 60_000 }, () => {
  const dataDir = mkdtempSync(join(tmpdir(), "space-native-restart-"));
  // Its own bridge, nft table, slot range and runtime state (not `space up`'s defaults), removed after.
  const scope = { SPACE_DATA_DIR: dataDir, ...hostScopeFor(dataDir) };
  let current: Up | undefined;
  after(async () => {
    await current?.proc.stop();
    removeNodeNetwork(nodeNetworkOf(scope));
    // The node leaves its cache mounts behind after a kill -9 (and today after SIGTERM too).
    removeDataDir(dataDir);
  });

  test("queued_create_survives_api_restart and command_survives_data_plane_restart", async (t) => {
    const ports = { SPACE_API_PORT: String(await freePort()), SPACE_GATEWAY_PORT: String(await freePort()), SPACE_NODE_PORT: String(await freePort()) };
    // Stale claims of the killed process are re-claimed after 2 s instead of 60 s.
    const env = { ...scope, SPACE_CONTROLLER_CLAIM_STALE_MS: "2000", ...ports };
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
    await current.proc.stop("SIGKILL"); // no graceful hand-back: claimed work must be re-claimed after staleness

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

  test("a suspend's publication lost with the process (kill -9) is published after the restart, and the sandbox resumes", async (t) => {
    await current?.proc.stop();
    const ports = { SPACE_API_PORT: String(await freePort()), SPACE_GATEWAY_PORT: String(await freePort()), SPACE_NODE_PORT: String(await freePort()) };
    const env = { ...scope, SPACE_SNAPSHOT_PUBLISH_RETRY_S: "1", ...ports };
    current = await up(env);
    const why = await nativeSkipReason(current.apiUrl);
    if (why) return t.skip(why);
    const { token } = await tenantWithToken(current.apiUrl, current.adminToken, "republish", ALL);
    let c = new NativeClient(current.apiUrl, token);
    const sid = await c.create();
    // 200 MiB of random memory: its upload takes seconds, so the kill lands before it ends.
    const hold = await c.req("POST", `/v1/sandboxes/${sid}/commands`, {
      body: { cmd: "/bin/sh", args: ["-c", `nohup python3 -c "import os,time; b=os.urandom(200*1024*1024); open('/tmp/held','w').write('1'); time.sleep(3600)" >/dev/null 2>&1 & while [ ! -f /tmp/held ]; do sleep 0.1; done`] },
    });
    assert.equal((await c.wait(hold.body.id)).state, "succeeded");
    const sus = await c.wait((await c.req("POST", `/v1/sandboxes/${sid}/suspend`, { body: {} })).body.id);
    assert.equal(sus.state, "succeeded", JSON.stringify(sus.failure));
    const paused = (await c.req("GET", `/v1/sandboxes/${sid}`)).body;
    assert.equal(paused.snapshot?.durability, "local", `answered before its upload: ${JSON.stringify(paused.snapshot)}`);
    await current.proc.stop("SIGKILL");

    current = await up(env);
    c = new NativeClient(current.apiUrl, token);
    const deadline = Date.now() + 120_000;
    let seen = "";
    while (Date.now() < deadline) {
      const got = (await c.req("GET", `/v1/sandboxes/${sid}`)).body;
      seen = JSON.stringify(got.snapshot);
      if (got.snapshot?.durability === "durable") break;
      await new Promise((r) => setTimeout(r, 500));
    }
    assert.match(seen, /"durable"/, "the controller published the snapshot the killed process left local");
    const res = await c.wait((await c.req("POST", `/v1/sandboxes/${sid}/restore`, { body: {} })).body.id);
    assert.equal(res.state, "succeeded", JSON.stringify(res.failure));
    const check = await c.req("POST", `/v1/sandboxes/${sid}/commands`, { body: { cmd: "/bin/sh", args: ["-c", "pgrep -f os.urandom >/dev/null && echo alive"] } });
    assert.equal((await c.wait(check.body.id)).state, "succeeded");
    assert.match((await c.output(sid, check.body.target.split("/")[3])).stdout, /alive/, "the process holding the memory came back");
  });
});
