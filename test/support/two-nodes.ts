/**
 * Two nodes under one control plane, as the cross-node suites need them: `space up` (node
 * A, in the stack) and a standalone `space node` (node B) sharing the stack's blob store,
 * both registered; `only(on)` lets one node take new work (the other is gently drained,
 * its residents stay); `stop` removes node B's host objects and data as well.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, hostScopeFor, removeDataDir, startStack, type Stack } from "./stack.ts";
import { runSpace, type SpaceProcess } from "./space-process.ts";

export interface TwoNodes {
  stack: Stack;
  ids: { a: string; b: string };
  /** An Admin API call: status and the parsed body. */
  admin(method: string, path: string, body?: unknown): Promise<{ status: number; body: Record<string, unknown> }>;
  only(on: "a" | "b"): Promise<void>;
  /** The container ids runc knows under `stateDir` (node A's: `join(stack.dataDir, "runc")`). */
  runcList(stateDir: string): string;
  /** Node B's data directory. */
  bDir: string;
  /** Node B's runc state directory (for `runcList`). */
  bRuntimeStateDir: string;
  /** Node B's output so far. */
  nodeBOutput(): string;
  /** Node B lost: its process killed (SIGKILL), nothing shut down in order. */
  killB(): Promise<void>;
  stop(): Promise<void>;
}

export interface TwoNodesOptions {
  /** More environment for `space up` (the control plane and node A). */
  env?: Record<string, string>;
  /** More environment for node B's `space node`, over its defaults (20 slots, an 8 GiB cache image). */
  nodeBEnv?: Record<string, string>;
}

export async function startTwoNodes(name: string, opts: TwoNodesOptions = {}): Promise<TwoNodes> {
  const run = randomBytes(3).toString("hex");
  const internal = `int_${randomBytes(12).toString("hex")}`;
  const key = randomBytes(32).toString("hex");
  const bDir = mkdtempSync(join(tmpdir(), `space-${name}-b-`));
  const bScope = hostScopeFor(bDir);
  let nodeB: SpaceProcess | undefined;
  const stack = await startStack({
    env: { ...opts.env, SPACE_INTERNAL_TOKEN: internal, SPACE_ENCRYPTION_KEY: key, SPACE_NODE_NAME: `${name}-a-${run}`, SPACE_NODE_HEARTBEAT_MS: "1000" },
  });
  const stop = async () => {
    await nodeB?.stop();
    await stack.stop();
    spawnSync("ip", ["link", "del", bScope.SPACE_NODE_BRIDGE!]);
    for (const family of ["inet", "bridge"]) spawnSync("nft", ["delete", "table", family, bScope.SPACE_NODE_NFT_TABLE!]);
    removeDataDir(bDir);
  };
  const admin = async (method: string, path: string, body?: unknown) => {
    const r = await fetch(`${stack.apiUrl}/admin/api/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${stack.adminToken}`, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await r.text();
    return { status: r.status, body: (text ? JSON.parse(text) : {}) as Record<string, unknown> };
  };
  const ids = { a: "", b: "" };
  try {
    nodeB = runSpace(["node"], {
      ...bScope,
      SPACE_DATA_DIR: bDir,
      SPACE_INTERNAL_TOKEN: internal,
      SPACE_ENCRYPTION_KEY: key,
      SPACE_BLOB_URL: join(stack.dataDir, "blobs"),
      SPACE_LOG_LEVEL: "info",
      SPACE_NODE_CONTROL_URL: stack.apiUrl,
      SPACE_NODE_PORT: String(await freePort()),
      SPACE_NODE_NAME: `${name}-b-${run}`,
      SPACE_NODE_HEARTBEAT_MS: "1000",
      SPACE_NODE_MAX_SLOTS: "20",
      SPACE_NODE_BTRFS_IMAGE_GIB: "8",
      ...opts.nodeBEnv,
    });
    await nodeB.waitFor("is up at", 150_000);
    const nodes = (await admin("GET", "/nodes")).body.nodes as { id: string; name: string }[];
    ids.a = nodes.find((n) => n.name === `${name}-a-${run}`)?.id ?? "";
    ids.b = nodes.find((n) => n.name === `${name}-b-${run}`)?.id ?? "";
    assert.ok(ids.a && ids.b, `both nodes registered: ${JSON.stringify(nodes)}`);
  } catch (e) {
    await stop();
    throw e;
  }
  return {
    stack,
    ids,
    admin,
    bDir,
    bRuntimeStateDir: bScope.SPACE_NODE_RUNTIME_STATE_DIR!,
    nodeBOutput: () => nodeB?.out() ?? "",
    killB: async () => nodeB?.stop("SIGKILL"),
    stop,
    async only(on) {
      const off = on === "a" ? "b" : "a";
      assert.equal((await admin("POST", `/nodes/${ids[on]}/ready`, {})).body.status, "ready");
      assert.equal((await admin("POST", `/nodes/${ids[off]}/drain`, { mode: "gentle" })).body.status, "draining");
    },
    runcList: (stateDir) => spawnSync("runc", ["--root", stateDir, "list", "-q"], { encoding: "utf8" }).stdout,
  };
}
