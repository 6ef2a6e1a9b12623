/**
 * Subvolumes to and from the blob store, shared by snapshots and template distribution:
 * `btrfs send` → encrypt (when a data key is given) → blob, and back: blob → a local file
 * whose sha256 and size must match what was recorded → decrypt → `btrfs receive`. The
 * stream's blob key is its AAD, so a stream cannot be swapped for another under one key.
 * Other process output and files (a CRIU image as tar) travel the same way (`putOutput`,
 * `putFile`, `openSealed`).
 */
import { createReadStream, createWriteStream } from "node:fs";
import type { Readable } from "node:stream";
import { finished, pipeline } from "node:stream/promises";
import type { BlobStore } from "../../blob/blob-store.ts";
import { digestMeter } from "../../blob/digest-meter.ts";
import { decryptStream, encryptStream } from "../../core/envelope.ts";
import { SpaceError } from "../../core/errors.ts";
import * as btrfs from "./btrfs.ts";
import type { SpawnedStream } from "./pipes.ts";

/** A recorded blob: its key, size and sha256 of the stored bytes. */
export interface BlobPart {
  key: string;
  sizeBytes: number;
  sha256: string;
}

/** A command's output stored at `key`, encrypted under `dataKey` when given. */
export async function putOutput(blob: BlobStore, key: string, src: SpawnedStream, dataKey: Buffer | undefined, signal: AbortSignal): Promise<BlobPart> {
  const body = dataKey ? src.stdout.pipe(encryptStream(dataKey, key)) : src.stdout;
  // A failed or aborted put answers only once the producer has exited (nothing reads it any
  // more, so it is ended): the caller may then free what it was reading.
  const [info, done] = await Promise.allSettled([
    blob.put(key, body as Readable, signal).catch((e: unknown) => {
      src.kill();
      throw e;
    }),
    src.done,
  ]);
  if (info.status === "rejected") throw info.reason;
  if (done.status === "rejected") throw done.reason;
  return { key, sizeBytes: info.value.sizeBytes, sha256: info.value.sha256 };
}

/** A file stored at `key`, encrypted under `dataKey` when given. */
export function putFile(blob: BlobStore, key: string, file: string, dataKey: Buffer | undefined, signal: AbortSignal): Promise<BlobPart> {
  const stdout = createReadStream(file);
  return putOutput(blob, key, { stdout, done: finished(stdout), kill: () => stdout.destroy() }, dataKey, signal);
}

/** `btrfs send` of the read-only subvolume `path` (against `parent` when given) stored at `key`. */
export function putSubvolume(blob: BlobStore, key: string, path: string, o: { parent?: string; dataKey?: Buffer }, signal: AbortSignal): Promise<BlobPart> {
  return putOutput(blob, key, btrfs.send(path, { parent: o.parent }, signal), o.dataKey, signal);
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

/** The plaintext of a downloaded part: a failed tag fails the stream, so a consumer never finishes on it. */
export function openSealed(file: string, key: string, dataKey: Buffer | undefined): NodeJS.ReadableStream {
  const r = createReadStream(file);
  return dataKey ? r.pipe(decryptStream(dataKey, key)) : r;
}

/** Receives the downloaded send stream `file` (stored at `key`) into `dir`. */
export function receiveSubvolume(file: string, key: string, dataKey: Buffer | undefined, dir: string, signal: AbortSignal): Promise<void> {
  return btrfs.receive(openSealed(file, key, dataKey), dir, signal);
}

/** Downloads `part` to `file` (checked) and receives it into `dir`. */
export async function fetchSubvolume(blob: BlobStore, part: BlobPart, file: string, dir: string, dataKey: Buffer | undefined, signal: AbortSignal, what?: string): Promise<void> {
  await downloadVerified(blob, part, file, signal, what);
  await receiveSubvolume(file, part.key, dataKey, dir, signal);
}
