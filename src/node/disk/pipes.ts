/**
 * Byte streams to and from child processes (btrfs send/receive, tar): a child's stdout as
 * a stream, and a stream into a child's stdin, each failing with the command's stderr tail.
 */
import { spawn } from "node:child_process";
import { PassThrough } from "node:stream";
import { pipeline } from "node:stream/promises";
import { SpaceError } from "../../core/errors.ts";

/** A running command's stdout; `done` rejects naming the command and its stderr tail; `kill` ends it when its reader gave up. */
export interface SpawnedStream {
  stdout: NodeJS.ReadableStream;
  done: Promise<void>;
  kill(): void;
}

/** Runs argv; its stdout as a stream. */
export function spawnStream(argv: string[], signal: AbortSignal): SpawnedStream {
  const child = spawn(argv[0]!, argv.slice(1), { stdio: ["ignore", "pipe", "pipe"], signal });
  let err = "";
  child.stderr!.on("data", (b: Buffer) => (err += b.toString()).length > 4000 && (err = err.slice(-4000)));
  const done = new Promise<void>((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code) => (code === 0 ? resolve() : reject(new SpaceError("internal", `${argv.slice(0, 2).join(" ")} exited ${code}: ${err.trim().slice(-800)}`))));
  });
  const out = new PassThrough();
  child.stdout!.pipe(out);
  return { stdout: out, done, kill: () => void child.kill("SIGKILL") };
}

/** Feeds `src` to argv's stdin; rejects (failed_precondition) when the command refuses it. */
export async function pipeInto(src: NodeJS.ReadableStream, argv: string[], signal: AbortSignal): Promise<void> {
  const child = spawn(argv[0]!, argv.slice(1), { stdio: ["pipe", "ignore", "pipe"], signal });
  let err = "";
  child.stderr!.on("data", (b: Buffer) => (err += b.toString()).length > 4000 && (err = err.slice(-4000)));
  const closed = new Promise<number | null>((resolve, reject) => {
    child.on("error", reject);
    child.on("close", resolve);
  });
  try {
    await pipeline(src, child.stdin!);
  } catch (e) {
    // tar stops reading at its end-of-archive blocks and may leave record padding unread:
    // an early close of stdin by a consumer that then exits 0 is success (the bytes were
    // already checked against their recorded sha256 before unpacking).
    const code = await Promise.race([closed.catch(() => -1), new Promise<number>((r) => setTimeout(() => r(-2), 5000))]);
    if (code === 0) return;
    child.kill("SIGKILL");
    await closed.catch(() => undefined);
    throw SpaceError.from(e);
  }
  const code = await closed;
  if (code !== 0) throw new SpaceError("failed_precondition", `${argv.slice(0, 2).join(" ")} refused the stream (exit ${code}): ${err.trim().slice(-800)}`);
}
