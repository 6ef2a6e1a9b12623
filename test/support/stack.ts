/**
 * Starts the real stack for end-to-end tests: `node bin/space.mjs up` as a child process
 * with a temporary SPACE_DATA_DIR and free ports; parses what it prints (E2B_API_URL,
 * E2B_SANDBOX_URL, E2B_API_KEY, SPACE_ADMIN_TOKEN) and stops it (SIGTERM, then SIGKILL).
 *
 * `SPACE_E2E_STACK=<apiUrl>,<sandboxUrl>,<apiKey>,<adminToken>` reuses a running stack
 * instead (fast iteration).
 */
import { spawnSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { createHash } from "node:crypto";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { cleanupOnSignal, pickSlotRange, removeNodeContainers, removeNodeNetwork, type NodeNetwork } from "./node-network-cleanup.ts";
import { runSpace } from "./space-process.ts";
import { defaultStagingDir } from "../../src/node/snapshots/node-snapshots.ts";

export { waitFor } from "./wait.ts";

export interface Stack {
  apiUrl: string;
  sandboxUrl: string;
  apiKey: string;
  adminToken: string;
  dataDir: string;
  /** Everything the stack printed so far (stdout + stderr), for failure messages. */
  output(): string;
  stop(): Promise<void>;
}

export interface StackOptions {
  /** Extra SPACE_* variables. */
  env?: Record<string, string>;
  /** How long to wait for "SPACE is up" (the first start on a machine builds `base`). */
  startTimeoutMs?: number;
  /** Reuse this data directory (restart tests); it is then left in place on stop. */
  dataDir?: string;
  /** Run the compiled CLI (test/support/space-process.ts; default: SPACE_E2E_COMPILED=1). */
  compiled?: boolean;
}

/**
 * A port free now, for a server the caller starts next. Taken below the kernel's ephemeral
 * range, not from bind(0): an ephemeral port may become the local port of any connection
 * opened meanwhile (a test running beside), and the server then cannot bind it. Above
 * 20000: below are fixed ports of servers the tests start (Kubernetes' 10250-10259).
 */
export async function freePort(): Promise<number> {
  const low = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]);
  const top = low > FREE_PORT_FLOOR + 1000 ? low : FREE_PORT_FLOOR + 10_000;
  for (let i = 0; i < 100; i++) {
    const port = FREE_PORT_FLOOR + Math.floor(Math.random() * (top - FREE_PORT_FLOOR));
    if (await canBind(port)) return port;
  }
  throw new Error(`no free port between ${FREE_PORT_FLOOR} and ${top} after 100 tries`);
}
const FREE_PORT_FLOOR = 20_000;

function canBind(port: number): Promise<boolean> {
  return new Promise((res) => {
    const s = createServer();
    s.once("error", () => res(false));
    s.listen(port, "127.0.0.1", () => s.close(() => res(true)));
  });
}

/**
 * `freePort` closes the port it found before `space up` binds it, and meanwhile another
 * test may start a server on it: the stack then exits naming the port in use. Such a start
 * is made again on other ports (twice at most).
 */
export async function startStack(opts: StackOptions = {}): Promise<Stack> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startStackOnce(opts);
    } catch (e) {
      if (attempt >= 3 || !/on 127\.0\.0\.1 is already in use/.test(e instanceof Error ? e.message : String(e))) throw e;
    }
  }
}

async function startStackOnce(opts: StackOptions): Promise<Stack> {
  const reuse = process.env.SPACE_E2E_STACK;
  if (reuse) {
    const [apiUrl, sandboxUrl, apiKey, adminToken] = reuse.split(",");
    if (!apiUrl || !sandboxUrl || !apiKey || !adminToken) throw new Error("SPACE_E2E_STACK must be apiUrl,sandboxUrl,apiKey,adminToken");
    return { apiUrl, sandboxUrl, apiKey, adminToken, dataDir: "", output: () => "", stop: async () => {} };
  }
  const ownDir = !opts.dataDir;
  const dataDir = opts.dataDir ?? mkdtempSync(join(tmpdir(), "space-e2e-"));
  const [apiPort, gatewayPort, nodePort] = [await freePort(), await freePort(), await freePort()];
  const env: Record<string, string> = {
    SPACE_DATA_DIR: dataDir,
    SPACE_API_PORT: String(apiPort),
    SPACE_GATEWAY_PORT: String(gatewayPort),
    SPACE_NODE_PORT: String(nodePort),
    SPACE_LOG_LEVEL: process.env.SPACE_LOG_LEVEL ?? "warn",
    // The machine's base template tarballs: a checkout testing a new recipe builds it there, not in a shared .tools.
    ...(process.env.SPACE_BASE_TEMPLATE_DIR ? { SPACE_BASE_TEMPLATE_DIR: process.env.SPACE_BASE_TEMPLATE_DIR } : {}),
    ...hostScopeFor(dataDir),
    ...opts.env,
  };
  const proc = runSpace(["up"], env, { compiled: opts.compiled });
  const { child } = proc;
  const network = nodeNetworkOf(env);
  // Its sandboxes, when it was killed (never a default runtime state dir: that may be a real `space up`'s).
  const removeContainers = () => env.SPACE_NODE_RUNTIME_STATE_DIR && removeNodeContainers(env.SPACE_RUNTIME ?? "runc", env.SPACE_NODE_RUNTIME_STATE_DIR);
  // Interrupted: the stack releases its node on SIGTERM; whatever a stuck one leaves goes too.
  const forget = cleanupOnSignal(() => {
    stopSync(child);
    removeContainers();
    removeNodeNetwork(network);
    if (ownDir) removeDataDir(dataDir);
  });

  const stop = async () => {
    await proc.stop();
    forget();
    // It releases its node on stop (SPACE_NODE_RELEASE_ON_STOP); a stack killed or stuck past its deadline did not.
    removeContainers();
    removeNodeNetwork(network);
    if (ownDir) removeDataDir(dataDir);
  };

  const timeoutMs = opts.startTimeoutMs ?? 10 * 60_000;
  const deadline = Date.now() + timeoutMs;
  try {
    for (;;) {
      const out = proc.out();
      const vars = parseEnv(out);
      if (out.includes("SPACE is up") && vars.E2B_API_URL && vars.E2B_API_KEY && vars.SPACE_ADMIN_TOKEN) {
        return {
          apiUrl: vars.E2B_API_URL,
          sandboxUrl: vars.E2B_SANDBOX_URL || `http://127.0.0.1:${gatewayPort}`,
          apiKey: vars.E2B_API_KEY,
          adminToken: vars.SPACE_ADMIN_TOKEN,
          dataDir,
          output: proc.out,
          stop,
        };
      }
      if (proc.exited()) {
        throw new Error(`space up exited (${child.exitCode ?? child.signalCode}) before it was up:\n${out.slice(-4000)}`);
      }
      if (Date.now() > deadline) throw new Error(`space up not up after ${timeoutMs} ms:\n${out.slice(-4000)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  } catch (e) {
    await stop();
    throw e;
  }
}

/**
 * A host scope of its own for a stack's node (bridge, nft table, veth prefix, cgroup
 * parent, runtime state, slot range), derived from its data directory, so stacks started
 * by different suites or engineers on one machine never see or sweep each other.
 */
export function hostScopeFor(dataDir: string): Record<string, string> {
  const h = createHash("sha256").update(dataDir).digest();
  const tag = h.toString("hex").slice(0, 6);
  return {
    SPACE_NODE_BRIDGE: `sx${tag}`,
    SPACE_NODE_NFT_TABLE: `space_${tag}`,
    SPACE_NODE_VETH_PREFIX: `x${tag.slice(0, 3)}`,
    SPACE_NODE_CGROUP_PARENT: `space-${tag}`,
    SPACE_NODE_RUNTIME_STATE_DIR: join(dataDir, "runc"),
    SPACE_NODE_SLOT_CIDR: pickSlotRange(dataDir, `sx${tag}`),
    SPACE_NODE_MAX_SLOTS: "200",
    SPACE_NODE_RELEASE_ON_STOP: "true",
    SPACE_NODE_DISK_RESERVE_MIB: "1024",
  };
}

/** The host network objects of a `space up` / `space node` started with `env` (hostScopeFor's names). */
export function nodeNetworkOf(env: Record<string, string>, netns?: string): NodeNetwork {
  const { SPACE_NODE_BRIDGE: bridge, SPACE_NODE_NFT_TABLE: nftTable, SPACE_NODE_VETH_PREFIX: vethPrefix } = env;
  // Never a default scope: that could be a real `space up` on this machine.
  if (!bridge || !nftTable || !vethPrefix) throw new Error("a harness node needs its own SPACE_NODE_BRIDGE, SPACE_NODE_NFT_TABLE and SPACE_NODE_VETH_PREFIX");
  return {
    bridge,
    nftTable,
    vethPrefix,
    slotsDir: join(env.SPACE_NODE_DIR || join(env.SPACE_DATA_DIR!, "node"), "slots"),
    ...(netns ? { netns } : {}),
  };
}

/** SIGTERM, up to 30 s for it to release its node, then SIGKILL; blocking (signal handlers cannot wait). */
function stopSync(child: ChildProcess): void {
  const pid = child.pid;
  if (pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
  const alive = () => {
    try {
      return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
    } catch {
      return false;
    }
  };
  child.kill("SIGTERM");
  const nap = new Int32Array(new SharedArrayBuffer(4));
  for (const end = Date.now() + 30_000; alive() && Date.now() < end; ) Atomics.wait(nap, 0, 0, 100);
  if (alive()) child.kill("SIGKILL");
}

/** Removes a stack's data directory, unmounting what its node left mounted first (never deleting through a mount). */
export function removeDataDir(dataDir: string): void {
  const mounts = readFileSync("/proc/self/mounts", "utf8")
    .split("\n")
    .map((l) => l.split(" ")[1] ?? "")
    .filter((m) => m === dataDir || m.startsWith(`${dataDir}/`))
    .sort((a, b) => b.length - a.length);
  for (const m of mounts) spawnSync("umount", ["-l", m]);
  if (mounts.length && readFileSync("/proc/self/mounts", "utf8").includes(` ${dataDir}/`)) return;
  // Memory images a killed node left staged (a stop moves them to disk), outside the data dir.
  rmSync(defaultStagingDir(join(dataDir, "node")), { recursive: true, force: true });
  try {
    rmSync(dataDir, { recursive: true, force: true, maxRetries: 3 });
  } catch {
    /* leave it for the OS temp cleaner */
  }
}

function parseEnv(text: string): Record<string, string> {
  const vars: Record<string, string> = {};
  for (const m of text.matchAll(/^export ([A-Z0-9_]+)=(.*)$/gm)) vars[m[1]!] = m[2]!.trim();
  return vars;
}

/** An admin API call on a stack: its status and JSON body (`{}` when empty). */
export async function adminRequest(stack: Pick<Stack, "apiUrl" | "adminToken">, method: string, path: string, body?: unknown) {
  const res = await fetch(`${stack.apiUrl}/admin/api/v1${path}`, {
    method,
    headers: { authorization: `Bearer ${stack.adminToken}`, ...(body ? { "content-type": "application/json" } : {}) },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  return { status: res.status, body: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
}

/** The sum of a metric's samples over all its label sets on the stack's /metrics. */
export async function metricSum(apiUrl: string, name: string): Promise<number> {
  const text = await (await fetch(`${apiUrl}/metrics`)).text();
  return text
    .split("\n")
    .filter((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `))
    .reduce((a, l) => a + Number(l.split(" ").pop()), 0);
}
