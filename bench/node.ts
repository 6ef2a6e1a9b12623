// Node-level benchmark: create-to-envd-ready latency (median, p99 over N) with its breakdown
// (disk snapshot, network slot, bundle, runtime start, envd ready and by which path), the same
// workload run by bare `runc run` of the same rootfs in the same run (baseline: envd's
// readiness polled over HTTP, and by the readiness FIFO as the node does), and idle sandbox memory.
//
//   node --import tsx bench/node.ts [--n 50] [--stub-envd] [--slot-pool N] [--warm-disks N]      (root; after scripts/setup.sh)
//
// --slot-pool sets SPACE_NODE_NETWORK_POOL_TARGET (default 0, as the reference: slots built on claim).
// --warm-disks sets SPACE_NODE_WARM_DISKS (default 2, as the node's: the disk is made ahead; 0 = a
// btrfs snapshot on the create's path).
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { loadConfig } from "../src/core/config.ts";
import { exec } from "../src/core/exec.ts";
import { newExecutionId, newSandboxId } from "../src/core/ids.ts";
import { createLogger } from "../src/core/log.ts";
import { createNodeAgent, REPO_DIR } from "../src/node/agent.ts";
import { BUNDLE, ENVD_MOUNT, envdLaunch, NODE_MOUNT, type EnvdLaunch } from "../src/node/sandboxes/envd-launch.ts";
import { OciRuntime } from "../src/runtime/oci/oci-runtime.ts";
import { httpStatusOf, waitEnvdHealthy } from "../src/node/sandboxes/envd-http-client.ts";
import { READY_FD, ReadyFifo } from "../src/node/sandboxes/envd-ready.ts";
import { cleanupOnSignal, OWNER_PID_FILE, pickSlotRange, removeNodeNetwork } from "../test/support/node-network-cleanup.ts";
import { removeDataDir } from "../test/support/stack.ts";
import { median, percentile } from "./support/stats.ts";

const { values } = parseArgs({ options: { n: { type: "string", default: "50" }, "stub-envd": { type: "boolean", default: false }, "slot-pool": { type: "string", default: "0" }, "warm-disks": { type: "string", default: "2" } } });
const N = Number(values.n);
const envdDir = values["stub-envd"] ? join(REPO_DIR, "test", "node", "fixtures", "envd-stub") : join(REPO_DIR, "dist", "envd");

const stats = (xs: number[]) => {
  return { median: round(median(xs)), p99: round(percentile(xs, 99)), min: round(Math.min(...xs)), max: round(Math.max(...xs)) };
};
const round = (x: number) => Math.round(x * 10) / 10;
const sig = () => AbortSignal.timeout(60_000);

const dir = await mkdtemp(join(tmpdir(), "space-bench-node-"));
const stateDir = join("/run/space-bench", dir.split("/").pop()!);
// Host objects of this run only (bench runs beside each other and tests must not share a bridge).
const tag = createHash("sha256").update(dir).digest("hex").slice(0, 5);
const scope = { bridge: `spb${tag}`, nftTable: `space_b${tag}`, vethPrefix: `b${tag}`, cgroupParent: `space-bench-${tag}` };
const config = loadConfig({}, {
  SPACE_DATA_DIR: dir,
  SPACE_NODE_DIR: join(dir, "node"),
  SPACE_NODE_BTRFS_IMAGE_GIB: "16",
  SPACE_NODE_DISK_RESERVE_MIB: "1024",
  SPACE_INTERNAL_TOKEN: "bench",
  SPACE_NODE_SLOT_CIDR: pickSlotRange(dir, scope.bridge, 18),
  SPACE_NODE_NETWORK_POOL_TARGET: values["slot-pool"],
  SPACE_NODE_WARM_DISKS: values["warm-disks"],
});
const agent = createNodeAgent(config, createLogger("warn", "bench"), {
  envdDir,
  runtimeStateDir: stateDir,
  hostScope: scope,
});
const network = { ...scope, slotsDir: join(dir, "node", "slots") };
await writeFile(join(dir, OWNER_PID_FILE), `${process.pid}\n`);
const cleanup = async () => {
  forget();
  await agent.stop({ unmountCache: true }).catch((e: unknown) => console.error("bench: node stop failed", e));
  removeNodeNetwork(network);
  removeDataDir(dir); // unmounts what is left first, never deleting through a mount
  await rm(stateDir, { recursive: true, force: true });
};
const forget = cleanupOnSignal(() => removeNodeNetwork(network));
await agent.start().catch(async (e: unknown) => {
  await cleanup();
  throw e;
});
const m = agent.manager!;
// The same envd start as the node's (from its startup snapshot when there is one).
const launch = await envdLaunch(envdDir, process.execPath, createLogger("warn", "bench"));
const spec = () => ({ sandboxId: newSandboxId(), executionId: newExecutionId(), template: "base", vcpu: 1, memoryMib: 512, diskMib: 2048, envVars: {}, allowInternetAccess: true });

const loadAtStart = loadavg();
try {
  // ---- node create-to-ready
  for (let i = 0; i < 3; i++) {
    const s = spec();
    await m.create(s, sig());
    await m.kill(s.sandboxId, sig());
  }
  const keys = ["totalMs", "diskMs", "slotMs", "slotWaitMs", "runtimeMs", "bundleMs", "runtimeStartMs", "envdMs"];
  const parts: Record<string, number[]> = { wallMs: [], ...Object.fromEntries(keys.map((k) => [k, []])) };
  const kills: number[] = [];
  const readiness = { event: 0, http: 0 };
  for (let i = 0; i < N; i++) {
    const s = spec();
    const t0 = performance.now();
    const st = await m.create(s, sig());
    parts.wallMs!.push(performance.now() - t0);
    for (const k of keys) parts[k]!.push(st.timings![k] ?? NaN);
    readiness[st.timings!.envdEventMs !== undefined ? "event" : "http"]++;
    const tk = performance.now();
    await m.kill(s.sandboxId, sig());
    kills.push(performance.now() - tk);
  }

  // ---- baseline: bare `runc run` of the same rootfs (template subvolume, read-only),
  // same envd and Node.js binds, runc's default spec (no netns slot, no disk snapshot).
  const base = join(dir, "baseline");
  await mkdir(base, { recursive: true });
  await exec("runc", ["spec", "--bundle", base]);
  const cfg = JSON.parse(await readFile(join(base, "config.json"), "utf8")) as {
    root: { path: string; readonly: boolean };
    process: { args: string[]; terminal: boolean; env: string[] };
    mounts: unknown[];
    linux: { namespaces: { type: string }[] };
  };
  cfg.root = { path: agent.disks!.templatePath("base"), readonly: true };
  cfg.process.terminal = false;
  cfg.mounts.push(
    { destination: NODE_MOUNT, type: "bind", source: process.execPath, options: ["rbind", "ro"] },
    { destination: ENVD_MOUNT, type: "bind", source: envdDir, options: ["rbind", "ro"] },
    { destination: "/tmp", type: "tmpfs", source: "tmpfs", options: ["nosuid", "nodev"] },
  );
  // host network so the host reaches envd without a slot: that is the part the node adds
  cfg.linux.namespaces = cfg.linux.namespaces.filter((n) => n.type !== "network");
  await writeFile(join(base, "config.json"), JSON.stringify(cfg));
  const baseRunc: number[] = [];
  const baseReady: number[] = [];
  // The same run with the readiness FIFO (envd's word instead of the /health poll), as the node boots.
  const baseReadyEvent: number[] = [];
  // With a snapshot, every other baseline run starts envd from the ESM bundle instead: what
  // the snapshot saves, measured in the same run.
  const baseReadyBundle: number[] = [];
  // runc's own `delete -f` of the live container (what a node's kill ran before it ended the tasks itself).
  const baseDelete: number[] = [];
  const launches: EnvdLaunch[] = launch.kind === "snapshot" ? [launch, BUNDLE] : [launch];
  // The same adapter as the node (stdio on files, never pipes), on the plain bundle above.
  const bare = new OciRuntime({ kind: "runc", stateDir: join(stateDir, "baseline"), bundlesDir: join(dir, "baseline-bundles"), logger: createLogger("warn", "bench") });
  // Per round: each launch polled, then the node's launch by the FIFO.
  const variants = [...launches.map((l) => ({ l, event: false })), { l: launch, event: true }];
  for (let i = 0; i < (N + 3) * variants.length; i++) {
    const id = `baseline${i}`;
    const { l, event } = variants[i % variants.length]!;
    const bdir = bare.bundleDir(id);
    await mkdir(bdir, { recursive: true });
    const env = event ? [...cfg.process.env, `SPACE_ENVD_READY_FD=${READY_FD}`] : cfg.process.env;
    await writeFile(join(bdir, "config.json"), JSON.stringify({ ...cfg, process: { ...cfg.process, args: l.argv(49999), env } }));
    await writeFile(join(bdir, "log-path"), join(dir, "baseline.log"));
    const fifo = event ? await ReadyFifo.create(join(dir, "baseline-ready"), id, sig()) : undefined;
    const t0 = performance.now();
    await bare.start(id, sig(), fifo ? { readyFifo: fifo.path } : {});
    const t1 = performance.now();
    if (fifo) {
      const word = await fifo.wait(15_000, sig());
      await fifo.close();
      if (word !== "ready") throw new Error(`bare baseline: envd's readiness word did not come (${word})`);
    } else await waitEnvdHealthy("127.0.0.1", 49999, { deadlineMs: 15_000, signal: sig(), alive: async () => true });
    const t2 = performance.now();
    if (i >= 3 * variants.length) {
      if (event) baseReadyEvent.push(t2 - t0);
      else if (l === launch) {
        baseRunc.push(t1 - t0);
        baseReady.push(t2 - t0);
      } else baseReadyBundle.push(t2 - t0);
    }
    const td = performance.now();
    await exec("runc", ["--root", join(stateDir, "baseline"), "delete", "-f", id], { allowFailure: true });
    if (i >= 3 * variants.length) baseDelete.push(performance.now() - td);
    await bare.delete(id, sig());
    for (let k = 0; k < 100 && (await httpStatusOf("127.0.0.1", 49999, "/health", { timeoutMs: 200 }).catch(() => 0)); k++) await new Promise((r) => setTimeout(r, 10));
  }

  // ---- idle memory of a sandbox (envd + runtime; runc keeps no process once started)
  const idle: string[] = [];
  for (let i = 0; i < 5; i++) {
    const s = spec();
    await m.create(s, sig());
    idle.push(s.sandboxId);
  }
  await new Promise((r) => setTimeout(r, 3000));
  const rss: number[] = [];
  const usage: number[] = [];
  for (const id of idle) {
    const memDir = agent.runtime!.cgroupDirs(id).memory!;
    const stat = await readFile(join(memDir, "memory.stat"), "utf8");
    rss.push(Number(/^total_rss (\d+)/m.exec(stat)![1]) / 1048576);
    usage.push(Number((await readFile(join(memDir, "memory.usage_in_bytes"), "utf8")).trim()) / 1048576);
  }
  for (const id of idle) await m.kill(id, sig());

  const result = {
    machine: { cpus: (await exec("nproc", [])).stdout.trim(), kernel: (await exec("uname", ["-r"])).stdout.trim(), runtime: agent.runtime!.kind, slotPool: config.SPACE_NODE_NETWORK_POOL_TARGET, warmDisks: config.SPACE_NODE_WARM_DISKS, envd: values["stub-envd"] ? "stub" : `dist/envd (${launch.kind})`, loadavg1m: { start: round(loadAtStart[0]!), end: round(loadavg()[0]!) } },
    n: N,
    nodeCreateToReadyMs: stats(parts.totalMs!),
    // Disk and slot run in parallel from the start; the runtime starts once the disk and the
    // slot's netns exist, while the rest of the slot is set up: networkSlot is its full
    // setup time, networkSlotWait what of it was left after the runtime start.
    // runtimeStart = bundle (identity files, template info, readiness FIFO, config.json) + runcRun.
    breakdownMs: {
      diskSnapshot: stats(parts.diskMs!),
      networkSlot: stats(parts.slotMs!),
      runtimeStart: stats(parts.runtimeMs!),
      bundle: stats(parts.bundleMs!),
      runcRun: stats(parts.runtimeStartMs!),
      networkSlotWait: stats(parts.slotWaitMs!),
      envdReady: stats(parts.envdMs!),
    },
    // The node's kill of a running sandbox: its container, network slot, disk, log and record.
    nodeKillMs: stats(kills),
    // How envd's readiness was learnt: its word on the readiness FIFO, or the HTTP check.
    envdReadiness: readiness,
    baselineBareRunc: {
      runcRunMs: stats(baseRunc),
      runcRunToEnvdReadyMs: stats(baseReady),
      runcRunToEnvdReadyEventMs: stats(baseReadyEvent),
      ...(baseReadyBundle.length ? { runcRunToEnvdReadyFromBundleMs: stats(baseReadyBundle) } : {}),
      runcDeleteForceMs: stats(baseDelete),
    },
    idleSandboxMemoryMiB: { rss: stats(rss), cgroupUsageInclPageCache: stats(usage) },
  };
  console.log(JSON.stringify(result, null, 2));
} finally {
  for (const s of m.list()) await m.kill(s.sandboxId, sig()).catch(() => undefined);
  await cleanup();
}
