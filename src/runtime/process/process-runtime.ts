/**
 * The `process` runtime: the sandbox's init runs as a plain host process. It isolates
 * NOTHING (no namespaces, no cgroups, no seccomp, host filesystem and network); it exists
 * so the platform can be developed without root. It says so loudly when created.
 */
import { constants } from "node:fs";
import { open } from "node:fs/promises";
import type { ChildProcess } from "node:child_process";
import { exec, spawnDaemon } from "../../core/exec.ts";
import { failedPrecondition } from "../runtime-errors.ts";
import type { Logger } from "../../core/log.ts";
import type { Runtime, RunSpec, RuntimeState, StartOptions } from "../runtime.ts";

interface Proc {
  spec: RunSpec;
  child?: ChildProcess;
  status: RuntimeState["status"];
}

export class ProcessRuntime implements Runtime {
  readonly kind = "process" as const;
  private readonly procs = new Map<string, Proc>();

  constructor(logger: Logger) {
    logger.warn(
      "SPACE_RUNTIME=process: sandboxes are plain host processes with NO isolation " +
        "(no namespaces, cgroups, seccomp or network separation). Never run untrusted code with it.",
    );
  }

  async version(): Promise<string> {
    return `process-${process.version}`;
  }

  /** Rewrites sandbox paths (mount destinations) to their host sources. */
  private hostPath(spec: RunSpec, p: string): string {
    for (const m of spec.mounts) {
      if (p === m.destination || p.startsWith(`${m.destination}/`)) return m.source + p.slice(m.destination.length);
    }
    return p;
  }

  async prepare(spec: RunSpec): Promise<string> {
    this.procs.set(spec.id, { spec, status: "created" });
    return spec.rootfs;
  }

  async start(id: string, _signal?: AbortSignal, opts: StartOptions = {}): Promise<void> {
    const p = this.procs.get(id);
    if (!p) throw failedPrecondition(`sandbox ${id} is not prepared`);
    const [cmd, ...args] = p.spec.args.map((a) => this.hostPath(p.spec, a));
    const log = await open(p.spec.logPath, "a");
    // The readiness FIFO's write end as the init's fd 3 (non-blocking: nobody reading fails at once).
    const ready = opts.readyFifo ? await open(opts.readyFifo, constants.O_WRONLY | constants.O_NONBLOCK) : undefined;
    try {
      const child = spawnDaemon(cmd!, args, {
        stdio: ["ignore", log.fd, log.fd, ...(ready ? [ready.fd] : [])],
        env: { ...p.spec.env, PATH: process.env.PATH ?? "/usr/bin:/bin" },
        cwd: p.spec.rootfs,
        detached: true,
      });
      p.child = child;
      p.status = "running";
      child.on("exit", () => {
        p.status = "stopped";
      });
    } finally {
      await log.close();
      await ready?.close();
    }
  }

  async pause(id: string): Promise<void> {
    this.signal(id, "SIGSTOP");
    this.procs.get(id)!.status = "paused";
  }
  async resume(id: string): Promise<void> {
    this.signal(id, "SIGCONT");
    this.procs.get(id)!.status = "running";
  }

  private signal(id: string, sig: NodeJS.Signals): void {
    const p = this.procs.get(id);
    if (!p?.child?.pid || p.status === "stopped") throw failedPrecondition(`sandbox ${id} is not running`);
    process.kill(-p.child.pid, sig);
  }

  async stop(id: string, graceMs: number): Promise<void> {
    const p = this.procs.get(id);
    if (!p?.child?.pid || p.status === "stopped") return;
    const pid = p.child.pid;
    try {
      process.kill(-pid, "SIGCONT");
      process.kill(-pid, "SIGTERM");
    } catch {
      return;
    }
    const deadline = Date.now() + graceMs;
    while ((p.status as string) !== "stopped" && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    try {
      process.kill(-pid, "SIGKILL");
    } catch {
      /* gone */
    }
  }

  async delete(id: string): Promise<void> {
    await this.stop(id, 0);
    this.procs.delete(id);
  }

  async state(id: string): Promise<RuntimeState | null> {
    const p = this.procs.get(id);
    return p ? { id, status: p.status, pid: p.child?.pid ?? 0 } : null;
  }

  async list(): Promise<RuntimeState[]> {
    return [...this.procs.keys()].map((id) => {
      const p = this.procs.get(id)!;
      return { id, status: p.status, pid: p.child?.pid ?? 0 };
    });
  }

  cgroupDirs(): Record<string, string> {
    return {};
  }

  async execIn(id: string, argv: string[], opts: { timeoutMs?: number; signal?: AbortSignal } = {}) {
    const p = this.procs.get(id);
    const r = await exec(argv[0]!, argv.slice(1), { timeoutMs: opts.timeoutMs ?? 30_000, signal: opts.signal, allowFailure: true, cwd: p?.spec.rootfs });
    return { exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr };
  }
}
