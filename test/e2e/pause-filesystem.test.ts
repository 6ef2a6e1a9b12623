/**
 * Filesystem-only pause and the list's `startedAfter`, end to end: the real stack
 * (`space up`, runc + CRIU + btrfs, blob store under its data dir), driven by the
 * unmodified e2b SDK. `pause({ keepMemory: false })` (wire `{"memory": false}`) and
 * `lifecycle.onTimeout: { action: "pause", keepMemory: false }` (wire
 * `autoPauseMemory: false`) keep only the disk: connect boots the sandbox fresh from it
 * (files kept, processes gone, envd fresh), also after the stack restarted; so does a
 * connect with `onResume: "reboot"` (wire `memory: false`) after a full pause. Native
 * `suspend` takes the same `memory: false`. `startedAfter` is at or after (>=).
 * Needs root.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox, type ConnectionOpts } from "e2b";
import { counterScript } from "../support/counter.ts";
import { removeDataDir, startStack, waitFor, type Stack } from "../support/stack.ts";
import { ALL, NativeClient, nativeSkipReason, tenantWithToken } from "./native-client.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, CRIU, network namespaces, btrfs)" : false;

const COUNTER = counterScript("fscounter");
/** Processes whose command line names the counter script (the bracket keeps the grep itself out). */
const COUNT_COUNTERS = "grep -l 'fscount[e]r.py' /proc/[0-9]*/cmdline 2>/dev/null | wc -l";

describe("filesystem-only pause and startedAfter with the e2b SDK", { skip, timeout: 20 * 60_000 }, () => {
  // Its own data dir, kept across the restart in the pause test.
  const dataDir = mkdtempSync(join(tmpdir(), "space-e2e-fspause-"));
  let stack: Stack;
  let opts: ConnectionOpts & { sandboxUrl: string };
  const created: string[] = [];
  const marker = `marker-${randomBytes(6).toString("hex")}`;

  const up = async () => {
    stack = await startStack({ dataDir });
    opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 300_000 };
  };
  /** Writes the marker file and starts the counter in the background (envd tracks it). */
  const prepare = async (sb: Sandbox) => {
    await sb.files.write("/home/user/note.txt", marker);
    await sb.files.write(COUNTER.path, COUNTER.source);
    await sb.commands.run(`python3 ${COUNTER.path}`, { background: true });
    await waitFor(async () => (await sb.files.exists(COUNTER.value)) || undefined, "the counter writes its file", 30_000);
    assert.equal((await sb.commands.run(COUNT_COUNTERS)).stdout.trim(), "1", "the counter runs");
  };
  /** A sandbox booted fresh from its disk: the file is there, the counter and envd's record of it are not, commands work. */
  const assertFreshFromDisk = async (sb: Sandbox) => {
    // Reachable first: right after a connect the gateway may still answer 502 (issue 20 item 1, its own test).
    await waitFor(() => sb.files.exists("/home/user/note.txt"), "the sandbox is reachable after connect", 30_000);
    assert.equal(await sb.files.read("/home/user/note.txt"), marker, "the disk is kept");
    assert.ok(await sb.files.exists(COUNTER.value), "what the counter wrote is kept");
    assert.equal((await sb.commands.run(COUNT_COUNTERS)).stdout.trim(), "0", "no process survived: the sandbox booted fresh");
    const listed = await sb.commands.list();
    assert.ok(!listed.some((p) => p.cmd.includes("fscounter") || p.args.some((a) => a.includes("fscounter"))), `envd is fresh: ${JSON.stringify(listed)}`);
    const r = await sb.commands.run("echo $E2B_SANDBOX_ID; whoami");
    assert.equal(r.stdout, `${sb.sandboxId}\nuser\n`);
  };

  before(up);
  after(async () => {
    await Promise.allSettled(created.map((id) => Sandbox.kill(id, opts)));
    await stack?.stop();
    removeDataDir(dataDir);
  });

  test("Sandbox.list: startedAfter equal to a sandbox's startedAt lists it (at or after)", async () => {
    const tag = randomBytes(6).toString("hex");
    const sb = await Sandbox.create({ ...opts, metadata: { tag } });
    created.push(sb.sandboxId);
    const { startedAt } = await sb.getInfo();
    const at = await Sandbox.list({ ...opts, query: { metadata: { tag }, startedAfter: startedAt } }).nextItems();
    assert.deepEqual(at.map((x) => x.sandboxId), [sb.sandboxId], "startedAfter = startedAt lists it");
    const later = await Sandbox.list({ ...opts, query: { metadata: { tag }, startedAfter: new Date(startedAt.getTime() + 1) } }).nextItems();
    assert.deepEqual(later, [], "a millisecond later does not");
    await sb.kill();
  });

  test("pause({ keepMemory: false }) → connect boots fresh from the disk: files kept, processes gone, envd fresh; again after a restart; a full pause after it keeps memory", async () => {
    const sb = await Sandbox.create({ ...opts, timeoutMs: 600_000 });
    created.push(sb.sandboxId);
    await prepare(sb);

    assert.equal(await sb.pause({ keepMemory: false }), true);
    assert.equal((await Sandbox.getInfo(sb.sandboxId, opts)).state, "paused");
    assert.equal(await Sandbox.pause(sb.sandboxId, { ...opts, keepMemory: false }), false, "already paused: 409");
    const back = await Sandbox.connect(sb.sandboxId, { ...opts, timeoutMs: 600_000 });
    await assertFreshFromDisk(back);

    // A second filesystem-only pause, then the stack restarts before the connect.
    await back.commands.run(`python3 ${COUNTER.path}`, { background: true });
    assert.equal(await back.pause({ keepMemory: false }), true);
    await stack.stop();
    await up();
    const afterRestart = await Sandbox.connect(sb.sandboxId, { ...opts, timeoutMs: 600_000 });
    await assertFreshFromDisk(afterRestart);

    // The default pause still keeps the memory.
    await afterRestart.commands.run(`python3 ${COUNTER.path}`, { background: true });
    await waitFor(async () => (await afterRestart.commands.run(COUNT_COUNTERS)).stdout.trim() === "1" || undefined, "the counter runs", 30_000);
    assert.equal(await afterRestart.pause(), true);
    const full = await Sandbox.connect(sb.sandboxId, { ...opts, timeoutMs: 600_000 });
    await waitFor(() => full.files.exists("/home/user/note.txt"), "the sandbox is reachable after connect", 30_000);
    assert.equal((await full.commands.run(COUNT_COUNTERS)).stdout.trim(), "1", "a full pause keeps the process");
    await full.kill();
  });

  test("lifecycle.onTimeout { action: 'pause', keepMemory: false }: the timeout pauses filesystem-only; connect boots fresh", async () => {
    const sb = await Sandbox.create({ ...opts, timeoutMs: 20_000, lifecycle: { onTimeout: { action: "pause", keepMemory: false } } });
    created.push(sb.sandboxId);
    await prepare(sb);
    await waitFor(async () => (await Sandbox.getInfo(sb.sandboxId, opts)).state === "paused" || undefined, "the timeout pauses it", 120_000);
    const back = await Sandbox.connect(sb.sandboxId, { ...opts, timeoutMs: 600_000 });
    await assertFreshFromDisk(back);
    await back.kill();
  });

  test("connect({ onResume: 'reboot' }) (wire `memory: false`) after a full pause boots fresh from the disk", async () => {
    const sb = await Sandbox.create({ ...opts, timeoutMs: 600_000 });
    created.push(sb.sandboxId);
    await prepare(sb);
    assert.equal(await sb.pause(), true);
    const back = await Sandbox.connect(sb.sandboxId, { ...opts, timeoutMs: 600_000, onResume: "reboot" });
    await assertFreshFromDisk(back);
    await back.kill();
  });

  test("autoPauseMemory: false with autoResume is a 400 naming the field", async () => {
    const res = await fetch(`${stack.apiUrl}/v2/sandboxes`, {
      method: "POST",
      headers: { "x-api-key": stack.apiKey, "content-type": "application/json" },
      body: JSON.stringify({ templateID: "base", autoPause: true, autoPauseMemory: false, autoResume: { enabled: true } }),
    });
    assert.equal(res.status, 400);
    assert.match(((await res.json()) as { message: string }).message, /autoPauseMemory/);
  });

  test("Native: suspend { memory: false } → restore boots fresh from the disk", async (t) => {
    const why = await nativeSkipReason(stack.apiUrl);
    if (why) return t.skip(why);
    const { token } = await tenantWithToken(stack.apiUrl, stack.adminToken, "fspause-native", ALL);
    const n = new NativeClient(stack.apiUrl, token);
    const sid = await n.create({ metadata: { suite: "pause-filesystem" } });
    created.push(sid);
    const sh = (script: string) => n.run(sid, { cmd: "/bin/sh", args: ["-c", script] });
    // A process outliving its command (its own session); counted by its argument (cmdline is NUL-separated).
    const sleepers = "grep -l '10001[7]' /proc/[0-9]*/cmdline 2>/dev/null | wc -l";
    assert.equal((await sh(`echo ${marker} > /home/user/n.txt; setsid nohup sleep 100017 >/dev/null 2>&1 &`)).op.state, "succeeded");
    assert.equal((await sh(sleepers)).stdout.trim(), "1");
    const op = async (verb: string, body: unknown = {}) => n.wait((await n.req("POST", `/v1/sandboxes/${sid}/${verb}`, { body })).body.id);
    const bad = await n.req("POST", `/v1/sandboxes/${sid}/suspend`, { body: { memory: "no" } });
    assert.equal(bad.status, 400);
    assert.match(bad.body.message, /memory/);
    const sus = await op("suspend", { memory: false });
    assert.equal(sus.state, "succeeded", JSON.stringify(sus.failure));
    const res = await op("restore");
    assert.equal(res.state, "succeeded", JSON.stringify(res.failure));
    assert.equal((await sh("cat /home/user/n.txt")).stdout, `${marker}\n`);
    assert.equal((await sh(sleepers)).stdout.trim(), "0", "the process is gone");
  });
});
