/**
 * Byte streams between btrfs/tar processes and the blob store, shared by snapshots and
 * template distribution: a child's stdout as a stream, a stream into a child's stdin, and
 * a download that refuses bytes whose sha256 or size differ from what was recorded.
 */
import { createWriteStream } from "node:fs";
import { spawn } from "node:child_process";
import { PassThrough } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { BlobStore } from "../../blob/blob-store.ts";
import { digestMeter } from "../../blob/digest-meter.ts";
import { SpaceError } from "../../core/errors.ts";

/** A recorded blob: its key, size and sha256 of the stored bytes. */
export interface BlobPart {
  key: string;
  sizeBytes: number;
  sha256: string;
}

/** Runs argv; its stdout as a stream, `done` rejects naming the command and its stderr tail. */
export function spawnStream(argv: string[], signal: AbortSignal): { stdout: NodeJS.ReadableStream; done: Promise<void> } {
  const child = spawn(argv[0]!, argv.slice(1), { stdio: ["ignore", "pipe", "pipe"], signal });
  let err = "";
  child.stderr!.on("data", (b: Buffer) => (err += b.toString()).length > 4000 && (err = err.slice(-4000)));
  const done = new Promise<void>((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code) => (code === 0 ? resolve() : reject(new SpaceError("internal", `${argv.slice(0, 2).join(" ")} exited ${code}: ${err.trim().slice(-800)}`))));
  });
  const out = new PassThrough();
  child.stdout!.pipe(out);
  return { stdout: out, done };
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

/** Downloads `part` to `file`, refusing it when its sha256 or size differs from the record. */
export async function downloadVerified(blob: BlobStore, part: BlobPart, file: string, signal: AbortSignal, what = "snapshot part"): Promise<void> {
  const src = await blob.get(part.key, signal);
  const meter = digestMeter();
  await pipeline(src, meter.stream, createWriteStream(file), { signal });
  const { sizeBytes: size, sha256: sha } = meter.result();
  if (sha !== part.sha256 || size !== part.sizeBytes) {
    throw new SpaceError(
      "failed_precondition",
      `${what} ${part.key} fails its checksum (sha256 ${sha.slice(0, 12)}…, ${size} bytes; expected ${part.sha256.slice(0, 12)}…, ${part.sizeBytes} bytes): refusing the corrupted stream`,
      { details: { key: part.key, reason: "checksum_mismatch" } },
    );
  }
}
