/**
 * The only module that starts system commands (runc, btrfs, ip, nft, criu).
 * argv arrays only, never a shell; every call has a timeout and honours a signal.
 */
import { spawn, type SpawnOptions } from "node:child_process";
import type { Readable, Writable } from "node:stream";
import { applyPriority } from "./priority.ts";

export interface ExecOptions {
  timeoutMs?: number;
  signal?: AbortSignal;
  /** Text or bytes for stdin. */
  input?: string | Buffer;
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  /** Do not throw on a non-zero exit; the caller reads `exitCode`. */
  allowFailure?: boolean;
  /** Keep at most this many bytes of stdout (default 16 MiB). */
  maxStdoutBytes?: number;
}

export interface ExecResult {
  argv: readonly string[];
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  timedOut: boolean;
  durationMs: number;
  stdout: string;
  stderr: string;
}

const STDERR_TAIL = 2000;

export class ExecError extends Error {
  readonly result: ExecResult;
  constructor(result: ExecResult) {
    const how = result.timedOut
      ? `timed out after ${result.durationMs} ms`
      : result.signal
        ? `killed by ${result.signal}`
        : `exited ${result.exitCode}`;
    const tail = result.stderr.trim().slice(-STDERR_TAIL) || result.stdout.trim().slice(-STDERR_TAIL);
    super(`${result.argv.join(" ")} ${how}${tail ? `: ${tail}` : ""}`);
    this.name = "ExecError";
    this.result = result;
  }
}

export async function exec(cmd: string, args: readonly string[], opts: ExecOptions = {}): Promise<ExecResult> {
  const argv = [cmd, ...args];
  const started = performance.now();
  const timeoutMs = opts.timeoutMs ?? 60_000;
  const maxOut = opts.maxStdoutBytes ?? 16 * 1024 * 1024;
  return new Promise<ExecResult>((resolve, reject) => {
    const spawnOpts: SpawnOptions = { cwd: opts.cwd, env: opts.env ?? process.env, stdio: ["pipe", "pipe", "pipe"] };
    const child = spawn(cmd, args, spawnOpts);
    applyPriority(child.pid);
    const out: Buffer[] = [];
    let outBytes = 0;
    const err: Buffer[] = [];
    let timedOut = false;
    let killTimer: NodeJS.Timeout | undefined;
    const terminate = () => {
      child.kill("SIGTERM");
      killTimer = setTimeout(() => child.kill("SIGKILL"), 2000);
      killTimer.unref();
    };
    const timer = setTimeout(() => {
      timedOut = true;
      terminate();
    }, timeoutMs);
    const onAbort = () => terminate();
    opts.signal?.addEventListener("abort", onAbort, { once: true });
    (child.stdout as Readable).on("data", (b: Buffer) => {
      if (outBytes < maxOut) out.push(b);
      outBytes += b.length;
    });
    (child.stderr as Readable).on("data", (b: Buffer) => {
      err.push(b);
      if (err.length > 64) err.splice(0, err.length - 64);
    });
    const stdin = child.stdin as Writable;
    stdin.on("error", () => undefined);
    if (opts.input !== undefined) stdin.end(opts.input);
    else stdin.end();
    child.on("error", (e) => {
      clearTimeout(timer);
      opts.signal?.removeEventListener("abort", onAbort);
      reject(Object.assign(new Error(`${argv.join(" ")}: ${e.message}`), { cause: e }));
    });
    child.on("close", (code, sig) => {
      clearTimeout(timer);
      if (killTimer) clearTimeout(killTimer);
      opts.signal?.removeEventListener("abort", onAbort);
      const result: ExecResult = {
        argv,
        exitCode: code,
        signal: sig,
        timedOut,
        durationMs: Math.round(performance.now() - started),
        stdout: Buffer.concat(out).toString("utf8"),
        stderr: Buffer.concat(err).toString("utf8"),
      };
      if (!timedOut && !sig && (code === 0 || opts.allowFailure)) resolve(result);
      else if (opts.allowFailure && !timedOut) resolve(result);
      else reject(new ExecError(result));
    });
  });
}

/** Starts a long-running child the caller supervises (envd under the process runtime, postgres in tests). */
export function spawnDaemon(cmd: string, args: readonly string[], opts: SpawnOptions = {}) {
  const child = spawn(cmd, args, { stdio: ["ignore", "pipe", "pipe"], ...opts });
  applyPriority(child.pid);
  return child;
}
