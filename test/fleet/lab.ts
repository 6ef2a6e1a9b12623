/**
 * A Direct-fleet lab on one machine (issue #8), used by test/e2e/fleet.test.ts and
 * bench/fleet-placement.ts: real Postgres, one shared blob store, `space api` and
 * `space controller` replicas on the host, and N standalone `space node` agents.
 *
 * Each node agent runs in its own network namespace (`nsenter --net`, mount namespace
 * shared with the host so its btrfs cache, runc state and cgroups are ordinary host
 * objects the harness can clean up) with its own address on a lab bridge, and they all
 * listen on the same port, as separate hosts would: the control plane reaches each one
 * only at its registered address, verify calls that address back, and one node cannot
 * answer for another. Each also has its own node cache, cgroup parent, runtime state dir,
 * bridge, nft table and slot range. The control plane listens on the bridge's host
 * address, the only route between the namespaces and the host; nothing leaves the machine
 * (the namespaces have no default route).
 */
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join, resolve } from "node:path";
import { randomBytes } from "node:crypto";
import { conflictingRoutes } from "../../src/core/cidr.ts";
import { hostRoutesSync, removeNodeNetwork } from "../support/node-network-cleanup.ts";
import { baseEnv, runSpace, type SpaceProcess } from "../support/space-process.ts";
import { freePort, nodeNetworkOf, removeDataDir, waitFor } from "../support/stack.ts";

export interface LabNodeSpec {
  /** One lowercase letter: names the node, its namespace and host objects. */
  key: string;
  group: string;
  labels: Record<string, string>;
  runtime?: "runc" | "crun";
}

export interface LabOptions {
  databaseUrl: string;
  nodes: LabNodeSpec[];
  /** API replicas, each with its own env (e.g. its placement gate); nodes register with the first. */
  apis: Array<{ name: string; env?: Record<string, string> }>;
  controllers: number;
  controllerEnv?: Record<string, string>;
  /** Env of every control-plane process. */
  env?: Record<string, string>;
  maxSlots?: number;
  /** Env of every node agent (overrides the lab's defaults). */
  nodeEnv?: Record<string, string>;
}

export interface LabApi {
  name: string;
  url: string;
  gatewayUrl: string;
  proc: SpaceProcess;
}

export interface LabController {
  index: number;
  metricsUrl: string;
  proc: SpaceProcess;
  /** Starts it again after a kill (same env, same metrics port). */
  start(): void;
}

export interface LabNode {
  spec: LabNodeSpec;
  name: string;
  ip: string;
  address: string;
  netns: string;
  stateDir: string;
  cgroupParent: string;
  /** Its environment (host scope, data dir). */
  env: Record<string, string>;
  proc?: SpaceProcess;
  /** Set by the first registration check. */
  id?: string;
  /** Starts the agent (again) in its namespace; resolves once it registered. */
  start(): Promise<void>;
  /** Container ids its runtime lists. */
  containers(): string[];
}

export interface Lab {
  run: string;
  adminToken: string;
  internalToken: string;
  hostIp: string;
  apis: LabApi[];
  controllers: LabController[];
  nodes: LabNode[];
  api(name: string): LabApi;
  node(key: string): LabNode;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- JSON bodies read field by field by callers
  admin(method: string, path: string, body?: unknown, token?: string): Promise<{ status: number; body: Record<string, any> }>;
  /** Runs the `space` CLI as an operator would (admin token, first API's URL); resolves when it exits. */
  cli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }>;
  stop(): Promise<void>;
}

const NODE_PORT = 3002;

function sh(cmd: string, args: string[], allowFailure = false): string {
  const r = spawnSync(cmd, args, { encoding: "utf8" });
  if (r.status !== 0 && !allowFailure) throw new Error(`${cmd} ${args.join(" ")}: ${r.stderr || r.stdout}`);
  return r.stdout;
}

/** A /24 under 10.254/16 no route on this machine overlaps (stale bridges of killed runs included). */
function freeSubnet(): number {
  const routes = hostRoutesSync();
  for (let i = 0; i < 50; i++) {
    const s = 1 + randomBytes(1)[0]! % 250;
    if (!conflictingRoutes(`10.254.${s}.0/24`, "", routes).length) return s;
  }
  throw new Error("no 10.254.x.0/24 free of routes on this machine for the lab bridge");
}

export async function startLab(o: LabOptions): Promise<Lab> {
  const run = randomBytes(3).toString("hex");
  const adminToken = `adm_${randomBytes(12).toString("hex")}`;
  const internalToken = `int_${randomBytes(12).toString("hex")}`;
  const subnet = freeSubnet();
  const hostIp = `10.254.${subnet}.1`;
  const bridge = `slb${run}`;
  const ctlDir = mkdtempSync(join(tmpdir(), "space-lab-ctl-"));
  const blobDir = join(ctlDir, "blobs");
  // Readiness is read from info lines ("api listening", "controller elected leader").
  const logLevel = ["debug", "trace"].includes(process.env.SPACE_LOG_LEVEL ?? "") ? process.env.SPACE_LOG_LEVEL! : "info";
  const apis: LabApi[] = [];
  const controllers: LabController[] = [];
  const nodes: LabNode[] = [];
  const dataDirs: string[] = [];

  /** Sandboxes a node left running (it was killed, or outlived its stop deadline): kill them by cgroup, drop their slot namespaces. */
  const sweep = (n: LabNode) => {
    const dirs = sh("find", ["/sys/fs/cgroup", "-mindepth", "3", "-maxdepth", "3", "-type", "d", "-path", `*/${n.cgroupParent}/*`], true);
    for (const dir of dirs.split("\n").filter(Boolean)) {
      for (const pid of (existsSync(`${dir}/cgroup.procs`) ? readFileSync(`${dir}/cgroup.procs`, "utf8") : "").split("\n").filter(Boolean)) {
        try {
          process.kill(Number(pid), "SIGKILL");
        } catch {
          /* gone already */
        }
      }
      sh("ip", ["netns", "delete", basename(dir)], true);
    }
  };

  const stop = async () => {
    await Promise.all(nodes.map((n) => n.proc?.stop()));
    for (const n of nodes) sweep(n);
    await Promise.all(controllers.map((c) => c.proc.stop()));
    await Promise.all(apis.map((a) => a.proc.stop()));
    for (const n of nodes) {
      // Slot namespaces are the host's (the agent only joined its own for the network);
      // its bridge and nft tables go with its namespace, the host veth with its peer.
      removeNodeNetwork(nodeNetworkOf(n.env, n.netns));
      sh("ip", ["netns", "delete", n.netns], true);
      sh("rm", ["-rf", n.stateDir], true);
    }
    sh("ip", ["link", "delete", bridge], true);
    for (const d of dataDirs) removeDataDir(d);
    removeDataDir(ctlDir);
    // The nodes' cgroups (v1 controllers and unified tree), empty by now; deepest first.
    for (const n of nodes) sh("find", ["/sys/fs/cgroup", "-mindepth", "2", "-maxdepth", "3", "-depth", "-type", "d", "-path", `*/${n.cgroupParent}*`, "-exec", "rmdir", "{}", "+"], true);
  };

  try {
    sh("ip", ["link", "add", bridge, "type", "bridge"]);
    sh("ip", ["addr", "add", `${hostIp}/24`, "dev", bridge]);
    sh("ip", ["link", "set", bridge, "up"]);

    const common = {
      SPACE_BLOB_URL: blobDir,
      SPACE_DATABASE_URL: o.databaseUrl,
      SPACE_ADMIN_TOKEN: adminToken,
      SPACE_INTERNAL_TOKEN: internalToken,
      SPACE_LOG_LEVEL: logLevel,
      SPACE_NODE_HEARTBEAT_MS: "1000",
      SPACE_NODE_HEARTBEAT_GRACE_MS: "4000",
      // 0.1 CPU counted per vCPU (docs/capacity.md): a node's 2 CPUs admit 20 vCPUs, so a
      // 12-vCPU sandbox fills one (the placement test) and default ones fit by the dozen.
      SPACE_CAPACITY_CPU_REQUEST_MILLI: "100",
      ...o.env,
    };
    for (const a of o.apis) {
      const [apiPort, gwPort] = [await freePort(), await freePort()];
      const proc = runSpace(["api"], {
        ...common,
        SPACE_DATA_DIR: ctlDir,
        SPACE_API_HOST: hostIp,
        SPACE_API_PORT: String(apiPort),
        SPACE_GATEWAY_PORT: String(gwPort),
        ...a.env,
      });
      apis.push({ name: a.name, url: `http://${hostIp}:${apiPort}`, gatewayUrl: `http://${hostIp}:${gwPort}`, proc });
    }
    for (let i = 0; i < o.controllers; i++) {
      const metricsPort = await freePort();
      const env = { ...common, SPACE_DATA_DIR: ctlDir, SPACE_CONTROLLER_METRICS_PORT: String(metricsPort), ...o.controllerEnv };
      const c: LabController = {
        index: i,
        metricsUrl: `http://127.0.0.1:${metricsPort}/metrics`,
        proc: runSpace(["controller"], env),
        start() {
          c.proc = runSpace(["controller"], env);
        },
      };
      controllers.push(c);
    }
    await Promise.all(apis.map((a) => a.proc.waitFor("api listening", 60_000)));
    if (controllers.length) {
      await waitFor(
        () => {
          const dead = controllers.find((c) => c.proc.exited());
          if (dead) throw new Error(`controller ${dead.index} exited:\n${dead.proc.out().slice(-3000)}`);
          return controllers.some((c) => c.proc.out().includes("controller elected leader"));
        },
        "a controller leader",
        60_000,
        100,
      );
    }

    for (const [i, spec] of o.nodes.entries()) {
      const netns = `space-lab-${run}-${spec.key}`;
      const ip = `10.254.${subnet}.${10 + i}`;
      const hostVeth = `slb${run}${spec.key}`;
      sh("ip", ["netns", "add", netns]);
      sh("ip", ["link", "add", hostVeth, "type", "veth", "peer", "name", "lab0", "netns", netns]);
      sh("ip", ["link", "set", hostVeth, "master", bridge, "up"]);
      sh("ip", ["-n", netns, "addr", "add", `${ip}/24`, "dev", "lab0"]);
      sh("ip", ["-n", netns, "link", "set", "lab0", "up"]);
      sh("ip", ["-n", netns, "link", "set", "lo", "up"]);
      const dataDir = mkdtempSync(join(tmpdir(), `space-lab-${spec.key}-`));
      dataDirs.push(dataDir);
      const stateDir = `/run/space-lab/${run}-${spec.key}`;
      const runtime = spec.runtime ?? "runc";
      const env: Record<string, string> = {
        SPACE_DATA_DIR: dataDir,
        SPACE_NODE_DIR: join(dataDir, "node"),
        SPACE_INTERNAL_TOKEN: internalToken,
        SPACE_BLOB_URL: blobDir,
        SPACE_LOG_LEVEL: logLevel,
        SPACE_NODE_CONTROL_URL: apis[0]!.url,
        SPACE_NODE_HOST: ip,
        SPACE_NODE_PORT: String(NODE_PORT),
        SPACE_NODE_NAME: `lab-${spec.key}-${run}`,
        SPACE_NODE_GROUP: spec.group,
        SPACE_NODE_LABELS: Object.entries(spec.labels)
          .map(([k, v]) => `${k}=${v}`)
          .join(","),
        SPACE_NODE_HEARTBEAT_MS: "1000",
        SPACE_RUNTIME: runtime,
        SPACE_NODE_BRIDGE: `splab${spec.key}`,
        SPACE_NODE_NFT_TABLE: `space_lab_${spec.key}`,
        SPACE_NODE_VETH_PREFIX: `l${spec.key}`,
        SPACE_NODE_CGROUP_PARENT: `space-lab-${run}-${spec.key}`,
        SPACE_NODE_RUNTIME_STATE_DIR: stateDir,
        SPACE_NODE_SLOT_CIDR: `10.202.${10 + i}.0/24`,
        SPACE_NODE_MAX_SLOTS: String(o.maxSlots ?? 40),
        SPACE_NODE_BTRFS_IMAGE_GIB: "8",
        SPACE_NODE_DISK_RESERVE_MIB: "1024",
        SPACE_NODE_RELEASE_ON_STOP: "true",
        ...o.nodeEnv,
      };
      const node: LabNode = {
        spec,
        name: env.SPACE_NODE_NAME!,
        ip,
        address: `http://${ip}:${NODE_PORT}`,
        netns,
        stateDir,
        cgroupParent: env.SPACE_NODE_CGROUP_PARENT!,
        env,
        async start() {
          node.proc = runSpace(["node"], env, { netns });
          await node.proc.waitFor("is up at", 180_000);
        },
        containers() {
          return sh(runtime, ["--root", stateDir, "list", "-q"], true).split("\n").filter(Boolean);
        },
      };
      nodes.push(node);
    }
    await Promise.all(nodes.map((n) => n.start()));
  } catch (e) {
    await stop().catch(() => {});
    throw e;
  }

  const admin: Lab["admin"] = async (method, path, body, token = adminToken) => {
    const r = await fetch(`${apis[0]!.url}/admin/api/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await r.text();
    return { status: r.status, body: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
  };
  return {
    run,
    adminToken,
    internalToken,
    hostIp,
    apis,
    controllers,
    nodes,
    api(name) {
      const a = apis.find((x) => x.name === name);
      if (!a) throw new Error(`no lab api ${name}`);
      return a;
    },
    node(key) {
      const n = nodes.find((x) => x.spec.key === key);
      if (!n) throw new Error(`no lab node ${key}`);
      return n;
    },
    admin,
    async cli(args) {
      const child = spawn(process.execPath, [resolve("bin/space.mjs"), ...args, "--api-url", apis[0]!.url], {
        env: { ...baseEnv(), SPACE_ADMIN_TOKEN: adminToken },
        stdio: ["ignore", "pipe", "pipe"],
      });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (b: Buffer) => (stdout += b.toString("utf8")));
      child.stderr.on("data", (b: Buffer) => (stderr += b.toString("utf8")));
      const code = await new Promise<number | null>((r) => child.once("exit", (c) => r(c)));
      return { code, stdout, stderr };
    },
    stop,
  };
}
