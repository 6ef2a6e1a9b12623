/**
 * Memory checkpoints of OCI containers: `runc --criu <criu 4.1+> checkpoint|restore`
 * (reference/machine.md: Debian's CRIU 3.17 is broken on kernels >= 6.13; the project
 * builds 4.1.1 into .tools/criu). crun is built without CRIU here: no checkpoints.
 *
 * What the caller supplies on restore: the bundle (config.json whose root is the restored
 * disk and whose network namespace is the new slot's) — CRIU restores processes, memory,
 * the mount/pid/ipc/uts namespaces and open files; runc joins the external netns and
 * re-binds the external bind mounts from config.json.
 *
 * Stdio: the container's init writes to a log file the node keeps. CRIU reopens regular
 * files by path and checks their size, so the checkpoint records the log's size and the
 * restore recreates the file at the same path with that size (`prepareLog`).
 */
import { mkdir, readFile, rename, stat, writeFile } from "node:fs/promises";
import { closeSync, existsSync, ftruncateSync, mkdirSync, openSync } from "node:fs";
import { dirname, join } from "node:path";
import { exec, writeIn } from "../../core/exec.ts";
import { SpaceError } from "../../core/errors.ts";
import { ensureTmpfs } from "../../core/tmpfs.ts";
import type { Runtime } from "../runtime.ts";
import { OciRuntime } from "./oci-runtime.ts";
import { CRIU_CONF_ANNOTATION } from "./spec.ts";

export interface CheckpointMeta {
  /** Host path of the init's stdout/stderr file at dump time and its size then. */
  logPath: string;
  logSize: number;
  /** The bundle config.json at dump time (restore rewrites root, netns, cgroup). */
  config: Record<string, unknown>;
}

export interface Checkpointer {
  /** Dumps `id` into `imageDir` (created). `leaveRunning` keeps it running (fork). */
  checkpoint(id: string, imageDir: string, opts: { leaveRunning: boolean; signal: AbortSignal }): Promise<CheckpointMeta>;
  /** Restores the image as container `id` from the prepared bundle dir (runtime.prepare). */
  restore(id: string, imageDir: string, meta: CheckpointMeta, signal: AbortSignal): Promise<void>;
}

const T = 5 * 60_000;

/**
 * The dump's CRIU options. Established TCP connections come back closed (their peers and,
 * usually, the address are gone: a restored sandbox gets a fresh network slot); listening
 * sockets stay. So the dump need not capture connection state either (`tcp-close`: no TCP
 * repair mode on the source's live connections), and nothing needs CRIU's network lock:
 * without `network-lock skip` CRIU runs iptables-restore in the sandbox's netns to lock and
 * unlock, ~75 ms per dump and ~60 ms per restore measured here. The restore takes the
 * method from the image (putting `network-lock skip` in the restore's RPC config file made
 * CRIU exit mid-restore).
 */
const DUMP_CONFIG = "tcp-close\nnetwork-lock skip\n";

/**
 * The containers' RPC config file (spec.ts CRIU_CONF) on checkpoint and restore. Its options
 * override runc's RPC ones: the cgroup yard must be set here, and the log's level: runc asks
 * for debug (4), 87 KB of log in every sandbox's bundle (1.7 KB at 2); warnings and errors
 * keep what a failed restore's message quotes.
 */
function rpcConfig(yard: string | undefined): string {
  return `tcp-close\nverbosity=2\n${yard ? `cgroup-yard=${yard}\n` : ""}`;
}

/**
 * CRIU mounts every cgroup hierarchy of the task to read and restore its cgroups unless
 * given a yard where they are mounted already (~22 ms of each dump on this cgroup v1 host).
 * On a v1 or hybrid host /sys/fs/cgroup is such a yard when every hierarchy of ours is
 * mounted there under the name CRIU looks for (`unified` for v2, `systemd` for
 * name=systemd, `cpu,cpuacct` as written). A v2-only host has one hierarchy, cheap to mount.
 */
export function cgroupYard(procSelfCgroup: string, mountinfo: string, root = "/sys/fs/cgroup"): string | undefined {
  const hierarchies = procSelfCgroup.split("\n").filter(Boolean).map((l) => l.split(":")[1] ?? "");
  if (!hierarchies.length || hierarchies.every((h) => h === "")) return undefined;
  const mounts = new Set(mountinfo.split("\n").map((l) => l.split(" ")[4] ?? ""));
  return hierarchies.every((h) => mounts.has(join(root, h === "" ? "unified" : h.replace(/^name=/, "")))) ? root : undefined;
}

export function checkpointerFor(runtime: Runtime): Checkpointer | undefined {
  if (!(runtime instanceof OciRuntime) || runtime.kind !== "runc") return undefined;
  const c = runtime.checkpointConfig;
  if (!c.criuPath || !existsSync(c.criuPath)) return undefined;
  return new RuncCheckpointer(runtime, c.criuPath, c.stateDir, c.criuConf);
}

/** Where the project's CRIU build keeps its kernel-feature cache (RUNDIR in scripts/setup/criu.sh). */
export const CRIU_KDAT_DIR = "/run/space/criu";

/**
 * CRIU probes the kernel's features on every run (~40-70 ms of each dump and restore
 * measured here) unless it can keep them in a file on tmpfs (gone at reboot, so never stale).
 * /run is tmpfs on most hosts but not on every one (here it is ext4): the cache's dir gets a
 * small tmpfs of its own then. Best effort: without it CRIU just probes each time.
 */
async function ensureKdatDir(): Promise<void> {
  await ensureTmpfs(CRIU_KDAT_DIR, { name: "space-criu", sizeMib: 1 });
}

class RuncCheckpointer implements Checkpointer {
  private kdat: Promise<void> | undefined;
  private rpc: Promise<string> | undefined;
  private conf: Promise<void> | undefined;

  constructor(
    private readonly rt: OciRuntime,
    private readonly criu: string,
    private readonly stateDir: string,
    private readonly criuConf: string,
  ) {}

  /** runc's arguments for CRIU, once the kernel-feature cache's dir and the containers' CRIU config file are ready. */
  private async base(): Promise<string[]> {
    await Promise.all([(this.kdat ??= ensureKdatDir().catch(() => undefined)), this.writeConf()]);
    return ["--root", this.stateDir, "--criu", this.criu];
  }

  /**
   * The config file every bundle names, written once (again after a failed checkpoint or
   * restore: it may be gone). Renamed into place: a CRIU of a concurrent restore reads it whole.
   */
  private writeConf(): Promise<void> {
    return (this.conf ??= (async () => {
      await mkdir(dirname(this.criuConf), { recursive: true });
      const tmp = `${this.criuConf}.${process.pid}.tmp`;
      await writeFile(tmp, await this.rpcConfig());
      await rename(tmp, this.criuConf);
    })().catch((e: unknown) => {
      this.conf = undefined;
      throw e;
    }));
  }

  private rpcConfig(): Promise<string> {
    const read = (f: string) => readFile(f, "utf8").catch(() => "");
    return (this.rpc ??= Promise.all([read("/proc/self/cgroup"), read("/proc/self/mountinfo")]).then(([c, m]) => rpcConfig(cgroupYard(c, m))));
  }

  async checkpoint(id: string, imageDir: string, opts: { leaveRunning: boolean; signal: AbortSignal }): Promise<CheckpointMeta> {
    const bundle = this.rt.bundleDir(id);
    const config = JSON.parse(await readFile(join(bundle, "config.json"), "utf8")) as Record<string, unknown>;
    const logPath = (await readFile(join(bundle, "log-path"), "utf8").catch(() => "")).trim();
    await mkdir(imageDir, { recursive: true });
    const work = join(imageDir, "..", `${imageDir.split("/").pop()}.work`);
    await mkdir(work, { recursive: true });
    // runc has no flag for DUMP_CONFIG's options: CRIU reads them from CRIU_CONFIG_FILE (runc
    // passes its environment on; `network-lock skip` must not be in the RPC config file, see
    // DUMP_CONFIG). --tcp-established stays as the fallback should the file not be read
    // (slower: connections dumped under a network lock, then closed anyway).
    // A container prepared before its runtime's config file moved beside the bundles names its own.
    const named = (config.annotations as Record<string, string> | undefined)?.[CRIU_CONF_ANNOTATION];
    if (named && named !== this.criuConf) await writeFile(named, await this.rpcConfig());
    const conf = join(work, "criu.conf");
    await writeFile(conf, DUMP_CONFIG);
    const args = [...(await this.base()), "checkpoint", "--image-path", imageDir, "--work-path", work, "--tcp-established", "--file-locks"];
    if (opts.leaveRunning) args.push("--leave-running");
    // CRIU records the log's size; the restore recreates the file at a size (prepareLog). Read
    // just after the dump: the init was frozen through it and, left running, envd logs little.
    const r = await exec("runc", [...args, id], { timeoutMs: T, signal: opts.signal, allowFailure: true, env: { ...process.env, CRIU_CONFIG_FILE: conf } });
    if (r.exitCode !== 0) {
      this.conf = undefined;
      const tail = await readFile(join(work, "dump.log"), "utf8").then((t) => t.split("\n").filter((l) => /Error|error/.test(l)).slice(-6).join("\n"), () => "");
      throw new SpaceError("internal", `runc checkpoint ${id} failed: ${r.stderr.trim().slice(-800)}${tail ? `\n${tail}` : ""}`);
    }
    const logSize = logPath ? (await stat(logPath)).size : 0;
    return { logPath, logSize, config };
  }

  async restore(id: string, imageDir: string, meta: CheckpointMeta, signal: AbortSignal): Promise<void> {
    const bundle = this.rt.bundleDir(id);
    prepareLog(meta);
    // CRIU's log and the init's pid go to the bundle: deleted with the container (a failed
    // restore's log tail is in its error), never left beside an image restored thousands of times.
    const work = bundle;
    // The bundle (runtime.prepare) names the config file (spec.ts criuAnnotation) and the hostname.
    const [config, base] = await Promise.all([readFile(join(bundle, "config.json"), "utf8"), this.base()]);
    const hostname = (JSON.parse(config) as { hostname?: string }).hostname;
    const pidFile = join(work, "init.pid");
    const r = await exec("runc", [...base, "restore", "--detach", "--image-path", imageDir, "--work-path", work, "--bundle", bundle, "--file-locks", "--pid-file", pidFile, id], {
      timeoutMs: T,
      signal,
      allowFailure: true,
      cwd: bundle,
    });
    if (r.exitCode !== 0) {
      this.conf = undefined;
      const tail = await readFile(join(work, "restore.log"), "utf8").then((t) => t.split("\n").filter((l) => /Error|error/.test(l)).slice(-6).join("\n"), () => "");
      throw new SpaceError("internal", `runc restore ${id} failed: ${r.stderr.trim().slice(-800)}${tail ? `\n${tail}` : ""}`);
    }
    // CRIU brings the UTS namespace back as dumped: under a new id (a fork, a template's
    // capture) the kernel's hostname would be the source sandbox's.
    if (hostname && hostname !== meta.config.hostname) {
      const pid = (await readFile(pidFile, "utf8")).trim();
      await writeIn("/proc/sys/kernel/hostname", hostname, { uts: `/proc/${pid}/ns/uts` }, { timeoutMs: 30_000, signal });
    }
  }
}

/**
 * CRIU reopens the init's log by its dump-time path and refuses a size mismatch. The log
 * is recreated at that path with the recorded size (its content before the checkpoint is
 * not needed; the restored init appends after it). When the restoring node keeps its
 * logs elsewhere, the dump-time path is still used: it is the sandbox's own file name.
 */
export function prepareLog(meta: CheckpointMeta): void {
  if (!meta.logPath || meta.logPath.startsWith("/dev/")) return;
  // Synchronous: four calls on a local file's metadata, tens of microseconds, where the
  // thread pool's round trips cost the node's loop ~0.5 ms under a burst of restores.
  mkdirSync(dirname(meta.logPath), { recursive: true });
  const fd = openSync(meta.logPath, "a");
  try {
    ftruncateSync(fd, meta.logSize);
  } finally {
    closeSync(fd);
  }
}

export async function writeMeta(dir: string, meta: CheckpointMeta): Promise<void> {
  await writeFile(join(dir, "space-checkpoint.json"), JSON.stringify(meta));
}
export async function readMeta(dir: string): Promise<CheckpointMeta> {
  return JSON.parse(await readFile(join(dir, "space-checkpoint.json"), "utf8")) as CheckpointMeta;
}
