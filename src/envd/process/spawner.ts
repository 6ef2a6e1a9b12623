/**
 * How envd starts a command with pipes. With the spawn addon (core/native/spawn.c) the child
 * shares envd's memory until it execs, so a start costs the same whatever envd's heap
 * (libuv forks: ~1.1 ms of envd's CPU at 55 MB, ~5.5 ms at 260 MB, per command). Its
 * exit is learnt from SIGCHLD: libuv waits only for the children it spawned itself.
 * Without the addon, Node's child_process.spawn, with the same semantics.
 */
import { spawn } from "node:child_process";
import { EventEmitter } from "node:events";
import { Socket } from "node:net";
import { constants } from "node:os";
import type { Readable, Writable } from "node:stream";
import { errnoName } from "../../core/errno.ts";
import { loadAddon, type Log } from "../native-addon.ts";

/** What envd uses of a started child; Node's ChildProcess has the same shape. */
export interface PipeChild {
  readonly pid?: number | undefined;
  readonly stdin: Writable | null;
  readonly stdout: Readable | null;
  readonly stderr: Readable | null;
  /** `exit` when it ended; `close` when it ended and its stdout and stderr are closed. */
  on(event: "exit" | "close", cb: (code: number | null, signal: NodeJS.Signals | null) => void): this;
}

export interface SpawnRequest {
  cmd: string;
  args: string[];
  cwd: string;
  env: Record<string, string>;
  uid: number;
  gid: number;
  /** A pipe to the child's stdin; false gives it /dev/null. */
  stdin: boolean;
}

export interface Spawner {
  /** Rejects with an Error naming the command and the errno (`spawn python4 ENOENT`), the errno's name as its `code`. */
  start(req: SpawnRequest): Promise<PipeChild>;
}

type Status = { code: number } | { signal: number } | { error: number };

interface Addon {
  spawn(
    candidates: string[],
    argv: string[],
    envp: string[],
    cwd: string,
    uid: number,
    gid: number,
    stdin: boolean,
  ): { pid: number; stdin?: number; stdout: number; stderr: number } | { error: number };
  wait(pid: number): Status | undefined;
}

const SIGNAL_NAMES = new Map(Object.entries(constants.signals).map(([name, n]) => [n, name as NodeJS.Signals]));

/** Where execvp would look for `cmd`: itself when it has a slash, else each PATH entry (empty = cwd). */
export function execCandidates(cmd: string, env: Record<string, string>): string[] {
  if (cmd.includes("/")) return [cmd];
  return (env.PATH ?? "/usr/bin:/bin").split(":").map((d) => (d === "" ? cmd : `${d.replace(/\/+$/, "")}/${cmd}`));
}

class AddonChild extends EventEmitter implements PipeChild {
  readonly stdin: Socket | null;
  readonly stdout: Socket;
  readonly stderr: Socket;
  #exit: [number | null, NodeJS.Signals | null] | undefined;
  #open = 2;

  constructor(
    readonly pid: number,
    fds: { stdin?: number; stdout: number; stderr: number },
  ) {
    super();
    this.stdin = fds.stdin === undefined ? null : new Socket({ fd: fds.stdin, readable: false, writable: true });
    this.stdout = new Socket({ fd: fds.stdout, readable: true, writable: false });
    this.stderr = new Socket({ fd: fds.stderr, readable: true, writable: false });
    for (const s of [this.stdout, this.stderr]) {
      s.on("error", () => {});
      s.once("close", () => {
        this.#open--;
        this.#maybeClose();
      });
    }
  }

  exited(status: Status): void {
    // `error`: reaped by someone else (ECHILD), its status lost; reported as killed.
    this.#exit = "signal" in status ? [null, SIGNAL_NAMES.get(status.signal) ?? "SIGKILL"] : "code" in status ? [status.code, null] : [null, "SIGKILL"];
    this.emit("exit", ...this.#exit);
    this.#maybeClose();
  }

  #maybeClose(): void {
    if (this.#exit && this.#open === 0) this.emit("close", ...this.#exit);
  }
}

class AddonSpawner implements Spawner {
  readonly #running = new Map<number, AddonChild>();
  /** While children run: keeps the event loop alive (as a ChildProcess does) and waits for them even if a SIGCHLD was missed. */
  #poll: NodeJS.Timeout | undefined;

  constructor(private readonly addon: Addon) {
    process.on("SIGCHLD", () => this.#reap());
  }

  #reap(): void {
    for (const [pid, child] of this.#running) {
      const status = this.addon.wait(pid);
      if (status === undefined) continue;
      this.#running.delete(pid);
      child.exited(status);
    }
    if (this.#running.size === 0 && this.#poll) {
      clearInterval(this.#poll);
      this.#poll = undefined;
    }
  }

  start(req: SpawnRequest): Promise<PipeChild> {
    const envp = Object.entries(req.env).map(([k, v]) => `${k}=${v}`);
    const r = this.addon.spawn(execCandidates(req.cmd, req.env), [req.cmd, ...req.args], envp, req.cwd, req.uid, req.gid, req.stdin);
    if ("error" in r) {
      const code = errnoName(r.error);
      return Promise.reject(Object.assign(new Error(`spawn ${req.cmd} ${code}`), { code }));
    }
    const child = new AddonChild(r.pid, r);
    this.#running.set(r.pid, child);
    this.#poll ??= setInterval(() => this.#reap(), 1000);
    return Promise.resolve(child);
  }
}

export const nodeSpawner: Spawner = {
  async start(req) {
    const cp = spawn(req.cmd, req.args, {
      cwd: req.cwd,
      env: req.env,
      uid: req.uid,
      gid: req.gid,
      // Own process group: signals reach what the command started.
      detached: true,
      stdio: [req.stdin ? "pipe" : "ignore", "pipe", "pipe"],
    });
    if (cp.pid === undefined) throw await new Promise<Error>((resolve) => cp.once("error", resolve));
    cp.on("error", () => {});
    return cp;
  },
};

/** `dir`: the bundle's directory (or src/envd in development, beside dist/envd). */
export function loadSpawner(dir: string, log: Log): Spawner {
  const addon = loadAddon<Addon>(dir, "spawn", log);
  if (!addon) log("no spawn addon: commands start through child_process (slower as envd's heap grows)");
  return addon ? new AddonSpawner(addon) : nodeSpawner;
}
