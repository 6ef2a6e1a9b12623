// node-api end to end: lifecycle (pause/resume, stop/start with the same disk, kill),
// metrics, egress hook, auth, and the raw streaming proxy (stub envd with echo/stream routes).
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import { exec } from "../../src/core/exec.ts";
import { inCidr } from "../../src/core/cidr.ts";
import { httpStatusOf } from "../../src/node/sandboxes/envd-http-client.ts";
import { qgroupUsage } from "../../src/node/disk/btrfs.ts";
import { isRoot, sh, spec, startTestNode, waitFor, type TestNode } from "./helpers.ts";

const skip = isRoot ? false : "needs root (runc, btrfs, netns)";

/** Whether `pid` is a live process (a zombie waiting for its reaper is not). */
function alive(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z /.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
}
const auth = { authorization: "Bearer test-token" };

describe("node-api lifecycle and proxy", { skip, timeout: 300_000 }, () => {
  let node: TestNode;
  let base = "";
  const s = spec();

  before(async () => {
    node = await startTestNode();
    await node.agent.app.listen({ host: "127.0.0.1", port: 0 });
    const a = node.agent.app.server.address();
    base = `http://127.0.0.1:${typeof a === "object" && a ? a.port : 0}`;
  });
  after(async () => node?.close());

  const call = (method: string, url: string, payload?: unknown, headers: Record<string, string> = auth) =>
    node.agent.app.inject({ method: method as "GET", url, headers, ...(payload === undefined ? {} : { payload: payload as object }) });

  it("refuses calls without the internal token; health is open", async () => {
    assert.equal((await call("GET", "/v1/sandboxes", undefined, {})).statusCode, 401);
    assert.equal((await call("GET", "/v1/sandboxes", undefined, { authorization: "Bearer nope" })).json().code, "unauthenticated");
    const h = await call("GET", "/health", undefined, {});
    assert.equal(h.statusCode, 200);
    assert.equal(h.json().status, "ok");
  });

  it("validates bodies with the contract schemas, naming the field", async () => {
    const r = await call("POST", "/v1/sandboxes", { ...s, vcpu: 0 });
    assert.equal(r.statusCode, 400);
    assert.match(r.json().message, /vcpu/);
  });

  it("creates a sandbox and reports it after envd is healthy, with timings", async () => {
    const r = await call("POST", "/v1/sandboxes", s);
    assert.equal(r.statusCode, 201, r.body);
    const st = r.json();
    assert.equal(st.state, "running");
    // A slot address of this node's range (the harness picks a range no host route overlaps).
    assert.ok(inCidr(st.address, node.agent.slots!.range.cidr) && st.address !== node.agent.slots!.range.gateway, st.address);
    for (const k of ["diskMs", "slotMs", "bootWaitMs", "runtimeMs", "envdMs", "totalMs"]) assert.equal(typeof st.timings[k], "number", k);
    // Readiness came by envd's word on the readiness FIFO, not by polling /health.
    assert.equal(typeof st.timings.envdEventMs, "number", JSON.stringify(st.timings));
    assert.equal(st.timings.envdPollMs, undefined, JSON.stringify(st.timings));
    // idempotent on the same execution
    assert.equal((await call("POST", "/v1/sandboxes", s)).statusCode, 201);
    const list = (await call("GET", "/v1/sandboxes")).json();
    assert.deepEqual(list.sandboxes.map((x: { sandboxId: string }) => x.sandboxId), [s.sandboxId]);
  });

  it("checks readiness over HTTP when the init closes the readiness fd without a word", async () => {
    const silent = spec({ envVars: { STUB_ENVD_SILENT: "1" } });
    const r = await call("POST", "/v1/sandboxes", silent);
    assert.equal(r.statusCode, 201, r.body);
    const st = r.json();
    assert.equal(st.state, "running");
    assert.equal(typeof st.timings.envdPollMs, "number", JSON.stringify(st.timings));
    assert.equal(st.timings.envdEventMs, undefined, JSON.stringify(st.timings));
    assert.equal(await httpStatusOf(st.address, 49983, "/health", { timeoutMs: 2000 }), 204);
    assert.equal((await call("DELETE", `/v1/sandboxes/${silent.sandboxId}`)).statusCode, 204);
  });

  it("publishes an inventory per contract", async () => {
    const inv = (await call("GET", "/v1/inventory")).json();
    assert.equal(inv.capacity.networkSlots, 200); // SPACE_NODE_MAX_SLOTS of test nodes
    assert.equal(inv.used.sandboxes, 1);
    assert.match(inv.usableEnvironments[0], /^sha256:[0-9a-f]{64}$/);
    assert.equal(inv.templates[0].templateId, "base");
    assert.ok(inv.templates[0].rootfsSizeMib > 100);
  });

  it("counts a sandbox as settled for the memory measurement once it is done creating", async () => {
    const settled = async () => (await call("GET", "/v1/inventory")).json().used.settled as number;
    const m = node.agent.manager!;
    const before = await settled();
    const count = m.count();
    const slow = spec({ envVars: { STUB_ENVD_LISTEN_DELAY_MS: "1500" } });
    const created = call("POST", "/v1/sandboxes", slow);
    await waitFor(async () => m.count() > count, 10_000, "the create registered");
    // Creating: resident already, but still growing: the capacity model counts it at its request.
    assert.equal(await settled(), before, "a sandbox still creating is not settled");
    assert.equal((await created).statusCode, 201);
    assert.equal(await settled(), before + 1);
    assert.equal((await call("DELETE", `/v1/sandboxes/${slow.sandboxId}`)).statusCode, 204);
    assert.equal(await settled(), before);
  });

  it("streams through the proxy without buffering (large upload, server streaming)", async () => {
    const size = 32 * 1024 * 1024;
    const got = await new Promise<number>((resolve, reject) => {
      const req = request(`${base}/v1/sandboxes/${s.sandboxId}/proxy/49983/echo`, { method: "POST", headers: { ...auth, "content-type": "application/octet-stream" } }, (res) => {
        let n = 0;
        res.on("data", (c: Buffer) => (n += c.length));
        res.on("end", () => resolve(n));
        res.on("error", reject);
      });
      req.on("error", reject);
      const chunk = Buffer.alloc(1024 * 1024, 7);
      for (let i = 0; i < size / chunk.length; i++) req.write(chunk);
      req.end();
    });
    assert.equal(got, size);

    const ticks = await new Promise<string>((resolve, reject) => {
      request(`${base}/v1/sandboxes/${s.sandboxId}/proxy/49983/stream`, { headers: auth }, (res) => {
        let text = "";
        res.on("data", (c: Buffer) => {
          text += c.toString();
          if (text.includes("tick 2")) {
            res.destroy();
            resolve(text);
          }
        });
        res.on("error", reject);
      }).end();
    });
    assert.match(ticks, /tick 0\ntick 1\n/);
  });

  it("pauses (frozen) and resumes", async () => {
    const p = await call("POST", `/v1/sandboxes/${s.sandboxId}/pause`);
    assert.equal(p.json().state, "paused");
    const freezer = node.agent.runtime!.cgroupDirs(s.sandboxId).freezer!;
    assert.equal((await exec("cat", [`${freezer}/freezer.state`])).stdout.trim(), "FROZEN");
    // The node writes the freezer itself: runc must read the same state back.
    assert.equal((await node.agent.runtime!.state(s.sandboxId, AbortSignal.timeout(10_000)))?.status, "paused");
    const proxied = await call("GET", `/v1/sandboxes/${s.sandboxId}/proxy/49983/health`);
    assert.equal(proxied.statusCode, 409); // not running → refused before proxying
    const r = await call("POST", `/v1/sandboxes/${s.sandboxId}/resume`);
    assert.equal(r.json().state, "running");
    assert.equal((await exec("cat", [`${freezer}/freezer.state`])).stdout.trim(), "THAWED");
    assert.equal((await node.agent.runtime!.state(s.sandboxId, AbortSignal.timeout(10_000)))?.status, "running");
    assert.equal((await call("GET", `/v1/sandboxes/${s.sandboxId}/proxy/49983/health`)).statusCode, 204);
  });

  it("reports metrics from cgroups and the qgroup", async () => {
    const m = (await call("GET", `/v1/sandboxes/${s.sandboxId}/metrics`)).json();
    assert.equal(m.cpuCount, 1);
    assert.ok(m.memUsed > 1024 * 1024, `memUsed ${m.memUsed}`);
    assert.equal(m.memTotal, 256 * 1024 * 1024);
    assert.ok(m.diskUsed > 100 * 1024 * 1024);
    assert.equal(m.diskTotal, 1024 * 1024 * 1024);
    // Read from the qgroup's sysfs files: the same bytes `btrfs qgroup show` reports.
    const disks = node.agent.disks!;
    await writeFile(join(disks.sandboxPath(s.sandboxId), "tmp", "usage-probe"), Buffer.alloc(8 * 1048576, 7));
    await exec("btrfs", ["filesystem", "sync", disks.sandboxPath(s.sandboxId)]);
    const shown = (await qgroupUsage(disks.sandboxPath(s.sandboxId)))!.referencedBytes + (await disks.baseMib(s.sandboxId)) * 1048576;
    const read = (await disks.usage(s.sandboxId, AbortSignal.timeout(30_000)))!.referencedBytes;
    assert.equal(read, shown);
    assert.ok(read >= m.diskUsed + 8 * 1048576, `the 8 MiB written are counted (${m.diskUsed} → ${read})`);
  });

  it("applies the egress hook per slot", async () => {
    const r = await call("POST", `/v1/sandboxes/${s.sandboxId}/egress`, { allowInternetAccess: false });
    assert.equal(r.statusCode, 200, r.body);
    const chain = await exec("nft", ["list", "chain", "inet", node.agent.slots!.table, `sb_${s.sandboxId}`]);
    assert.match(chain.stdout, /\b(drop|reject)\b/);
    await call("POST", `/v1/sandboxes/${s.sandboxId}/egress`, { allowInternetAccess: true });
    assert.doesNotMatch((await exec("nft", ["list", "chain", "inet", node.agent.slots!.table, `sb_${s.sandboxId}`])).stdout, /\b(drop|reject)\b/);
  });

  it("stops (processes end, disk kept, slot released) and starts again with the same disk", async () => {
    assert.equal((await sh(node, s.sandboxId, "echo kept > /home/user/kept.txt")).exitCode, 0);
    // a stream open across the stop is cut
    const cut = new Promise<string>((resolve) => {
      request(`${base}/v1/sandboxes/${s.sandboxId}/proxy/49983/stream`, { headers: auth }, (res) => {
        res.on("data", () => undefined);
        res.on("close", () => resolve("closed"));
        res.on("error", () => resolve("closed"));
      }).end();
    });
    await new Promise((r) => setTimeout(r, 200));
    const st = await call("POST", `/v1/sandboxes/${s.sandboxId}/stop`);
    assert.equal(st.json().state, "stopped");
    assert.equal(await cut, "closed");
    assert.equal(node.agent.slots!.get(s.sandboxId), undefined);
    assert.equal(await node.agent.runtime!.state(s.sandboxId, AbortSignal.timeout(5000)), null);
    const again = await call("POST", `/v1/sandboxes/${s.sandboxId}/start`);
    assert.equal(again.statusCode, 200, again.body);
    assert.equal(again.json().state, "running");
    assert.equal((await sh(node, s.sandboxId, "cat /home/user/kept.txt")).stdout.trim(), "kept");
  });

  it("replaces the sandbox's /etc/hosts on start, never writing through a symlink to the host", async () => {
    const hostFile = join(await mkdtemp(join(tmpdir(), "space-etc-")), "victim");
    await writeFile(hostFile, "host content\n");
    assert.equal((await call("POST", `/v1/sandboxes/${s.sandboxId}/stop`)).json().state, "stopped");
    const etc = join(node.agent.disks!.sandboxRoot(s.sandboxId), "etc");
    await rm(join(etc, "hosts"), { force: true });
    await symlink(hostFile, join(etc, "hosts"));
    await rm(join(etc, "hostname"), { force: true });
    await symlink(hostFile, join(etc, "hostname"));
    const again = await call("POST", `/v1/sandboxes/${s.sandboxId}/start`);
    assert.equal(again.statusCode, 200, again.body);
    assert.equal(await readFile(hostFile, "utf8"), "host content\n", "the host file is untouched");
    assert.match((await sh(node, s.sandboxId, "cat /etc/hosts")).stdout, new RegExp(`\\t${s.sandboxId}\n`));
    assert.equal((await sh(node, s.sandboxId, "cat /etc/hostname")).stdout.trim(), s.sandboxId);
    await rm(dirname(hostFile), { recursive: true, force: true });
  });

  it("kills a paused sandbox: every task ends (thawed to take the signal) and its cgroups go", async () => {
    const p = spec();
    assert.equal((await call("POST", "/v1/sandboxes", p)).statusCode, 201);
    const rt = node.agent.runtime!;
    const pid = (await rt.state(p.sandboxId, AbortSignal.timeout(10_000)))!.pid;
    assert.equal((await call("POST", `/v1/sandboxes/${p.sandboxId}/pause`)).json().state, "paused");
    const dirs = Object.values(rt.cgroupDirs(p.sandboxId)).filter((d) => existsSync(d));
    assert.ok(dirs.length > 0);
    assert.equal((await call("DELETE", `/v1/sandboxes/${p.sandboxId}`)).statusCode, 204);
    assert.equal(alive(pid), false, `the init ${pid} still runs`);
    assert.deepEqual(dirs.filter((d) => existsSync(d)), []);
    assert.equal(await rt.state(p.sandboxId, AbortSignal.timeout(10_000)), null);
  });

  it("kills idempotently and releases everything", async () => {
    const pid = (await node.agent.runtime!.state(s.sandboxId, AbortSignal.timeout(10_000)))!.pid;
    assert.equal((await call("DELETE", `/v1/sandboxes/${s.sandboxId}`)).statusCode, 204);
    assert.equal(alive(pid), false, `the init ${pid} still runs`);
    assert.equal((await call("DELETE", `/v1/sandboxes/${s.sandboxId}`)).statusCode, 204);
    assert.equal((await call("GET", `/v1/sandboxes/${s.sandboxId}`)).statusCode, 404);
    assert.equal((await call("POST", `/v1/sandboxes/${s.sandboxId}/pause`)).json().code, "not_found");
  });
});
