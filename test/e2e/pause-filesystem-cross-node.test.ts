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
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox, type ConnectionOpts } from "e2b";
import { counterScript } from "../support/counter.ts";
import { freePort, hostScopeFor, removeDataDir, startStack, waitFor, type Stack } from "../support/stack.ts";
import { runSpace, type SpaceProcess } from "../support/space-process.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, CRIU, network namespaces, btrfs)" : false;
const RUN = randomBytes(3).toString("hex");
const KEY = randomBytes(32).toString("hex");
const INTERNAL = `int_${randomBytes(12).toString("hex")}`;
const MARKER = `fsxnode-marker-${randomBytes(6).toString("hex")}`;
const COUNTER = counterScript("fsxcounter");
/** Processes whose command line names the counter script (the bracket keeps the grep itself out). */
const COUNT_COUNTERS = "grep -l 'fsxcount[e]r.py' /proc/[0-9]*/cmdline 2>/dev/null | wc -l";

describe("filesystem-only pause across nodes (space up + a standalone node)", { skip, timeout: 10 * 60_000 }, () => {
  let stack: Stack;
  let opts: ConnectionOpts & { sandboxUrl: string };
  let nodeB: SpaceProcess | undefined;
  const bDir = mkdtempSync(join(tmpdir(), "space-fsxnode-b-"));
  const bScope = hostScopeFor(bDir);
  const ids = { a: "", b: "" };
  const created: string[] = [];

  const admin = async (method: string, path: string, body?: unknown) => {
    const r = await fetch(`${stack.apiUrl}/admin/api/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${stack.adminToken}`, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await r.text();
    return { status: r.status, body: (text ? JSON.parse(text) : {}) as Record<string, unknown> };
  };
  /** Only `on` takes new work: the other node is gently drained (residents stay). */
  const only = async (on: "a" | "b") => {
    const off = on === "a" ? "b" : "a";
    assert.equal((await admin("POST", `/nodes/${ids[on]}/ready`, {})).body.status, "ready");
    assert.equal((await admin("POST", `/nodes/${ids[off]}/drain`, { mode: "gentle" })).body.status, "draining");
  };
  const runcList = (stateDir: string) => spawnSync("runc", ["--root", stateDir, "list", "-q"], { encoding: "utf8" }).stdout;
  const snapshotBlobs = () =>
    spawnSync("find", [join(stack.dataDir, "blobs", "snapshots"), "-type", "f"], { encoding: "utf8" }).stdout.split("\n").filter(Boolean);

  before(async () => {
    stack = await startStack({
      env: { SPACE_INTERNAL_TOKEN: INTERNAL, SPACE_ENCRYPTION_KEY: KEY, SPACE_NODE_NAME: `fsxnode-a-${RUN}`, SPACE_NODE_HEARTBEAT_MS: "1000" },
    });
    opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 300_000 };
    nodeB = runSpace(["node"], {
      ...bScope,
      SPACE_DATA_DIR: bDir,
      SPACE_INTERNAL_TOKEN: INTERNAL,
      SPACE_ENCRYPTION_KEY: KEY,
      SPACE_BLOB_URL: join(stack.dataDir, "blobs"),
      SPACE_LOG_LEVEL: "info",
      SPACE_NODE_CONTROL_URL: stack.apiUrl,
      SPACE_NODE_PORT: String(await freePort()),
      SPACE_NODE_NAME: `fsxnode-b-${RUN}`,
      SPACE_NODE_HEARTBEAT_MS: "1000",
      SPACE_NODE_MAX_SLOTS: "20",
      SPACE_NODE_BTRFS_IMAGE_GIB: "8",
    });
    await nodeB.waitFor("is up at", 150_000);
    const nodes = (await admin("GET", "/nodes")).body.nodes as { id: string; name: string }[];
    ids.a = nodes.find((n) => n.name === `fsxnode-a-${RUN}`)?.id ?? "";
    ids.b = nodes.find((n) => n.name === `fsxnode-b-${RUN}`)?.id ?? "";
    assert.ok(ids.a && ids.b, `both nodes registered: ${JSON.stringify(nodes)}`);
  });

  after(async () => {
    await Promise.allSettled(created.map((id) => Sandbox.kill(id, opts)));
    await nodeB?.stop();
    await stack?.stop();
    spawnSync("ip", ["link", "del", bScope.SPACE_NODE_BRIDGE!]);
    for (const family of ["inet", "bridge"]) spawnSync("nft", ["delete", "table", family, bScope.SPACE_NODE_NFT_TABLE!]);
    removeDataDir(bDir);
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
    const blobs = snapshotBlobs();
    assert.ok(blobs.some((f) => /\/disk\.btrfs\.enc$/.test(f)), `the disk part is published: ${blobs.join(", ")}`);
    assert.ok(!blobs.some((f) => /\/memory\.tar/.test(f)), `no memory image: ${blobs.join(", ")}`);
    await only("b");

    const back = await Sandbox.connect(sb.sandboxId, { ...opts, timeoutMs: 600_000 });
    assert.ok(runcList(bScope.SPACE_NODE_RUNTIME_STATE_DIR!).includes(sb.sandboxId), "restored on node B");
    assert.ok(!runcList(join(stack.dataDir, "runc")).includes(sb.sandboxId), "not on node A");
    assert.match(nodeB!.out(), /snapshot fetched from the blob store/, "B fetched the disk from the blob store");
    // Reachable first: right after a connect the gateway may still answer 502 (issue 20 item 1, its own test).
    await waitFor(() => back.files.exists("/home/user/note.txt"), "the sandbox is reachable after connect", 30_000);
    assert.equal(await back.files.read("/home/user/note.txt"), MARKER, "the disk came along");
    assert.equal((await back.commands.run(COUNT_COUNTERS)).stdout.trim(), "0", "no process survived: booted fresh on B");
    assert.equal((await back.commands.run("whoami")).stdout, "user\n");
  });
});
