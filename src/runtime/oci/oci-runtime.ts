/**
 * OCI runtime adapter: runc (default; checkpoints through CRIU) or crun. Every container
 * is named after its sandbox id, lives under one `--root` state dir, and has its cgroup
 * at `space/<id>` so a startup sweep can reclaim orphans.
 */
import { mkdir, readFile, rm, rmdir, writeFile } from "node:fs/promises";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { exec, ExecError } from "../../core/exec.ts";
import { internal, notFound, SpaceError, unavailable } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import type { Runtime, RunSpec, RuntimeState, RuntimeStatus, StartOptions } from "../runtime.ts";
import { freeze, thaw } from "./freezer.ts";
import { buildOciSpec, CRIU_CONF_ANNOTATION, criuAnnotation, sandboxCapabilities } from "./spec.ts";

export interface OciRuntimeOptions {
  kind: "runc" | "crun";
  /** Runtime state dir (`--root`); on tmpfs, because containers never survive a reboot. */
  stateDir: string;
  /** Where bundles (config.json, logs) live: `<bundlesDir>/<id>`. */
  bundlesDir: string;
  /** Parent cgroup of every sandbox (v1: under each controller). */
  cgroupParent?: string;
  /** CRIU binary for checkpoints (runc only). */
  criuPath?: string;
  logger: Logger;
}

const CMD_TIMEOUT_MS = 30_000;
/** How long a killed container's tasks get to leave its cgroup before `delete -f` takes over, and the poll's step. */
const KILL_WAIT_MS = 2_000;
const TASKS_POLL_MS = 2;

export class OciRuntime implements Runtime {
  readonly kind: "runc" | "crun";
  private readonly o: OciRuntimeOptions;
  private readonly cgroupParent: string;
  private versionCache: string | undefined;
  /** What `prepare` wrote to each bundle's log-path, so `start` need not read it back. */
  private readonly logPaths = new Map<string, string>();
  /** The state dir, made once (again after a failure). */
  private stateDirMade: Promise<void> | undefined;

  constructor(o: OciRuntimeOptions) {
    this.o = o;
    this.kind = o.kind;
    this.cgroupParent = o.cgroupParent ?? "space";
  }

  private bin(): string {
    return this.kind;
  }
  private base(): string[] {
    return ["--root", this.o.stateDir];
  }
  bundleDir(id: string): string {
    return join(this.o.bundlesDir, id);
  }
  /** For runtime/oci/checkpoint.ts (runc --criu; the CRIU config file every bundle names). */
  get checkpointConfig(): { stateDir: string; criuPath?: string; criuConf: string } {
    return { stateDir: this.o.stateDir, criuPath: this.o.criuPath, criuConf: criuAnnotation(this.o.bundlesDir)[CRIU_CONF_ANNOTATION]! };
  }

  async version(signal: AbortSignal): Promise<string> {
    if (!this.versionCache) {
      const r = await exec(this.bin(), ["--version"], { timeoutMs: 10_000, signal });
      this.versionCache = r.stdout.split("\n")[0]!.replace(/^\S+ version /, "").trim();
    }
    return this.versionCache;
  }

  async prepare(spec: RunSpec, _signal: AbortSignal): Promise<string> {
    const dir = this.bundleDir(spec.id);
    await mkdir(dir, { recursive: true });
    const config = buildOciSpec(spec, { cgroupsPath: `${this.cgroupParent}/${spec.id}` });
    config.annotations = { ...(config.annotations as Record<string, string> | undefined), ...criuAnnotation(this.o.bundlesDir) };
    await writeFile(join(dir, "config.json"), JSON.stringify(config));
    await writeFile(join(dir, "log-path"), spec.logPath);
    this.logPaths.set(spec.id, spec.logPath);
    return dir;
  }

  private makeStateDir(): Promise<void> {
    this.stateDirMade ??= mkdir(this.o.stateDir, { recursive: true }).then(
      () => undefined,
      (e: unknown) => {
        this.stateDirMade = undefined;
        throw e;
      },
    );
    return this.stateDirMade;
  }

  async start(id: string, signal: AbortSignal, opts: StartOptions = {}): Promise<void> {
    const dir = this.bundleDir(id);
    const logPath = this.logPaths.get(id) ?? (await readFile(join(dir, "log-path"), "utf8").catch(() => join(dir, "init.log"))).trim();
    await this.makeStateDir();
    // `run -d` hands its own stdio to the container's init: give it /dev/null and a log file
    // the node keeps (never pipes, which would tie the init's lifetime to ours, and never
    // deleted files, which CRIU cannot dump). `--preserve-fds 1`: the readiness FIFO's
    // write end becomes the init's fd 3 (runc closes every other fd above stdio).
    const ready = opts.readyFifo ? ["--preserve-fds", "1"] : [];
    const r = await exec(this.bin(), [...this.base(), "run", "-d", ...ready, "--bundle", dir, id], {
      stdioPaths: ["/dev/null", logPath, logPath],
      ...(opts.readyFifo ? { passFdPaths: [opts.readyFifo] } : {}),
      cwd: dir,
      timeoutMs: CMD_TIMEOUT_MS,
      signal,
      allowFailure: true,
    }).catch((e: unknown) => {
      if (e instanceof ExecError && e.result.timedOut) throw unavailable(`runtime start timed out after ${CMD_TIMEOUT_MS} ms`);
      throw internal(`cannot start the runtime: ${e instanceof Error ? e.message : String(e)}`, e);
    });
    if (r.exitCode !== 0) {
      const tail = (await readFile(logPath, "utf8").catch(() => "")).slice(-2000);
      throw internal(`${this.kind} run ${id} exited ${r.signal ?? r.exitCode}: ${tail.trim()}`);
    }
  }

  /** The freezer directly when it is a cgroup v1 one (freezer.ts); runc otherwise (cgroup v2, or no such container: runc names the error). */
  async pause(id: string, signal: AbortSignal): Promise<void> {
    const dir = this.freezerDir(id);
    if (dir) await freeze(dir, signal);
    else await this.run(["pause", id], signal, id);
  }
  async resume(id: string, signal: AbortSignal): Promise<void> {
    const dir = this.freezerDir(id);
    if (dir) thaw(dir);
    else await this.run(["resume", id], signal, id);
  }
  private freezerDir(id: string): string | undefined {
    const dir = this.cgroupDirs(id).freezer;
    return dir && existsSync(join(dir, "freezer.state")) ? dir : undefined;
  }

  async stop(id: string, graceMs: number, signal: AbortSignal): Promise<void> {
    const st = await this.state(id, signal);
    if (!st) return;
    if (st.status === "paused") await this.resume(id, signal).catch(() => undefined);
    if (st.status === "running" || st.status === "paused") {
      await exec(this.bin(), [...this.base(), "kill", id, "TERM"], { timeoutMs: CMD_TIMEOUT_MS, signal, allowFailure: true });
      await this.tasksEnded(id, graceMs);
    }
    await this.endTasks(id, signal);
    await exec(this.bin(), [...this.base(), "delete", "-f", id], { timeoutMs: CMD_TIMEOUT_MS, signal, allowFailure: true });
  }

  async delete(id: string, signal: AbortSignal): Promise<void> {
    // No state dir, no container: the runtime would only say so (a process, ~7 ms, on the
    // release a restore after a suspend waits for; a checkpoint already destroyed the container).
    const live = existsSync(join(this.o.stateDir, id));
    if (live) await this.endTasks(id, signal);
    const r = live
      ? await exec(this.bin(), [...this.base(), "delete", "-f", id], { timeoutMs: CMD_TIMEOUT_MS, signal, allowFailure: true })
      : { exitCode: 0, stderr: "" };
    if (r.exitCode !== 0 && !/does not exist|not found|no such file/i.test(r.stderr)) {
      // A frozen or wedged container: thaw, kill, retry once.
      await this.resume(id, signal).catch(() => undefined);
      await exec(this.bin(), [...this.base(), "kill", "--all", id, "KILL"], { timeoutMs: CMD_TIMEOUT_MS, signal, allowFailure: true });
      const again = await exec(this.bin(), [...this.base(), "delete", "-f", id], { timeoutMs: CMD_TIMEOUT_MS, signal, allowFailure: true });
      if (again.exitCode !== 0 && !/does not exist|not found/i.test(again.stderr)) throw internal(`${this.kind} delete ${id}: ${again.stderr.trim()}`);
    }
    await rm(this.bundleDir(id), { recursive: true, force: true });
    this.logPaths.delete(id);
    await this.removeCgroups(id);
  }

  /**
   * SIGKILL for a live container's tasks, then a wait for its cgroup to empty, so that
   * `delete -f` finds it stopped: on a live one runc (1.1) sends the signal itself and then
   * sleeps 100 ms before it first looks (killContainer), ~150 ms of every kill at the node.
   * One that has not emptied in time is left to `delete -f`, as before.
   */
  private async endTasks(id: string, signal: AbortSignal): Promise<void> {
    if (!this.hasTasks(id)) return;
    // A frozen task takes its SIGKILL only once thawed.
    const freezer = this.freezerDir(id);
    if (freezer) thaw(freezer);
    await exec(this.bin(), [...this.base(), "kill", id, "KILL"], { timeoutMs: CMD_TIMEOUT_MS, signal, allowFailure: true });
    await this.tasksEnded(id, KILL_WAIT_MS);
  }

  /** Waits up to `ms` for the container's cgroup to have no task left (a file read per poll, not a runtime process). */
  private async tasksEnded(id: string, ms: number): Promise<boolean> {
    const deadline = Date.now() + ms;
    while (this.hasTasks(id)) {
      if (Date.now() >= deadline) return false;
      await sleep(TASKS_POLL_MS);
    }
    return true;
  }

  /** Whether the container's cgroup holds a task (false when it has none, or no cgroup). */
  private hasTasks(id: string): boolean {
    const dirs = this.cgroupDirs(id);
    const dir = dirs.pids ?? dirs.memory ?? dirs.unified;
    if (!dir) return false;
    try {
      return readFileSync(join(dir, "cgroup.procs"), "utf8").trim() !== "";
    } catch {
      return false;
    }
  }

  /** runc removes a container's cgroups on delete; a crash between create and delete may leave empty dirs. */
  private async removeCgroups(id: string): Promise<void> {
    for (const dir of Object.values(this.cgroupDirs(id))) {
      await rmdir(dir).catch(() => undefined);
    }
  }

  async state(id: string, signal: AbortSignal): Promise<RuntimeState | null> {
    const r = await exec(this.bin(), [...this.base(), "state", id], { timeoutMs: CMD_TIMEOUT_MS, signal, allowFailure: true });
    if (r.exitCode !== 0) return null;
    const j = JSON.parse(r.stdout) as { id: string; status: string; pid: number };
    return { id: j.id, status: toStatus(j.status), pid: j.pid };
  }

  async list(signal: AbortSignal): Promise<RuntimeState[]> {
    const r = await exec(this.bin(), [...this.base(), "list", "--format", "json"], { timeoutMs: CMD_TIMEOUT_MS, signal, allowFailure: true });
    if (r.exitCode !== 0) return [];
    const arr = (JSON.parse(r.stdout || "null") ?? []) as { id: string; status: string; pid: number }[];
    return arr.map((j) => ({ id: j.id, status: toStatus(j.status), pid: j.pid }));
  }

  /**
   * cgroup v1 dirs of a sandbox. A relative cgroupsPath is resolved by runc against the
   * cgroup of the process that runs it (ours), per controller — so the sandboxes nest
   * under whatever cgroup the node agent itself was placed in (and its limits). crun
   * resolves it against each hierarchy's root: its sandboxes sit beside the agent's cgroup.
   */
  cgroupDirs(id: string): Record<string, string> {
    const rel = `${this.cgroupParent}/${id}`;
    const out: Record<string, string> = {};
    for (const [ctrl, base] of Object.entries(ownCgroups())) out[ctrl] = `/sys/fs/cgroup/${ctrl}${base === "/" || this.kind === "crun" ? "" : base}/${rel}`;
    return out;
  }

  async execIn(
    id: string,
    argv: string[],
    opts: { timeoutMs?: number; user?: string; signal?: AbortSignal } = {},
  ): Promise<{ exitCode: number | null; stdout: string; stderr: string }> {
    const uid = opts.user === "root" || opts.user === undefined ? 0 : 1000;
    // An unprivileged exec gets no capabilities at all (as envd gives a `user` process).
    const caps = uid === 0 ? [...sandboxCapabilities] : [];
    const processJson = {
      terminal: false,
      user: { uid, gid: uid, additionalGids: [] },
      args: argv,
      env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", `HOME=${uid === 0 ? "/root" : "/home/user"}`],
      cwd: uid === 0 ? "/" : "/home/user",
      capabilities: { bounding: [...sandboxCapabilities], effective: caps, permitted: caps, inheritable: [], ambient: [] },
      noNewPrivileges: false,
    };
    const pfile = join(this.bundleDir(id), `exec-${process.pid}-${Math.random().toString(36).slice(2)}.json`);
    await writeFile(pfile, JSON.stringify(processJson));
    try {
      const r = await exec(this.bin(), [...this.base(), "exec", "--process", pfile, id], {
        timeoutMs: opts.timeoutMs ?? 30_000,
        signal: opts.signal,
        allowFailure: true,
      });
      return { exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr };
    } catch (e) {
      if (e instanceof ExecError) return { exitCode: e.result.exitCode, stdout: e.result.stdout, stderr: e.result.stderr + (e.result.timedOut ? "\n(timed out)" : "") };
      throw e;
    } finally {
      await rm(pfile, { force: true });
    }
  }

  private async run(args: string[], signal: AbortSignal, id: string): Promise<void> {
    const r = await exec(this.bin(), [...this.base(), ...args], { timeoutMs: CMD_TIMEOUT_MS, signal, allowFailure: true });
    if (r.exitCode === 0) return;
    if (/does not exist|not found/i.test(r.stderr)) throw notFound(`sandbox ${id} is not running on this node`);
    if (/not (running|paused)|container not running|already paused/i.test(r.stderr)) {
      throw new SpaceError("failed_precondition", `${args[0]} ${id}: ${r.stderr.trim()}`);
    }
    throw unavailable(`${this.kind} ${args[0]} ${id}: ${r.stderr.trim()}`);
  }
}

function toStatus(s: string): RuntimeStatus {
  switch (s) {
    case "creating":
    case "created":
    case "running":
    case "paused":
    case "stopped":
      return s;
    default:
      return "stopped";
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));


let ownCgroupsCache: Record<string, string> | undefined;
/** controller → our cgroup path, from /proc/self/cgroup (v1 hybrid; `unified` for v2). */
export function ownCgroups(): Record<string, string> {
  if (ownCgroupsCache) return ownCgroupsCache;
  const out: Record<string, string> = {};
  let text = "";
  try {
    text = readFileSync("/proc/self/cgroup", "utf8");
  } catch {
    return (ownCgroupsCache = {});
  }
  for (const line of text.split("\n")) {
    const m = /^\d+:([^:]*):(.*)$/.exec(line);
    if (!m) continue;
    const path = m[2]!;
    if (m[1] === "") out.unified = path;
    for (const c of m[1]!.split(",").filter(Boolean)) {
      const name = c.startsWith("name=") ? c.slice(5) : c;
      // Controllers mounted together (cpu,cpuacct) are mounted here as separate dirs too.
      if (existsSync(`/sys/fs/cgroup/${name}`)) out[name] = path;
    }
  }
  return (ownCgroupsCache = out);
}
