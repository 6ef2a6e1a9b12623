/**
 * A filesystem-only pause across nodes, through the control plane: `space up` (node A,
 * in-process) plus a standalone `space node` (node B) on this machine, sharing only the
 * blob store and the cluster key (the harness of snapshots-cross-node.test.ts). A sandbox
 * on A with a file and a running process is paused with `keepMemory: false`: its snapshot
 * is published like any suspend's, disk part only (no memory image in the blob store).
 * A is drained, so `connect` restores it on B, which fetches the disk from the blob store
 * and boots it fresh: the file is there, the process is not. Needs root.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { Sandbox, type ConnectionOpts } from "e2b";
import { counterScript } from "../support/counter.ts";
import { waitFor, type Stack } from "../support/stack.ts";
import { startTwoNodes, type TwoNodes } from "../support/two-nodes.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, CRIU, network namespaces, btrfs)" : false;
const MARKER = `fsxnode-marker-${randomBytes(6).toString("hex")}`;
const COUNTER = counterScript("fsxcounter");
/** Processes whose command line names the counter script (the bracket keeps the grep itself out). */
const COUNT_COUNTERS = "grep -l 'fsxcount[e]r.py' /proc/[0-9]*/cmdline 2>/dev/null | wc -l";

describe("filesystem-only pause across nodes (space up + a standalone node)", { skip, timeout: 10 * 60_000 }, () => {
  let two: TwoNodes;
  let stack: Stack;
  let opts: ConnectionOpts & { sandboxUrl: string };
  const created: string[] = [];
  const only = (on: "a" | "b") => two.only(on);
  const runcList = (stateDir: string) => two.runcList(stateDir);
  const snapshotBlobs = () =>
    spawnSync("find", [join(stack.dataDir, "blobs", "snapshots"), "-type", "f"], { encoding: "utf8" }).stdout.split("\n").filter(Boolean);

  before(async () => {
    two = await startTwoNodes("fsxnode");
    stack = two.stack;
    opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 300_000 };
  });

  after(async () => {
    await Promise.allSettled(created.map((id) => Sandbox.kill(id, opts)));
    await two?.stop();
  });

  test("pause({ keepMemory: false }) on A publishes the disk only; connect restores on B from the blob store and boots fresh", async () => {
    await only("a");
    const sb = await Sandbox.create({ ...opts, timeoutMs: 600_000 });
    created.push(sb.sandboxId);
    assert.ok(runcList(join(stack.dataDir, "runc")).includes(sb.sandboxId), "created on node A");
    await sb.files.write("/home/user/note.txt", MARKER);
    await sb.files.write(COUNTER.path, COUNTER.source);
    await sb.commands.run(`python3 ${COUNTER.path}`, { background: true });
    await waitFor(async () => (await sb.commands.run(COUNT_COUNTERS)).stdout.trim() === "1" || undefined, "the counter runs", 30_000);

    assert.equal(await sb.pause({ keepMemory: false }), true);
    assert.equal((await Sandbox.getInfo(sb.sandboxId, opts)).state, "paused");
    // Pause answers once the capture is safe on A; the upload follows it (durability local → durable, #25).
    const blobs = await waitFor(() => {
      const b = snapshotBlobs();
      return b.some((f) => /\/disk\.btrfs\.enc$/.test(f)) ? b : undefined;
    }, "the disk part is published", 60_000);
    assert.ok(!blobs.some((f) => /\/memory\.tar/.test(f)), `no memory image: ${blobs.join(", ")}`);
    await only("b");

    const back = await Sandbox.connect(sb.sandboxId, { ...opts, timeoutMs: 600_000 });
    assert.ok(runcList(two.bRuntimeStateDir).includes(sb.sandboxId), "restored on node B");
    assert.ok(!runcList(join(stack.dataDir, "runc")).includes(sb.sandboxId), "not on node A");
    assert.match(two.nodeBOutput(), /snapshot fetched from the blob store/, "B fetched the disk from the blob store");
    // Reachable first: right after a connect the gateway may still answer 502 (issue 20 item 1, its own test).
    await waitFor(() => back.files.exists("/home/user/note.txt"), "the sandbox is reachable after connect", 30_000);
    assert.equal(await back.files.read("/home/user/note.txt"), MARKER, "the disk came along");
    assert.equal((await back.commands.run(COUNT_COUNTERS)).stdout.trim(), "0", "no process survived: booted fresh on B");
    assert.equal((await back.commands.run("whoami")).stdout, "user\n");
  });
});
