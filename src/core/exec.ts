/**
 * The only module that starts system commands (runc, btrfs, ip, nft, criu).
 * argv arrays only, never a shell; every call has a timeout and honours a signal.
 * Commands run through the spawn server (spawn-client.ts): forking this process itself
 * would stall its event loop for as long as copying its page tables takes.
 */
import { spawn, type SpawnOptions } from "node:child_process";
import { closeSync, openSync } from "node:fs";
import { unlink } from "node:fs/promises";
import { applyPriority, BACKGROUND_NICE, isBackground } from "./priority.ts";
import { spawnClient, type CommandNamespaces, type SpawnReply } from "./spawn-client.ts";

export interface ExecOptions {
  timeoutMs?: number;
  signal?: AbortSignal;
  /** Text or bytes for stdin. */
  input?: string | Buffer;
  cwd?: string;
  /** The command's whole environment; absent: this process's (as the spawn server inherited it). */
  env?: NodeJS.ProcessEnv;
  /** Do not throw on a non-zero exit; the caller reads `exitCode`. */
  allowFailure?: boolean;
  /** Keep at most this many bytes of stdout (default 16 MiB). */
  maxStdoutBytes?: number;
  /**
   * stdin, stdout, stderr from/to files (stdin read, the others appended) instead of pipes:
   * for commands that hand their stdio to something outliving them (`runc run -d`).
   */
  stdioPaths?: [string, string, string];
  /**
   * FIFOs the caller already holds open for reading: the command gets their write ends as
   * fds 3, 4, … (opened non-blocking; `runc run --preserve-fds` hands them to the init).
   */
  passFdPaths?: string[];
  /**
   * Run the command in these namespaces, joined before it starts (the spawn server's addon
   * calls setns; nsenter without it): no `nsenter` exec on the hot path.
   */
  namespaces?: CommandNamespaces;
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
  const reply = await spawnClient.run(
    {
      cmd,
      args,
      ...(opts.cwd ? { cwd: opts.cwd } : {}),
      ...(opts.env ? { env: opts.env } : {}),
      ...(opts.input !== undefined ? { input: opts.input } : {}),
      timeoutMs: opts.timeoutMs ?? 60_000,
      maxStdoutBytes: opts.maxStdoutBytes ?? 16 * 1024 * 1024,
      ...(isBackground() ? { nice: BACKGROUND_NICE } : {}),
      ...(opts.stdioPaths ? { stdioPaths: opts.stdioPaths } : {}),
      ...(opts.passFdPaths?.length ? { passFdPaths: opts.passFdPaths } : {}),
      ...(opts.namespaces ? { namespaces: opts.namespaces } : {}),
    },
    opts.signal,
  );
  if ("error" in reply) throw new Error(`${argv.join(" ")}: ${reply.error}`);
  const result: ExecResult = { argv, ...reply };
  if (!result.timedOut && !result.signal && (result.exitCode === 0 || opts.allowFailure)) return result;
  if (opts.allowFailure && !result.timedOut) return result;
  throw new ExecError(result);
}

/**
 * Writes `content` to the file `path` as seen from inside `namespaces`: a sysctl of a
 * network namespace (`/proc/sys/net/...`), a UTS namespace's hostname
 * (`/proc/sys/kernel/hostname`), each belonging to whoever opens it. The spawn server's
 * addon writes it from a child that joined them, no command (`sysctl`, `hostname`) runs.
 */
export async function writeIn(path: string, content: string, namespaces: CommandNamespaces, opts: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<void> {
  succeeded(await spawnClient.run({ write: path, content, namespaces, timeoutMs: opts.timeoutMs ?? 60_000 }, opts.signal), ["write", path]);
}

/**
 * Sends netlink messages (`protocol`: NETLINK_ROUTE, NETLINK_NETFILTER) on a socket made
 * inside `namespaces` by the spawn server's addon, and returns the kernel's replies
 * (node/network/netlink.ts builds and reads them). No dump requests: the replies are read
 * without waiting once the send returns. Needs the addon (`npm run build:envd` builds it).
 */
export async function netlinkIn(
  protocol: number,
  request: Uint8Array,
  namespaces: CommandNamespaces,
  opts: { files?: string[]; timeoutMs?: number; signal?: AbortSignal } = {},
): Promise<Buffer> {
  const files = opts.files?.length ? { files: opts.files } : {};
  const reply = await spawnClient.run({ netlink: Buffer.from(request).toString("base64"), protocol, namespaces, ...files, timeoutMs: opts.timeoutMs ?? 60_000 }, opts.signal);
  succeeded(reply, ["netlink", String(protocol)]);
  return Buffer.from("stdout" in reply ? reply.stdout : "", "base64");
}

/** A reply of the spawn server's own work (no command of the caller's): throws unless it succeeded. */
function succeeded(reply: SpawnReply, argv: string[]): void {
  if ("error" in reply) throw new Error(reply.error);
  if (reply.exitCode !== 0) throw new ExecError({ argv, ...reply });
}

/**
 * A new network namespace bound at `path` (created here; it must not exist), as `ip netns
 * add` makes one under /run/netns (whose mount the caller prepares: `ip netns add` makes it
 * a shared mount point once). The spawn addon's child unshares it, no command runs. Nothing
 * is left at `path` when it fails.
 */
export async function addNetns(path: string, opts: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<void> {
  // Synchronous: one create of an empty file, microseconds, on every slot's path.
  closeSync(openSync(path, "wx", 0));
  try {
    succeeded(await spawnClient.run({ netns: path, timeoutMs: opts.timeoutMs ?? 60_000 }, opts.signal), ["unshare", `--net=${path}`]);
  } catch (e) {
    await unlink(path).catch(() => undefined);
    throw e;
  }
}

/** Starts a long-running child the caller supervises (envd under the process runtime, postgres in tests). */
export function spawnDaemon(cmd: string, args: readonly string[], opts: SpawnOptions = {}) {
  const child = spawn(cmd, args, { stdio: ["ignore", "pipe", "pipe"], ...opts });
  applyPriority(child.pid);
  return child;
}
