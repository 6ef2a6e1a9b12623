/**
 * Event-driven envd readiness: before the runtime starts a sandbox, the node makes a FIFO
 * in its own directory (never inside the sandbox's filesystem) and holds its read end; the
 * runtime hands the init the write end as fd 3 and nothing else (`runc run
 * --preserve-fds 1`, the process runtime's stdio), and envd writes "ready" there once it
 * listens, then closes it (src/envd/ready-signal.ts). The node learns readiness from one
 * write instead of polling `/health`, and the end of every writer without that word (the
 * init died, or an init that never signals closed it) from the same pipe at once.
 *
 * What the sandbox gets is a write end of a pipe the node reads at most a few bytes
 * from and only ever compares with one word: nothing to read, no path into the node's
 * files. A sandbox restored from a memory checkpoint (CRIU) is already listening and has
 * no such fd: it, and any boot where the FIFO could not be made, is checked over HTTP
 * (envd-http-client.ts `waitEnvdHealthy`), as is an init that keeps the fd without ever
 * signalling (past `graceMs`).
 */
import { constants, openSync } from "node:fs";
import { mkdir, rm } from "node:fs/promises";
import { Socket } from "node:net";
import { join } from "node:path";
import { exec } from "../../core/exec.ts";

/** The word envd writes (src/envd/ready-signal.ts READY_MESSAGE). */
const READY = "ready\n";

/** The fd envd is told to signal on (SPACE_ENVD_READY_FD): the first one above stdio. */
export const READY_FD = 3;

export type ReadyOutcome = "ready" | "closed" | "timeout";

export class ReadyFifo {
  readonly path: string;
  readonly #sock: Socket;
  readonly #outcome: Promise<"ready" | "closed">;

  private constructor(path: string, sock: Socket) {
    this.path = path;
    this.#sock = sock;
    this.#outcome = new Promise((resolve) => {
      let got = "";
      sock.on("data", (b: Buffer) => {
        got += b.subarray(0, READY.length).toString("latin1");
        const word = got.startsWith(READY);
        const other = !READY.startsWith(got.slice(0, READY.length));
        if (word) resolve("ready");
        else if (other) resolve("closed");
        // The word, or anything else: either way nothing more is read.
        if (word || other) sock.destroy();
      });
      sock.on("end", () => resolve("closed"));
      sock.on("close", () => resolve("closed"));
      sock.on("error", () => resolve("closed"));
    });
  }

  /** A fresh FIFO `<dir>/<id>.fifo`, open for reading (non-blocking: no writer needed yet). */
  static async create(dir: string, id: string, signal: AbortSignal): Promise<ReadyFifo> {
    const path = join(dir, `${id}.fifo`);
    await mkdir(dir, { recursive: true, mode: 0o700 });
    await rm(path, { force: true });
    await exec("mkfifo", ["-m", "0600", path], { timeoutMs: 10_000, signal });
    const fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
    return new ReadyFifo(path, new Socket({ fd, readable: true, writable: false }));
  }

  /**
   * "ready" once envd said so; "closed" when every writer is gone without it (or it sent
   * something else); "timeout" after `ms`. Rejects when `signal` aborts.
   */
  wait(ms: number, signal: AbortSignal): Promise<ReadyOutcome> {
    signal.throwIfAborted();
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    return Promise.race([
      this.#outcome,
      new Promise<"timeout">((resolve) => {
        timer = setTimeout(() => resolve("timeout"), ms);
      }),
      new Promise<never>((_, reject) => {
        onAbort = () => reject(signal.reason instanceof Error ? signal.reason : new Error("aborted"));
        signal.addEventListener("abort", onAbort, { once: true });
      }),
    ]).finally(() => {
      clearTimeout(timer);
      if (onAbort) signal.removeEventListener("abort", onAbort);
    });
  }

  /** Stops reading and removes the FIFO (a writer left then gets EPIPE). */
  async close(): Promise<void> {
    this.#sock.destroy();
    await rm(this.path, { force: true });
  }
}
