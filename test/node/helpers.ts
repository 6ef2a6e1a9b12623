/** Shared setup of node tests: a fresh node dir, a small node cache, a started agent. */
import { createHash } from "node:crypto";
import { existsSync, rmSync } from "node:fs";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { loadConfig, type VarName } from "../../src/core/config.ts";
import { exec } from "../../src/core/exec.ts";
import { newExecutionId, newSandboxId } from "../../src/core/ids.ts";
import { createLogger } from "../../src/core/log.ts";
import { createNodeAgent, REPO_DIR, type NodeAgent, type NodeAgentDeps } from "../../src/node/agent.ts";
import type { SandboxSpec } from "../../src/contract/node-api.ts";
import { cleanupOnSignal, OWNER_PID_FILE, pickSlotRange, removeNodeContainers, removeNodeNetwork, type NodeNetwork } from "../support/node-network-cleanup.ts";
import { removeDataDir } from "../support/stack.ts";

export const isRoot = process.getuid?.() === 0;
export const STUB_ENVD_DIR = join(REPO_DIR, "test", "node", "fixtures", "envd-stub");
export const REAL_ENVD_DIR = join(REPO_DIR, "dist", "envd");
export const hasRealEnvd = existsSync(join(REAL_ENVD_DIR, "envd.mjs"));

/**
 * Each test node owns its host objects (bridge, nft table, veth names, cgroup parent),
 * derived from its dir: test processes running at the same time, and a `space up` on the
 * same machine, never sweep each other's. A restart reuses the dir, so the same scope. Its
 * slot /24 is one no route on the machine overlaps (pickSlotRange), chosen at start.
 */
export function testScope(dir: string) {
  const tag = createHash("sha256").update(dir).digest("hex").slice(0, 4);
  return { scope: { bridge: `spt${tag}`, nftTable: `space_t${tag}`, vethPrefix: `t${tag}`, cgroupParent: `space-test-${tag}` } };
}

export interface TestNode {
  agent: NodeAgent;
  dir: string;
  close(opts?: { keepDir?: boolean; unmount?: boolean }): Promise<void>;
}

export async function startTestNode(
  o: { dir?: string; env?: Partial<Record<VarName, string>>; deps?: NodeAgentDeps; realEnvd?: boolean } = {},
): Promise<TestNode> {
  const dir = o.dir ?? (await mkdtemp(join(tmpdir(), "space-node-test-")));
  const scoped = testScope(dir);
  const scope = { ...scoped.scope, ...o.deps?.hostScope };
  const network: NodeNetwork = { bridge: scope.bridge, nftTable: scope.nftTable, vethPrefix: scope.vethPrefix, slotsDir: join(dir, "node", "slots") };
  const config = loadConfig({}, {
    SPACE_DATA_DIR: dir,
    SPACE_NODE_DIR: join(dir, "node"),
    SPACE_NODE_BTRFS_IMAGE_GIB: "16",
    SPACE_NODE_DISK_RESERVE_MIB: "1024",
    SPACE_INTERNAL_TOKEN: "test-token",
    SPACE_LOG_LEVEL: "warn",
    SPACE_NODE_SLOT_CIDR: pickSlotRange(dir, scope.bridge),
    SPACE_NODE_MAX_SLOTS: "200",
    // Node tests count sandboxes and host objects exactly: a template's checkpoint after boot (a
    // sandbox and a snapshot made behind a create) is test/templates/boot-capture.test.ts's.
    SPACE_NODE_BOOT_CAPTURE: "false",
    // As test/support/stack.ts: the machine's base template tarballs, when the caller names them.
    ...(process.env.SPACE_BASE_TEMPLATE_DIR ? { SPACE_BASE_TEMPLATE_DIR: process.env.SPACE_BASE_TEMPLATE_DIR } : {}),
    ...o.env,
  });
  const stateDir = join("/run/space-test", dir.split("/").pop()!);
  const logger = createLogger(process.env.TEST_LOG_LEVEL ?? "warn", "node-test");
  const agent = createNodeAgent(config, logger, {
    envdDir: o.realEnvd && hasRealEnvd ? REAL_ENVD_DIR : STUB_ENVD_DIR,
    runtimeStateDir: stateDir,
    ...o.deps,
    hostScope: scope,
  });
  // Marks the dir as this process's for scripts/clean-leftovers.sh (an idle node holds nothing open in it).
  await writeFile(join(dir, OWNER_PID_FILE), `${process.pid}\n`);
  const forget = cleanupOnSignal(() => {
    removeNodeContainers(config.SPACE_RUNTIME, stateDir);
    removeNodeNetwork(network);
    removeDataDir(dir);
    rmSync(stateDir, { recursive: true, force: true });
  });
  try {
    await agent.start();
  } catch (e) {
    await agent.stop({ unmountCache: true }).catch(() => undefined);
    removeNodeNetwork(network);
    forget();
    throw e;
  }
  return {
    agent,
    dir,
    async close(c = {}) {
      const m = agent.manager;
      if (m && !c.keepDir) for (const s of m.list()) await m.kill(s.sandboxId, AbortSignal.timeout(60_000));
      await agent.stop({ unmountCache: c.unmount ?? !c.keepDir });
      forget();
      if (!c.keepDir) {
        removeNodeNetwork(network);
        removeDataDir(dir); // the node's tmpfs dirs (bundles, slots) are mounts
        await rm(stateDir, { recursive: true, force: true });
      }
    },
  };
}

export function spec(over: Partial<SandboxSpec> = {}): SandboxSpec {
  return {
    sandboxId: newSandboxId(),
    executionId: newExecutionId(),
    template: "base",
    vcpu: 1,
    memoryMib: 256,
    diskMib: 1024,
    envVars: {},
    allowInternetAccess: true,
    ...over,
  };
}

/** Runs argv inside a sandbox (runc exec) as root or `user`. */
export async function sh(node: TestNode, id: string, script: string, user: "root" | "user" = "user", timeoutMs = 30_000) {
  return node.agent.runtime!.execIn(id, ["/bin/sh", "-c", script], { user, timeoutMs });
}

const WARM = /\/\.warm(src)?-/;

/** Host objects a sandbox may leak, counted for leak tests. */
export async function hostObjects(node: TestNode, ids?: Set<string>): Promise<Record<string, number>> {
  // This node's namespaces: named after its bridge, then the slot's owner (slots.ts netnsOf).
  const netnsPrefix = `${testScope(node.dir).scope.bridge}-`;
  const mine = (name: string) => name.startsWith(netnsPrefix) && (ids ? ids.has(name.slice(netnsPrefix.length)) : true);
  const count = async (argv: string[], filter: (l: string) => boolean) => {
    const r = await exec(argv[0]!, argv.slice(1), { allowFailure: true, timeoutMs: 30_000 });
    return r.stdout.split("\n").filter((l) => l.trim() && filter(l)).length;
  };
  const mounts = (await readFile("/proc/self/mountinfo", "utf8")).split("\n").filter((l) => l.includes(node.dir) || [...(ids ?? [])].some((id) => l.includes(`/run/netns/${netnsPrefix}${id}`))).length;
  const dirs = node.agent.runtime?.cgroupDirs("x") ?? {};
  const cg = async (ctrl: string) => (dirs[ctrl] ? (await readdir(dirname(dirs[ctrl]!)).catch(() => [] as string[])).filter((n) => /^[a-z0-9]{20}$/.test(n)).length : 0);
  const runc = node.agent.runtime ? (await node.agent.runtime.list(AbortSignal.timeout(30_000))).length : 0;
  return {
    mounts,
    netns: await count(["ip", "netns", "list"], (l) => mine(l.split(" ")[0]!)),
    veths: await count(["ip", "-br", "link"], (l) => new RegExp(`^${testScope(node.dir).scope.vethPrefix}\\d+`).test(l)),
    cgroupsMemory: await cg("memory"),
    cgroupsPids: await cg("pids"),
    nftLines: await count(["nft", "list", "table", "inet", testScope(node.dir).scope.nftTable], () => true),
    // Disks made ahead (warm-disks.ts) are the node's, bounded and deleted at close: not a sandbox's leak.
    subvolumes: await count(["btrfs", "subvolume", "list", join(node.dir, "node", "cache")], (l) => !WARM.test(l)),
    qgroups: await count(["btrfs", "qgroup", "show", join(node.dir, "node", "cache")], (l) => /^0\//.test(l) && !WARM.test(l)),
    containers: runc,
  };
}

export async function waitFor<T>(fn: () => Promise<T | undefined | false>, timeoutMs: number, what: string): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn().catch(() => undefined);
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
