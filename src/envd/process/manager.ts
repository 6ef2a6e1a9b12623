/**
 * Processes started through envd: spawn (pipes or a PTY), fan their output out to
 * subscribers (the Start stream and any Connect streams), and report their end.
 *
 * A process outlives its subscribers: when nobody listens, output is dropped (Connect
 * gives live output from that point, like E2B). When a subscriber reads slowly, its queue
 * grows until HIGH_WATER_BYTES; then the child's output is paused (the kernel pipe fills
 * and the child blocks) until every subscriber is under LOW_WATER_BYTES again. Memory per
 * subscriber is bounded by HIGH_WATER_BYTES plus one read chunk, and nothing is reordered
 * or lost for an attached subscriber.
 */
import { statSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { SpaceError } from "../../core/errors.ts";
import type { User } from "../users.ts";
import { DetachedOutput, EndedProcesses } from "./ended.ts";
import { signalDescription } from "./signals.ts";
import type { PipeChild, Spawner } from "./spawner.ts";

const HIGH_WATER_BYTES = 4 * 1024 * 1024;
const LOW_WATER_BYTES = 1 * 1024 * 1024;
/** After the child exits, stdio still open (a background grandchild holds it) is closed
 * once it has been idle this long, so `end` is not held back forever. */
const EXIT_IDLE_MS = 200;

export type OutputStream = "stdout" | "stderr" | "pty";

export interface EndInfo {
  exitCode: number;
  exited: boolean;
  status: string;
  error: string | undefined;
}

export type ProcEvent =
  { kind: "data"; stream: OutputStream; data: Uint8Array } | { kind: "end"; end: EndInfo } | { kind: "keepalive" };

export interface ProcessConfigInput {
  cmd: string;
  args: string[];
  envs: Record<string, string>;
  cwd: string | undefined;
}

export interface StartOptions {
  config: ProcessConfigInput;
  user: User;
  /** Resolved working directory. */
  cwd: string;
  /** Full environment (defaults already merged). */
  env: Record<string, string>;
  tag: string | undefined;
  stdin: boolean;
  pty: { cols: number; rows: number } | undefined;
  /** Kill the process (SIGKILL) after this long; 0/undefined = never. */
  timeoutMs: number | undefined;
}

/** Minimal view of a node-pty terminal (loaded lazily: native module). */
interface Pty {
  pid: number;
  write(data: string | Buffer): void;
  resize(cols: number, rows: number): void;
  pause(): void;
  resume(): void;
  kill(signal?: string): void;
  onData(cb: (d: string | Buffer) => void): { dispose(): void };
  onExit(cb: (e: { exitCode: number; signal?: number }) => void): { dispose(): void };
}
type PtyModule = {
  spawn(file: string, args: string[], opts: Record<string, unknown>): Pty;
};
let ptyModule: PtyModule | undefined;
/**
 * Resolved from the bundle's directory (its node_modules/node-pty), not from this module:
 * in a startup snapshot `import()` and `require` reach only Node's built-in modules.
 */
function loadPty(dir: string): PtyModule {
  ptyModule ??= createRequire(join(dir, "envd"))("node-pty") as PtyModule;
  return ptyModule;
}

class Subscriber {
  queue: ProcEvent[] = [];
  bytes = 0;
  private wake: (() => void) | undefined;

  constructor(private readonly proc: ManagedProcess) {}

  push(ev: ProcEvent): void {
    this.queue.push(ev);
    if (ev.kind === "data") this.bytes += ev.data.byteLength;
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  /** Live events until `end`; keepalive after `keepaliveMs` of silence; stops on abort. */
  async *events(signal: AbortSignal, keepaliveMs: number): AsyncGenerator<ProcEvent> {
    try {
      for (;;) {
        const ev = this.queue.shift();
        if (ev) {
          if (ev.kind === "data") {
            this.bytes -= ev.data.byteLength;
            if (this.bytes < LOW_WATER_BYTES) this.proc.maybeResume();
          }
          yield ev;
          if (ev.kind === "end") return;
          continue;
        }
        if (signal.aborted) return;
        const r = await new Promise<"item" | "timeout" | "abort">((resolve) => {
          const timer = keepaliveMs > 0 ? setTimeout(() => done("timeout"), keepaliveMs) : undefined;
          const onAbort = () => done("abort");
          const done = (x: "item" | "timeout" | "abort") => {
            if (timer) clearTimeout(timer);
            signal.removeEventListener("abort", onAbort);
            this.wake = undefined;
            resolve(x);
          };
          this.wake = () => done("item");
          signal.addEventListener("abort", onAbort, { once: true });
        });
        if (r === "abort") return;
        if (r === "timeout") yield { kind: "keepalive" };
      }
    } finally {
      this.proc.unsubscribe(this);
    }
  }
}

export class ManagedProcess {
  readonly pid: number;
  readonly tag: string | undefined;
  readonly config: ProcessConfigInput;
  readonly isPty: boolean;
  endInfo: EndInfo | undefined;
  /** Tagged processes: what they wrote while nobody listened (for the ended record). */
  readonly detached: DetachedOutput | undefined;
  private readonly subs = new Set<Subscriber>();
  private paused = false;
  private lastDataMs = Date.now();
  private stdinOpen: boolean;
  private timeout: NodeJS.Timeout | undefined;

  constructor(
    private readonly child: { kind: "pipe"; cp: PipeChild } | { kind: "pty"; pty: Pty },
    opts: StartOptions,
    private readonly onEnd: (p: ManagedProcess) => void,
  ) {
    this.pid = child.kind === "pipe" ? child.cp.pid! : child.pty.pid;
    this.tag = opts.tag;
    this.detached = opts.tag !== undefined ? new DetachedOutput() : undefined;
    this.config = opts.config;
    this.isPty = child.kind === "pty";
    this.stdinOpen = child.kind === "pty" || opts.stdin;
    if (opts.timeoutMs && opts.timeoutMs > 0) {
      this.timeout = setTimeout(() => this.signal("SIGKILL"), opts.timeoutMs);
      this.timeout.unref();
    }
    if (child.kind === "pipe") this.wirePipe(child.cp);
    else this.wirePty(child.pty);
  }

  private wirePipe(cp: PipeChild): void {
    cp.stdin?.on("error", () => {});
    const onData = (stream: OutputStream) => (chunk: Buffer) => this.emitData(stream, chunk);
    cp.stdout?.on("data", onData("stdout"));
    cp.stderr?.on("data", onData("stderr"));
    let exit: EndInfo | undefined;
    let idleTimer: NodeJS.Timeout | undefined;
    cp.on("exit", (code, sig) => {
      exit = toEndInfo(code, sig);
      // A background grandchild may keep stdout open: stop waiting once it is idle.
      idleTimer = setInterval(() => {
        if (!this.paused && Date.now() - this.lastDataMs >= EXIT_IDLE_MS) {
          cp.stdout?.destroy();
          cp.stderr?.destroy();
        }
      }, EXIT_IDLE_MS);
    });
    cp.on("close", (code, sig) => {
      if (idleTimer) clearInterval(idleTimer);
      this.finish(exit ?? toEndInfo(code, sig));
    });
  }

  private wirePty(pty: Pty): void {
    pty.onData((d) => this.emitData("pty", typeof d === "string" ? Buffer.from(d, "utf8") : d));
    pty.onExit(({ exitCode, signal }) => {
      const end = signal ? toEndInfo(null, signal) : toEndInfo(exitCode, null);
      // Let the last output drain before `end` (keeps order).
      const check = setInterval(() => {
        if (!this.paused && Date.now() - this.lastDataMs >= 20) {
          clearInterval(check);
          this.finish(end);
        }
      }, 20);
    });
  }

  private emitData(stream: OutputStream, data: Buffer): void {
    this.lastDataMs = Date.now();
    if (this.subs.size === 0) {
      this.detached?.push(stream, data);
      return;
    }
    const ev: ProcEvent = { kind: "data", stream, data };
    let over = false;
    for (const s of this.subs) {
      s.push(ev);
      if (s.bytes > HIGH_WATER_BYTES) over = true;
    }
    if (over) this.pause();
  }

  private finish(end: EndInfo): void {
    if (this.endInfo) return;
    this.endInfo = end;
    if (this.timeout) clearTimeout(this.timeout);
    for (const s of this.subs) s.push({ kind: "end", end });
    this.onEnd(this);
  }

  private pause(): void {
    if (this.paused) return;
    this.paused = true;
    if (this.child.kind === "pipe") {
      this.child.cp.stdout?.pause();
      this.child.cp.stderr?.pause();
    } else this.child.pty.pause();
  }

  /** Resumes output once every subscriber is under the low-water mark. */
  maybeResume(): void {
    if (!this.paused) return;
    for (const s of this.subs) if (s.bytes >= LOW_WATER_BYTES) return;
    this.paused = false;
    this.lastDataMs = Date.now();
    if (this.child.kind === "pipe") {
      this.child.cp.stdout?.resume();
      this.child.cp.stderr?.resume();
    } else this.child.pty.resume();
  }

  subscribe(): Subscriber {
    const s = new Subscriber(this);
    this.subs.add(s);
    return s;
  }

  unsubscribe(s: Subscriber): void {
    this.subs.delete(s);
    this.maybeResume();
  }

  sendInput(data: Uint8Array, target: "stdin" | "pty"): void {
    if (this.child.kind === "pty") {
      this.child.pty.write(Buffer.from(data));
      return;
    }
    if (target === "pty") throw new SpaceError("invalid_argument", `process ${this.pid} has no pty`);
    if (!this.stdinOpen || !this.child.cp.stdin) {
      throw new SpaceError("failed_precondition", `stdin of process ${this.pid} is not open`);
    }
    this.child.cp.stdin.write(Buffer.from(data));
  }

  closeStdin(): void {
    if (this.child.kind === "pty") {
      // EOF on a terminal is ^D.
      this.child.pty.write("\x04");
      return;
    }
    this.stdinOpen = false;
    this.child.cp.stdin?.end();
  }

  resize(cols: number, rows: number): void {
    if (this.child.kind !== "pty") throw new SpaceError("invalid_argument", `process ${this.pid} has no pty`);
    if (cols < 1 || rows < 1) throw new SpaceError("invalid_argument", `invalid pty size ${cols}x${rows}`);
    this.child.pty.resize(cols, rows);
  }

  /** Signals the process group (the command and what it started), then the pid itself. */
  signal(sig: NodeJS.Signals): void {
    if (this.endInfo) return;
    try {
      process.kill(-this.pid, sig);
    } catch {
      try {
        process.kill(this.pid, sig);
      } catch {
        /* already gone */
      }
    }
  }
}

function toEndInfo(code: number | null, sig: NodeJS.Signals | number | null): EndInfo {
  if (code !== null && code !== undefined && !sig) {
    const status = `exit status ${code}`;
    return { exitCode: code, exited: true, status, error: code === 0 ? undefined : status };
  }
  const status = `signal: ${signalDescription(sig ?? "SIGKILL")}`;
  return { exitCode: -1, exited: false, status, error: status };
}

export class ProcessManager {
  private readonly byPid = new Map<number, ManagedProcess>();
  /** How recent tagged processes ended (SPACE-only; E2B's List/Connect never see it). */
  readonly ended = new EndedProcesses();
  /** Called after any process ends (startEnvd() hooks the zombie reaper here). */
  onExit: (() => void) | undefined;
  /** Called with each started process as it ends (startEnvd() logs it). */
  onEnd: ((p: ManagedProcess, end: EndInfo) => void) | undefined;

  /** `dir`: where node-pty is resolved from (the bundle's directory). */
  constructor(
    private readonly dir: string,
    private readonly spawner: Spawner,
  ) {}

  has(pid: number): boolean {
    return this.byPid.has(pid);
  }

  list(): ManagedProcess[] {
    return [...this.byPid.values()];
  }

  /** By pid or tag; `not_found` naming the selector otherwise. */
  get(sel: { pid?: number; tag?: string }): ManagedProcess {
    if (sel.pid !== undefined) {
      const p = this.byPid.get(sel.pid);
      if (p) return p;
      throw new SpaceError("not_found", `process with pid ${sel.pid} not found`);
    }
    if (sel.tag !== undefined) {
      for (const p of this.byPid.values()) if (p.tag === sel.tag) return p;
      throw new SpaceError("not_found", `process with tag ${sel.tag} not found`);
    }
    throw new SpaceError("invalid_argument", "process selector needs a pid or a tag");
  }

  /** Spawns and registers; the returned process has `subscriber` attached before any output. */
  async start(opts: StartOptions): Promise<{ proc: ManagedProcess; sub: Subscriber }> {
    checkArgv(opts);
    checkCwd(opts.cwd);
    const onEnd = (p: ManagedProcess) => {
      this.byPid.delete(p.pid);
      if (p.tag !== undefined && p.endInfo) this.ended.record(p.tag, p.pid, p.endInfo, p.detached);
      if (p.endInfo) this.onEnd?.(p, p.endInfo);
      this.onExit?.();
    };
    let proc: ManagedProcess;
    if (opts.pty) {
      const pty = loadPty(this.dir);
      let t: Pty;
      try {
        t = pty.spawn(opts.config.cmd, opts.config.args, {
          name: opts.env.TERM ?? "xterm-256color",
          cols: opts.pty.cols || 80,
          rows: opts.pty.rows || 24,
          cwd: opts.cwd,
          env: opts.env,
          uid: opts.user.uid,
          gid: opts.user.gid,
          encoding: null,
        });
      } catch (e: unknown) {
        throw cannotStart(opts.config.cmd, e);
      }
      proc = new ManagedProcess({ kind: "pty", pty: t }, opts, onEnd);
    } else {
      let cp: PipeChild;
      try {
        cp = await this.spawner.start({ cmd: opts.config.cmd, args: opts.config.args, cwd: opts.cwd, env: opts.env, uid: opts.user.uid, gid: opts.user.gid, stdin: opts.stdin });
      } catch (e: unknown) {
        throw cannotStart(opts.config.cmd, e);
      }
      proc = new ManagedProcess({ kind: "pipe", cp }, opts, onEnd);
    }
    // Same tick as the spawn: no output can have been read yet.
    const sub = proc.subscribe();
    this.byPid.set(proc.pid, proc);
    return { proc, sub };
  }

  killAll(sig: NodeJS.Signals): void {
    for (const p of this.byPid.values()) p.signal(sig);
  }
}

/** Why a command did not start, as the caller's error; too long for exec goes on to connect-errors, which names the limit. */
function cannotStart(cmd: string, e: unknown): unknown {
  if ((e as NodeJS.ErrnoException).code === "E2BIG") return e;
  return new SpaceError("invalid_argument", `cannot start ${JSON.stringify(cmd)}: ${(e as Error).message}`);
}

/** exec takes C strings: a NUL byte would cut a value short. */
function checkArgv(opts: StartOptions): void {
  const bad = (what: string) => new SpaceError("invalid_argument", `${what} must not contain NUL bytes`);
  if (opts.config.cmd === "") throw new SpaceError("invalid_argument", "cmd must not be empty");
  if (opts.config.cmd.includes("\0")) throw bad("cmd");
  opts.config.args.forEach((a, i) => {
    if (a.includes("\0")) throw bad(`args[${i}]`);
  });
  for (const [k, v] of Object.entries(opts.env)) if (k.includes("\0") || v.includes("\0")) throw bad(`env ${JSON.stringify(k)}`);
  if (opts.cwd.includes("\0")) throw bad("cwd");
}

function checkCwd(cwd: string): void {
  let st;
  try {
    st = statSync(cwd);
  } catch {
    throw new SpaceError("invalid_argument", `cwd ${JSON.stringify(cwd)} does not exist`);
  }
  if (!st.isDirectory()) throw new SpaceError("invalid_argument", `cwd ${JSON.stringify(cwd)} is not a directory`);
}

export type { Subscriber };
