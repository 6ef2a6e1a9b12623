/**
 * Sandbox logs across nodes (issue 20 item 11): a sandbox paused on node A (`space up`)
 * and connected on node B (a standalone `space node` sharing only the blob store) keeps
 * the lines it logged on A: envd's ring travels in the memory checkpoint, and B, which
 * never saw the sandbox, pulls all of it. The e2b SDK drives the sandbox; logs go through
 * its own `ApiClient`. Needs root (runc, CRIU, network namespaces, btrfs).
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ApiClient, ConnectionConfig, Sandbox, type ConnectionOpts, type components } from "e2b";
import { freePort, hostScopeFor, removeDataDir, startStack, type Stack } from "../support/stack.ts";
import { runSpace, type SpaceProcess } from "../support/space-process.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, CRIU, network namespaces, btrfs)" : false;
const RUN = randomBytes(3).toString("hex");
const INTERNAL = `int_${randomBytes(12).toString("hex")}`;

describe("sandbox logs follow a sandbox restored on another node", { skip, timeout: 10 * 60_000 }, () => {
  let stack: Stack;
  let opts: ConnectionOpts & { sandboxUrl: string };
  let nodeB: SpaceProcess | undefined;
  const bDir = mkdtempSync(join(tmpdir(), "space-logs-b-"));
  const bScope = hostScopeFor(bDir);
  const ids = { a: "", b: "" };
  const created: string[] = [];

  const admin = async (method: string, path: string, body?: unknown) => {
    const r = await fetch(`${stack.apiUrl}/admin/api/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${stack.adminToken}`, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    return (await r.json()) as { status?: string; nodes?: { id: string; name: string }[] };
  };
  /** Only `on` takes new work: the other node is gently drained. */
  const only = async (on: "a" | "b") => {
    assert.equal((await admin("POST", `/nodes/${ids[on]}/ready`, {})).status, "ready");
    assert.equal((await admin("POST", `/nodes/${ids[on === "a" ? "b" : "a"]}/drain`, { mode: "gentle" })).status, "draining");
  };
  const runcList = (stateDir: string) => spawnSync("runc", ["--root", stateDir, "list", "-q"], { encoding: "utf8" }).stdout;

  before(async () => {
    stack = await startStack({ env: { SPACE_INTERNAL_TOKEN: INTERNAL, SPACE_NODE_NAME: `logs-a-${RUN}`, SPACE_NODE_HEARTBEAT_MS: "1000" } });
    opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 300_000 };
    nodeB = runSpace(["node"], {
      ...bScope,
      SPACE_DATA_DIR: bDir,
      SPACE_INTERNAL_TOKEN: INTERNAL,
      SPACE_BLOB_URL: join(stack.dataDir, "blobs"),
      SPACE_LOG_LEVEL: "info",
      SPACE_NODE_CONTROL_URL: stack.apiUrl,
      SPACE_NODE_PORT: String(await freePort()),
      SPACE_NODE_NAME: `logs-b-${RUN}`,
      SPACE_NODE_HEARTBEAT_MS: "1000",
      SPACE_NODE_MAX_SLOTS: "20",
      SPACE_NODE_BTRFS_IMAGE_GIB: "8",
    });
    await nodeB.waitFor("is up at", 150_000);
    const nodes = (await admin("GET", "/nodes")).nodes ?? [];
    ids.a = nodes.find((n) => n.name === `logs-a-${RUN}`)?.id ?? "";
    ids.b = nodes.find((n) => n.name === `logs-b-${RUN}`)?.id ?? "";
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

  test("paused on A, connected on B: the lines logged on A are there, and B's after them", async () => {
    const api = new ApiClient(new ConnectionConfig(opts)).api;
    const logs = async (id: string): Promise<components["schemas"]["SandboxLogEntry"][]> => {
      const r = await api.GET("/v2/sandboxes/{sandboxID}/logs", { params: { path: { sandboxID: id } } });
      assert.equal(r.response.status, 200);
      return r.data!.logs;
    };
    const started = (l: components["schemas"]["SandboxLogEntry"][], arg: string) => l.findIndex((e) => e.message === "process started" && (e.fields.args ?? "").includes(arg));

    await only("a");
    const sb = await Sandbox.create({ ...opts, timeoutMs: 600_000 });
    created.push(sb.sandboxId);
    assert.ok(runcList(join(stack.dataDir, "runc")).includes(sb.sandboxId), "created on node A");
    await sb.commands.run("echo on-node-a");
    assert.equal(await sb.pause(), true);
    await only("b");
    const back = await Sandbox.connect(sb.sandboxId, { ...opts, timeoutMs: 600_000 });
    assert.ok(runcList(bScope.SPACE_NODE_RUNTIME_STATE_DIR!).includes(sb.sandboxId), "restored on node B");
    await back.commands.run("echo on-node-b");
    const l = await logs(sb.sandboxId);
    const a = started(l, "on-node-a");
    const b = started(l, "on-node-b");
    assert.ok(a >= 0 && b > a, `A's line then B's: ${JSON.stringify(l.slice(-8).map((e) => [e.message, e.fields.args]))}`);
  });
});
