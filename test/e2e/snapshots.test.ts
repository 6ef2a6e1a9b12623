/**
 * Suspend / restore / fork end to end: the real stack (`space up`, runc + CRIU + btrfs,
 * blob store under its data dir), driven by the unmodified e2b SDK. ECW `pause` is a
 * suspend (memory checkpoint + disk snapshot, node freed) and `connect` restores it:
 * files, environment and a running process's memory survive; a second pause works;
 * pausing a paused sandbox is E2B's 409 (the SDK answers false); a fork is an independent
 * copy with the same past; a named snapshot lists, starts new sandboxes and deletes.
 * Needs root.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { Sandbox, type ConnectionOpts } from "e2b";
import { counterScript } from "../support/counter.ts";
import { startStack, type Stack } from "../support/stack.ts";
import { ALL, NativeClient, nativeSkipReason, tenantWithToken } from "./native-client.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, CRIU, network namespaces, btrfs)" : false;

const COUNTER = counterScript().source;

describe("ECW suspend/restore/fork with the e2b SDK", { skip, timeout: 10 * 60_000 }, () => {
  let stack: Stack;
  let opts: ConnectionOpts & { sandboxUrl: string };
  const created: string[] = [];
  const marker = `marker-${randomBytes(6).toString("hex")}`;

  const counter = async (sb: Sandbox) => Number((await sb.files.read("/home/user/counter")).trim());
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  before(async () => {
    stack = await startStack();
    opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 300_000 };
  });
  after(async () => {
    await Promise.allSettled(created.map((id) => Sandbox.kill(id, opts)));
    await stack?.stop();
  });

  test("pause → listed paused → pause again 409 → connect: files, env and process memory survive; twice; fork is independent", async () => {
    const sb = await Sandbox.create({ ...opts, envs: { SNAP_MARK: marker }, timeoutMs: 600_000 });
    created.push(sb.sandboxId);
    await sb.files.write("/home/user/note.txt", marker);
    await sb.files.write("/home/user/count.py", COUNTER);
    await sb.commands.run("nohup python3 /home/user/count.py >/dev/null 2>&1 &");
    await sleep(800);
    const c1 = await counter(sb);
    assert.ok(c1 > 0, `the counter runs (${c1})`);

    // pause = suspend
    const t0 = Date.now();
    assert.equal(await sb.pause(), true);
    const pauseMs = Date.now() - t0;
    const info = await Sandbox.getInfo(sb.sandboxId, opts);
    assert.equal(info.state, "paused");
    const paused = await Sandbox.list({ ...opts, query: { state: ["paused"] } }).nextItems();
    assert.ok(paused.some((x) => x.sandboxId === sb.sandboxId), "listed as paused");
    assert.equal(await Sandbox.pause(sb.sandboxId, opts), false, "second pause: 409 already paused");

    // connect = restore
    const t1 = Date.now();
    const back = await Sandbox.connect(sb.sandboxId, { ...opts, timeoutMs: 600_000 });
    const restoreMs = Date.now() - t1;
    assert.equal((await Sandbox.getInfo(sb.sandboxId, opts)).state, "running");
    assert.equal(await back.files.read("/home/user/note.txt"), marker);
    assert.equal((await back.commands.run("echo $SNAP_MARK")).stdout, `${marker}\n`);
    const c2 = await counter(back);
    assert.ok(c2 >= c1, `the process kept its memory: ${c2} >= ${c1} (a restart would count from 1)`);
    await sleep(500);
    const c3 = await counter(back);
    assert.ok(c3 > c2, `and keeps counting: ${c3} > ${c2}`);

    // A second cycle.
    assert.equal(await back.pause(), true);
    const again = await Sandbox.connect(sb.sandboxId, { ...opts, timeoutMs: 600_000 });
    const c4 = await counter(again);
    assert.ok(c4 >= c3, `second restore kept memory: ${c4} >= ${c3}`);
    await sleep(300);
    assert.ok((await counter(again)) > c4, "still counting after the second restore");

    // fork: an independent copy with the same past; the source keeps running.
    const forks = await Sandbox.fork(sb.sandboxId, { ...opts, count: 1, timeoutMs: 300_000 });
    assert.equal(forks.length, 1);
    const fork = forks[0]!;
    assert.ok(!(fork instanceof Error), `fork failed: ${String(fork)}`);
    const f = fork as Sandbox;
    created.push(f.sandboxId);
    assert.notEqual(f.sandboxId, sb.sandboxId);
    assert.equal(await f.files.read("/home/user/note.txt"), marker);
    // Its own name, not its source's (the kernel's UTS name came back from the checkpoint).
    assert.equal((await f.commands.run("hostname; cat /etc/hostname")).stdout, `${f.sandboxId}\n${f.sandboxId}\n`);
    const fc = await counter(f);
    assert.ok(fc >= c4, `the fork's process has the source's past: ${fc} >= ${c4}`);
    await sleep(300);
    assert.ok((await counter(f)) > fc, "the fork's process keeps counting");
    await f.files.write("/home/user/only-in-fork.txt", "fork");
    assert.equal(await again.files.exists("/home/user/only-in-fork.txt"), false, "independent disks");
    assert.equal((await Sandbox.getInfo(sb.sandboxId, opts)).state, "running", "the source keeps running");

    // Kill of a paused sandbox.
    assert.equal(await again.pause(), true);
    assert.equal(await Sandbox.kill(sb.sandboxId, opts), true);
    await assert.rejects(Sandbox.connect(sb.sandboxId, opts));
    console.log(`# pause ${pauseMs} ms, restore (connect) ${restoreMs} ms`);
  });

  test("named snapshot: create (source keeps running) → listed by sandboxID and name → new sandbox from it has the file → delete → gone", async () => {
    const sb = await Sandbox.create({ ...opts, timeoutMs: 600_000 });
    created.push(sb.sandboxId);
    await sb.files.write("/home/user/named.txt", marker);
    const name = `snap-${randomBytes(4).toString("hex")}`;
    const snap = await sb.createSnapshot({ ...opts, name });
    assert.match(snap.snapshotId, /^sn_[a-z0-9]{16}$/);
    assert.deepEqual(snap.names, [name]);
    assert.equal((await Sandbox.getInfo(sb.sandboxId, opts)).state, "running", "the source keeps running");
    await sb.files.write("/home/user/named.txt", "after the snapshot");

    const bySandbox = await sb.listSnapshots(opts).nextItems();
    assert.deepEqual(bySandbox.map((x) => x.snapshotId), [snap.snapshotId]);
    const byName = await Sandbox.listSnapshots({ ...opts, name }).nextItems();
    assert.deepEqual(byName, [{ snapshotId: snap.snapshotId, names: [name] }]);

    const restored = await Sandbox.create(snap.snapshotId, { ...opts, timeoutMs: 300_000 });
    created.push(restored.sandboxId);
    assert.notEqual(restored.sandboxId, sb.sandboxId);
    assert.equal(await restored.files.read("/home/user/named.txt"), marker, "the snapshot's disk, not the source's later write");
    assert.equal(await sb.files.read("/home/user/named.txt"), "after the snapshot");

    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId, opts), true);
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId, opts), false, "a second delete: not found");
    assert.deepEqual(await Sandbox.listSnapshots({ ...opts, sandboxId: sb.sandboxId }).nextItems(), []);
    assert.deepEqual(await Sandbox.listSnapshots({ ...opts, name }).nextItems(), []);
    assert.equal(await restored.files.read("/home/user/named.txt"), marker, "a sandbox made from it outlives the snapshot");
  });

  test("Native: suspend → restore keeps files; fork gives a copy", async (t) => {
    const why = await nativeSkipReason(stack.apiUrl);
    if (why) return t.skip(why);
    const { token } = await tenantWithToken(stack.apiUrl, stack.adminToken, "snap-native", ALL);
    const n = new NativeClient(stack.apiUrl, token);
    const sid = await n.create({ metadata: { suite: "snapshots" } });
    created.push(sid);
    const w = await n.run(sid, { cmd: "/bin/sh", args: ["-c", `echo ${marker} > /home/user/n.txt`] });
    assert.equal(w.op.state, "succeeded", JSON.stringify(w.op.failure));
    const op = async (verb: string, body: unknown = {}) => n.wait((await n.req("POST", `/v1/sandboxes/${sid}/${verb}`, { body })).body.id);
    const sus = await op("suspend");
    assert.equal(sus.state, "succeeded", JSON.stringify(sus.failure));
    const twice = await op("suspend");
    assert.equal(twice.state, "failed");
    assert.match(twice.failure.message, /already paused/);
    const res = await op("restore");
    assert.equal(res.state, "succeeded", JSON.stringify(res.failure));
    assert.equal((await n.run(sid, { cmd: "/bin/cat", args: ["/home/user/n.txt"] })).stdout, `${marker}\n`);
    const fk = await op("fork", { metadata: { forked: "yes" } });
    assert.equal(fk.state, "succeeded", JSON.stringify(fk.failure));
    const fid = fk.result.id as string;
    created.push(fid);
    assert.notEqual(fid, sid);
    assert.equal((await n.run(fid, { cmd: "/bin/cat", args: ["/home/user/n.txt"] })).stdout, `${marker}\n`);
  });
});
