/**
 * The caller's side of the spawn server (spawn-server.mjs): one small child process,
 * started on first use, that runs every exec() so a big process never forks itself.
 * A request's reply resolves its promise; if the server dies, its pending requests fail
 * and the next request starts a new one. The server is unref'd while idle, so it never
 * keeps a process alive. It runs in its own process group, so a signal to the caller's
 * group (Ctrl-C) leaves it to serve the caller's shutdown.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";

export interface SpawnRequest {
  cmd: string;
  args: readonly string[];
  cwd?: string;
  /** Absent: the spawn server's own, the caller's environment as it was when the server started. */
  env?: Record<string, string | undefined>;
  input?: string | Buffer;
  timeoutMs: number;
  maxStdoutBytes: number;
  /** nice(1) level for the command. */
  nice?: number;
  /** stdin, stdout, stderr as files (stdin read, the others appended) instead of pipes. */
  stdioPaths?: [string, string, string];
  /** FIFOs (open for reading by the caller) whose write ends the command gets as fds 3, 4, … */
  passFdPaths?: string[];
  /** Namespaces (their files) the command runs in. */
  namespaces?: CommandNamespaces;
}

/** Files of namespaces a command joins before it starts: a netns (`/run/netns/<name>`), a process's UTS (`/proc/<pid>/ns/uts`). */
export interface CommandNamespaces {
  net?: string;
  uts?: string;
}

/** `content` written to the file `write` as seen from inside `namespaces` (no command runs). */
export interface WriteRequest {
  write: string;
  content: string;
  namespaces: CommandNamespaces;
  timeoutMs: number;
}

/** A new network namespace bound at the existing file `netns` (what `ip netns add` makes). */
export interface NetnsRequest {
  netns: string;
  timeoutMs: number;
}

/** Netlink messages (base64) sent from inside `namespaces`; the kernel's replies come back base64 in `stdout`. */
export interface NetlinkRequest {
  netlink: string;
  protocol: number;
  namespaces: CommandNamespaces;
  /** Opened as the descriptors the messages name (node/network/netlink.ts NETLINK_FILES_FD + i). */
  files?: string[];
  timeoutMs: number;
}

export type SpawnReply =
  | { exitCode: number | null; signal: NodeJS.Signals | null; timedOut: boolean; durationMs: number; stdout: string; stderr: string }
  | { error: string };

const SERVER = fileURLToPath(new URL("./spawn-server.mjs", import.meta.url));

interface Pending {
  resolve(r: SpawnReply): void;
  reject(e: Error): void;
}

class SpawnClient {
  #child: ChildProcess | null = null;
  #pending = new Map<number, Pending>();
  #seq = 0;
  #buf = "";

  run(req: SpawnRequest | WriteRequest | NetnsRequest | NetlinkRequest, signal?: AbortSignal): Promise<SpawnReply> {
    const child = this.#server();
    const id = ++this.#seq;
    return new Promise<SpawnReply>((resolve, reject) => {
      const onAbort = () => this.#write(child, { kill: id });
      signal?.addEventListener("abort", onAbort, { once: true });
      const settle = () => {
        signal?.removeEventListener("abort", onAbort);
        this.#pending.delete(id);
        if (this.#pending.size === 0) this.#idle(child, true);
      };
      this.#pending.set(id, {
        resolve: (r) => {
          settle();
          resolve(r);
        },
        reject: (e) => {
          settle();
          reject(e);
        },
      });
      this.#idle(child, false);
      if (!("cmd" in req)) this.#write(child, { id, ...req });
      else {
        const { input, ...rest } = req;
        this.#write(child, {
          id,
          ...rest,
          ...(input === undefined ? {} : Buffer.isBuffer(input) ? { input: input.toString("base64"), inputBase64: true } : { input }),
        });
      }
      if (signal?.aborted) onAbort();
    });
  }

  #server(): ChildProcess {
    if (this.#child) return this.#child;
    // Room for a 16 MiB output serialised to JSON (control bytes escape to six); it stays small
    // otherwise, which is the point: forking it is cheap. Its own process group: a terminal's
    // Ctrl-C (SIGINT to the foreground group) must not take it, or the commands a shutdown
    // runs (runc delete, umount, ip link del), with the caller; it ends when our pipe closes.
    const child = spawn(process.execPath, ["--max-old-space-size=512", SERVER], { stdio: ["pipe", "pipe", "inherit"], detached: true });
    this.#child = child;
    this.#buf = "";
    child.stdout!.setEncoding("utf8");
    // Only the new chunk is searched for line ends: a reply may carry megabytes of output.
    child.stdout!.on("data", (chunk: string) => {
      let start = 0;
      for (let nl = chunk.indexOf("\n"); nl >= 0; nl = chunk.indexOf("\n", start)) {
        const line = this.#buf + chunk.slice(start, nl);
        this.#buf = "";
        start = nl + 1;
        const { id, ...reply } = JSON.parse(line) as { id: number } & SpawnReply;
        this.#pending.get(id)?.resolve(reply);
      }
      this.#buf += chunk.slice(start);
    });
    child.stdin!.on("error", () => undefined);
    const lost = (why: string) => {
      if (this.#child !== child) return;
      this.#child = null;
      const err = new Error(`spawn server ${why}`);
      for (const p of [...this.#pending.values()]) p.reject(err);
    };
    child.on("error", (e) => lost(`failed: ${e.message}`));
    child.on("exit", (code, sig) => lost(`exited (${sig ?? code})`));
    this.#idle(child, true);
    return child;
  }

  #write(child: ChildProcess, msg: unknown): void {
    child.stdin!.write(`${JSON.stringify(msg)}\n`);
  }

  /** Idle: the server must not keep this process alive. */
  #idle(child: ChildProcess, idle: boolean): void {
    const handles = [child, child.stdin, child.stdout] as Array<{ ref(): void; unref(): void } | null>;
    for (const h of handles) {
      if (idle) h?.unref();
      else h?.ref();
    }
  }
}

export const spawnClient = new SpawnClient();
