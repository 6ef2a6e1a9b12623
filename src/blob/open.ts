/**
 * `SPACE_BLOB_URL` → a BlobStore: `s3://bucket/prefix` (with the SPACE_S3_* variables),
 * `file:///dir` or `/dir`; empty = `<SPACE_DATA_DIR>/blobs`.
 */
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Config } from "../core/config.ts";
import { SpaceError } from "../core/errors.ts";
import type { BlobStore } from "./blob-store.ts";
import { FsBlobStore } from "./fs/fs-blob-store.ts";
import { S3BlobStore } from "./s3/s3-blob-store.ts";

export type BlobConfig = Pick<
  Config,
  | "SPACE_BLOB_URL"
  | "SPACE_DATA_DIR"
  | "SPACE_S3_ENDPOINT"
  | "SPACE_S3_REGION"
  | "SPACE_S3_ACCESS_KEY_ID"
  | "SPACE_S3_SECRET_ACCESS_KEY"
  | "SPACE_S3_FORCE_PATH_STYLE"
>;

export function openBlobStore(c: BlobConfig, opts: { partSizeBytes?: number } = {}): BlobStore {
  const url = c.SPACE_BLOB_URL;
  if (url === "") return new FsBlobStore(join(c.SPACE_DATA_DIR, "blobs"));
  if (url.startsWith("s3://")) {
    const m = /^s3:\/\/([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:\/(.*))?$/.exec(url);
    if (!m) throw new SpaceError("invalid_argument", `SPACE_BLOB_URL=${JSON.stringify(url)} is invalid: expected s3://bucket/prefix with a valid bucket name`);
    return new S3BlobStore({
      bucket: m[1]!,
      prefix: m[2] ?? "",
      region: c.SPACE_S3_REGION,
      endpoint: c.SPACE_S3_ENDPOINT || undefined,
      accessKeyId: c.SPACE_S3_ACCESS_KEY_ID || undefined,
      secretAccessKey: c.SPACE_S3_SECRET_ACCESS_KEY || undefined,
      forcePathStyle: c.SPACE_S3_FORCE_PATH_STYLE,
      partSizeBytes: opts.partSizeBytes,
    });
  }
  if (url.startsWith("file://")) return new FsBlobStore(fileURLToPath(url));
  if (url.startsWith("/")) return new FsBlobStore(url);
  throw new SpaceError("invalid_argument", `SPACE_BLOB_URL=${JSON.stringify(url)} is invalid: expected s3://bucket/prefix, file:///dir or /dir`);
}

export type { BlobStore, BlobInfo, BlobKey } from "./blob-store.ts";
export { FsBlobStore } from "./fs/fs-blob-store.ts";
export { S3BlobStore } from "./s3/s3-blob-store.ts";
