/**
 * The blob store seam (STYLE.md §2): template rootfs streams, snapshot memory images, disk
 * send-streams. Every backend (fs, S3) passes one conformance suite (test/blob).
 *
 * Keys are relative paths: segments of `[A-Za-z0-9_=+@,:.-]`, separated by `/`, none empty,
 * none starting with `.` (so no `.`/`..` and room for backend bookkeeping), no leading `/`,
 * at most 1024 characters. A bad key is refused with invalid_argument naming it.
 */
import type { Readable } from "node:stream";
import { SpaceError } from "../core/errors.ts";

export type BlobKey = string;

export interface BlobInfo {
  key: BlobKey;
  sizeBytes: number;
  /** Lower-case hex sha256 of the content, computed on put. */
  sha256: string;
}

export interface BlobStore {
  readonly kind: "fs" | "s3";
  /** Streams `body` to `key` (replacing it atomically); returns its size and sha256. */
  put(key: BlobKey, body: Readable | Uint8Array, signal?: AbortSignal): Promise<BlobInfo>;
  /** The content; not_found if absent. */
  get(key: BlobKey, signal?: AbortSignal): Promise<Readable>;
  /** Size and checksum, or null when absent. */
  head(key: BlobKey, signal?: AbortSignal): Promise<BlobInfo | null>;
  /** Absent = ok. */
  delete(key: BlobKey, signal?: AbortSignal): Promise<void>;
  /** Keys starting with `prefix` (a plain string prefix, '' = all), sorted. */
  list(prefix: string, signal?: AbortSignal): Promise<BlobKey[]>;
  /** Releases clients/handles. */
  close(): Promise<void>;
}

const SEGMENT = /^[A-Za-z0-9_=+@,:-][A-Za-z0-9_=+@,:.-]*$/;

/** Returns `key` when valid, else throws invalid_argument naming it. */
export function checkBlobKey(key: string): BlobKey {
  const bad = (why: string) => new SpaceError("invalid_argument", `blob key ${JSON.stringify(key.slice(0, 200))} is invalid: ${why}`, { details: { field: "key" } });
  if (typeof key !== "string" || key.length === 0) throw bad("empty");
  if (key.length > 1024) throw bad("longer than 1024 characters");
  if (key.startsWith("/")) throw bad("absolute (starts with /)");
  for (const seg of key.split("/")) {
    if (seg === "") throw bad("empty path segment");
    if (seg === "." || seg === "..") throw bad(`'${seg}' segment`);
    if (seg.startsWith(".")) throw bad("a segment starts with '.'");
    if (!SEGMENT.test(seg)) throw bad("only A-Z a-z 0-9 _ = + @ , : . - and / are allowed");
  }
  return key;
}

/** Checks a list prefix: '' or a key-like string (may end with '/'). */
export function checkBlobPrefix(prefix: string): string {
  if (prefix === "") return prefix;
  checkBlobKey(prefix.endsWith("/") ? prefix.slice(0, -1) : prefix.replace(/\.+$/, "") || "x");
  return prefix;
}

export function throwIfAborted(signal: AbortSignal | undefined): void {
  if (signal?.aborted) throw new SpaceError("canceled", "blob operation canceled", { cause: signal.reason });
}
