/**
 * Restore races and repeated restores on the real stack (`space up`, runc + CRIU + btrfs,
 * encrypted blob store under its data dir), one tenant driven through both public APIs:
 *
 * - concurrent_restore_converges_to_one_execution: a paused (suspended) sandbox is
 *   connected twice at once with the e2b SDK, then connected with the SDK while a Native
 *   restore runs. Every caller gets the same sandbox (or, Native, a clear "not suspended"
 *   conflict), and the node holds one execution of it: one runc container, one network
 *   namespace and slot, one disk subvolume, and exactly one copy of a counting process on
 *   the host, which carries on from where it was.
 * - encrypted_double_restore_retires_prior_executions (Native, SPACE_ENCRYPTION_KEY set):
 *   suspend → restore → suspend → restore. While suspended nothing of the sandbox is left on
 *   the node but its snapshot; after each restore one execution runs, and only the latest
 *   suspend snapshot is kept (its parts encrypted); files and the process's memory survive.
 * Needs root.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { isDeepStrictEqual } from "node:util";
import { Sandbox, type ConnectionOpts } from "e2b";
import { counterScript } from "../support/counter.ts";
import { startStack, waitFor, type Stack } from "../support/stack.ts";
import { ALL, NativeClient, nativeSkipReason, tenantWithToken, type Res } from "./native-client.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, CRIU, network namespaces, btrfs)" : false;
const RUN = randomBytes(4).toString("hex");
const KEY = randomBytes(32).toString("hex");


const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Host processes (any namespace) running `script`: two executions of one sandbox would show two. */
function hostProcesses(script: string): number[] {
  const pids: number[] = [];
  for (const p of readdirSync("/proc")) {
    if (!/^\d+$/.test(p)) continue;
    let argv: string[];
    try {
      argv = readFileSync(`/proc/${p}/cmdline`, "utf8").split("\0");
    } catch {
      continue; // ended meanwhile
    }
    if (argv.includes(script)) pids.push(Number(p));
  }
  return pids;
}

/** What the stack's node holds of sandbox `id` (every host object is named after the sandbox id; its network namespace after the node's bridge and the id). */
function nodeHolds(stack: Stack, id: string) {
  const node = join(stack.dataDir, "node");
  const runc = spawnSync("runc", ["--root", join(stack.dataDir, "runc"), "list", "-f", "json"], { encoding: "utf8" });
  const containers = ((JSON.parse(runc.stdout || "null") ?? []) as { id: string; status: string }[]).filter((c) => c.id === id);
  const netns = spawnSync("ip", ["netns", "list"], { encoding: "utf8" })
    .stdout.split("\n")
    .map((l) => l.split(" ")[0])
    .filter((n) => n?.endsWith(`-${id}`));
  const slots = existsSync(join(node, "slots")) ? readdirSync(join(node, "slots")).filter((f) => f === `${id}.json`) : [];
  const subvolumes = spawnSync("btrfs", ["subvolume", "list", join(node, "cache")], { encoding: "utf8" })
    .stdout.split("\n")
    .map((l) => /path (.+)$/.exec(l)?.[1] ?? "")
    .filter((p) => p.startsWith("sandboxes/") && p.includes(id));
  return { containers, netns, slots, subvolumes };
}

/** The node's local snapshot copies of sandbox `id` (meta.json names the source). */
function localSnapshotsOf(stack: Stack, id: string): string[] {
  const dir = join(stack.dataDir, "node", "snapshots");
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((n) => /^sn_[a-z0-9]{16}$/.test(n))
    .filter((n) => {
      try {
        return (JSON.parse(readFileSync(join(dir, n, "meta.json"), "utf8")) as { sourceSandboxId?: string }).sourceSandboxId === id;
      } catch {
        return false;
      }
    })
    .sort();
}

describe("restore races and repeated encrypted restores", { skip, timeout: 10 * 60_000 }, () => {
  let stack: Stack;
  let opts: ConnectionOpts & { sandboxUrl: string };
  let n: NativeClient;
  let nativeSkip: string | false = false;
  const created: string[] = [];

  /** One execution of `id` on the node, running `script` once; returns nothing, asserts. */
  const assertOneExecution = (id: string, script: string, when: string) => {
    const held = nodeHolds(stack, id);
    assert.deepEqual(
      held.containers.map((c) => c.status),
      ["running"],
      `${when}: one runc container of ${id}, running: ${JSON.stringify(held.containers)}`,
    );
    assert.equal(held.netns.length, 1, `${when}: one network namespace of ${id}`);
    assert.equal(held.slots.length, 1, `${when}: one network slot record of ${id}`);
    assert.deepEqual(held.subvolumes, [`sandboxes/${id}`], `${when}: one disk subvolume of ${id}`);
    const pids = hostProcesses(script);
    assert.equal(pids.length, 1, `${when}: the counting process runs once on the host, not ${pids.length} times (pids ${pids.join(", ")})`);
  };
  /**
   * Nothing of `id` runs on the node (suspended: only its snapshot is kept). The processes
   * are gone when the pause answers; the container, slot and disk are released behind it.
   */
  const assertNothingRuns = async (id: string, script: string, when: string) => {
    assert.deepEqual(hostProcesses(script), [], `${when}: the counting process is not running anywhere`);
    const empty = { containers: [], netns: [], slots: [], subvolumes: [] };
    await waitFor(() => isDeepStrictEqual(nodeHolds(stack, id), empty), `${when}: the node to release what it held of ${id}`).catch(() => undefined);
    assert.deepEqual(nodeHolds(stack, id), empty, `${when}: the node holds nothing of ${id}`);
  };

  before(async () => {
    stack = await startStack({ env: { SPACE_ENCRYPTION_KEY: KEY } });
    nativeSkip = await nativeSkipReason(stack.apiUrl);
    // One tenant for both APIs: a Native token and an E2B API key of the same tenant.
    const { tenantId, token } = await tenantWithToken(stack.apiUrl, stack.adminToken, `races-${RUN}`, ALL);
    n = new NativeClient(stack.apiUrl, token);
    const k = await fetch(`${stack.apiUrl}/admin/api/v1/tenants/${tenantId}/keys`, {
      method: "POST",
      headers: { authorization: `Bearer ${stack.adminToken}`, "content-type": "application/json" },
      body: JSON.stringify({ name: "races" }),
    });
    assert.equal(k.status, 201, await k.clone().text());
    const apiKey = ((await k.json()) as { key: string }).key;
    opts = { apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 300_000 };
  });
  after(async () => {
    await Promise.allSettled(created.map((id) => Sandbox.kill(id, opts)));
    await stack?.stop();
  });

  test("concurrent_restore_converges_to_one_execution: two SDK connects, then an SDK connect and a Native restore, of one paused sandbox", async (t) => {
    const c = counterScript(`race-count-${RUN}`);
    const sb = await Sandbox.create({ ...opts, timeoutMs: 600_000 });
    created.push(sb.sandboxId);
    const id = sb.sandboxId;
    const count = async () => Number((await sb.files.read(c.value)).trim());
    await sb.files.write(c.path, c.source);
    await sb.commands.run(c.start);
    await sleep(800);
    const c0 = await count();
    assert.ok(c0 > 0, `the counter runs (${c0})`);
    assertOneExecution(id, c.path, "before the pause");

    // Round 1: two SDK connects at once.
    assert.equal(await sb.pause(), true);
    await assertNothingRuns(id, c.path, "paused");
    const both = await Promise.allSettled([
      Sandbox.connect(id, { ...opts, timeoutMs: 600_000 }),
      Sandbox.connect(id, { ...opts, timeoutMs: 600_000 }),
    ]);
    for (const r of both) {
      assert.equal(r.status, "fulfilled", `both connects succeed: ${r.status === "rejected" ? String(r.reason) : ""}`);
      assert.equal(r.status === "fulfilled" && r.value.sandboxId, id, "the same sandbox");
    }
    assert.equal((await Sandbox.getInfo(id, opts)).state, "running");
    assertOneExecution(id, c.path, "after two concurrent connects");
    const c1 = await count();
    await sleep(500);
    const c2 = await count();
    assert.ok(c1 >= c0 && c2 > c1, `the one process kept its memory and counts on (${c0} → ${c1} → ${c2}; a restart would count from 1)`);

    if (nativeSkip) return t.skip(nativeSkip);
    // Round 2: an SDK connect and a Native restore at once. The Native operation either
    // joins the restore (succeeded) or finds the sandbox already running: a clear conflict.
    assert.equal(await sb.pause(), true);
    await assertNothingRuns(id, c.path, "paused again");
    const nativeRestore = async () => {
      const r: Res = await n.req("POST", `/v1/sandboxes/${id}/restore`, { body: {} });
      assert.equal(r.status, 202, JSON.stringify(r.body));
      return n.wait(r.body.id as string);
    };
    const [sdk, native] = await Promise.allSettled([Sandbox.connect(id, { ...opts, timeoutMs: 600_000 }), nativeRestore()]);
    assert.equal(sdk.status, "fulfilled", `the SDK connect succeeds: ${sdk.status === "rejected" ? String(sdk.reason) : ""}`);
    assert.equal(sdk.status === "fulfilled" && sdk.value.sandboxId, id);
    assert.equal(native.status, "fulfilled", `the Native restore operation ends: ${native.status === "rejected" ? String(native.reason) : ""}`);
    const op = native.status === "fulfilled" ? native.value : undefined;
    if (op.state === "succeeded") assert.equal(op.result.id, id, "the Native restore answers the same sandbox");
    else {
      assert.equal(op.state, "failed");
      assert.match(String(op.failure?.message), new RegExp(`sandbox ${id} is running; only a suspended sandbox can be restored`), JSON.stringify(op.failure));
    }
    assert.equal((await Sandbox.getInfo(id, opts)).state, "running");
    assertOneExecution(id, c.path, `after an SDK connect and a Native restore (Native ${op.state})`);
    const c3 = await count();
    await sleep(500);
    const c4 = await count();
    assert.ok(c3 >= c2 && c4 > c3, `the one process kept its memory and counts on (${c2} → ${c3} → ${c4})`);
    console.log(`# SDK connect + Native restore: Native ${op.state}`);

    assert.equal(await Sandbox.kill(id, opts), true);
    assert.deepEqual(nodeHolds(stack, id), { containers: [], netns: [], slots: [], subvolumes: [] }, "a kill frees it all");
  });

  test("encrypted_double_restore_retires_prior_executions: suspend → restore → suspend → restore (Native, SPACE_ENCRYPTION_KEY)", async (t) => {
    if (nativeSkip) return t.skip(nativeSkip);
    const c = counterScript(`enc-count-${RUN}`);
    const marker = `enc-double-${randomBytes(6).toString("hex")}`;
    const sid = await n.create({ metadata: { suite: "restore-races" } });
    created.push(sid);
    const sh = async (script: string) => {
      const r = await n.run(sid, { cmd: "/bin/sh", args: ["-c", script] });
      assert.equal(r.op.state, "succeeded", JSON.stringify(r.op.failure));
      return r.stdout;
    };
    const count = async () => Number((await sh(`cat ${c.value}`)).trim());
    const op = async (verb: "suspend" | "restore") => {
      const r = await n.req("POST", `/v1/sandboxes/${sid}/${verb}`, { body: {} });
      assert.equal(r.status, 202, JSON.stringify(r.body));
      const done = await n.wait(r.body.id as string);
      assert.equal(done.state, "succeeded", `${verb}: ${JSON.stringify(done.failure)}`);
    };
    await sh(`echo ${marker} > /home/user/first.txt; cat > ${c.path} <<'EOF'\n${c.source}EOF\n${c.start}`);
    await sleep(800);
    const c0 = await count();
    assert.ok(c0 > 0, `the counter runs (${c0})`);

    // First cycle.
    await op("suspend");
    await assertNothingRuns(sid, c.path, "after the first suspend");
    const first = localSnapshotsOf(stack, sid);
    assert.equal(first.length, 1, `one local snapshot after the first suspend: ${first.join(", ")}`);
    await op("restore");
    assertOneExecution(sid, c.path, "after the first restore");
    const c1 = await count();
    assert.ok(c1 >= c0, `the first restore kept the process's memory (${c0} → ${c1})`);
    await sh(`echo ${marker}-2 > /home/user/second.txt`);

    // Second cycle: the first execution and its snapshot are retired.
    await op("suspend");
    await assertNothingRuns(sid, c.path, "after the second suspend");
    const second = localSnapshotsOf(stack, sid);
    assert.equal(second.length, 1, `only the latest suspend snapshot is kept: ${second.join(", ")}`);
    assert.notDeepEqual(second, first, "the first snapshot was superseded and freed");
    assert.ok(
      !spawnSync("btrfs", ["subvolume", "list", join(stack.dataDir, "node", "cache")], { encoding: "utf8" }).stdout.includes(`snapshots/${first[0]}/`),
      `the first snapshot's disk subvolume ${first[0]} is deleted`,
    );
    const parts = join(stack.dataDir, "blobs", "snapshots", second[0]!);
    // The parts are published after the suspend answers (#25): wait until both are there.
    const storedParts = () => (existsSync(parts) ? readdirSync(parts).sort() : []);
    await waitFor(() => storedParts().length >= 2 || undefined, `the snapshot's parts are published (${parts})`, 60_000);
    assert.deepEqual(storedParts(), ["disk.btrfs.enc", "memory.tar.zst.enc"], `the snapshot's parts are stored encrypted (${parts})`);
    await op("restore");
    assertOneExecution(sid, c.path, "after the second restore");
    assert.equal(localSnapshotsOf(stack, sid).length, 1, "still one local snapshot");

    // State intact across both cycles: both files, and the one process keeps its count.
    assert.equal(await sh("cat /home/user/first.txt /home/user/second.txt"), `${marker}\n${marker}-2\n`);
    const c2 = await count();
    await sleep(500);
    const c3 = await count();
    assert.ok(c2 >= c1 && c3 > c2, `the process kept its memory through both restores and counts on (${c0} → ${c1} → ${c2} → ${c3})`);
  });
});
