/**
 * S3 blob store (`@aws-sdk/client-s3`), for AWS and S3-compatible servers (MinIO, s3rver).
 * Objects live at `<prefix>/<key>`. Small bodies (< one part) are one PutObject carrying the
 * sha256 as user metadata (`x-amz-meta-sha256`). Larger ones are multipart uploads, parts
 * uploaded while reading the stream (bounded memory: partSize × queueSize); their sha256 is
 * known only at the end, so it goes into a sidecar object `<prefix>/.meta/<key>.json`
 * (keys can never start a segment with '.', so sidecars never collide with keys).
 */
import { createHash } from "node:crypto";
import { Readable } from "node:stream";
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  UploadPartCommand,
  type CompletedPart,
} from "@aws-sdk/client-s3";
import { SpaceError } from "../../core/errors.ts";
import { checkBlobKey, checkBlobPrefix, throwIfAborted, type BlobInfo, type BlobKey, type BlobStore } from "../blob-store.ts";

export interface S3BlobStoreOptions {
  bucket: string;
  /** Key prefix inside the bucket ('' = bucket root). */
  prefix?: string;
  endpoint?: string;
  region: string;
  accessKeyId?: string;
  secretAccessKey?: string;
  forcePathStyle?: boolean;
  /** Multipart part size (min 5 MiB, S3's limit). Default 8 MiB. */
  partSizeBytes?: number;
  /** Parts in flight at once. Default 4. */
  queueSize?: number;
  /** Use this client instead of building one. */
  client?: S3Client;
}

const MIN_PART = 5 * 1024 * 1024;
const META = ".meta/";

export class S3BlobStore implements BlobStore {
  readonly kind = "s3" as const;
  readonly client: S3Client;
  private readonly bucket: string;
  private readonly prefix: string;
  private readonly partSize: number;
  private readonly queueSize: number;

  constructor(o: S3BlobStoreOptions) {
    this.bucket = o.bucket;
    this.prefix = o.prefix ? o.prefix.replace(/^\/+|\/+$/g, "") + "/" : "";
    this.partSize = Math.max(MIN_PART, o.partSizeBytes ?? 8 * 1024 * 1024);
    this.queueSize = Math.max(1, o.queueSize ?? 4);
    this.client =
      o.client ??
      new S3Client({
        region: o.region,
        ...(o.endpoint ? { endpoint: o.endpoint } : {}),
        forcePathStyle: o.forcePathStyle ?? false,
        ...(o.accessKeyId ? { credentials: { accessKeyId: o.accessKeyId, secretAccessKey: o.secretAccessKey ?? "" } } : {}),
        // S3-compatible servers often lack the SDK's default flexible checksums; we keep our own sha256.
        requestChecksumCalculation: "WHEN_REQUIRED",
        responseChecksumValidation: "WHEN_REQUIRED",
      });
  }

  private objectKey(key: BlobKey): string {
    return this.prefix + checkBlobKey(key);
  }
  private metaKey(key: BlobKey): string {
    return `${this.prefix}${META}${key}.json`;
  }

  async put(key: BlobKey, body: Readable | Uint8Array, signal?: AbortSignal): Promise<BlobInfo> {
    const objectKey = this.objectKey(key);
    throwIfAborted(signal);
    const hash = createHash("sha256");
    let sizeBytes = 0;
    const source: AsyncIterable<Uint8Array> | Iterable<Uint8Array> = body instanceof Uint8Array ? [body] : body;
    const parts = chunked(source, this.partSize);
    const opt = signal ? { abortSignal: signal } : {};
    try {
      const first = await parts.next();
      const firstBuf = first.done ? Buffer.alloc(0) : first.value;
      hash.update(firstBuf);
      sizeBytes += firstBuf.length;
      const second = first.done ? ({ done: true, value: undefined } as const) : await parts.next();
      if (second.done) {
        const sha256 = hash.digest("hex");
        await this.client.send(
          new PutObjectCommand({ Bucket: this.bucket, Key: objectKey, Body: firstBuf, ContentLength: firstBuf.length, Metadata: { sha256 } }),
          opt,
        );
        // A previous multipart version may have left a sidecar: drop it (the metadata wins anyway).
        await this.client.send(new DeleteObjectsCommand({ Bucket: this.bucket, Delete: { Objects: [{ Key: this.metaKey(key) }], Quiet: true } }), opt).catch(() => {});
        return { key, sizeBytes, sha256 };
      }
      const { UploadId } = await this.client.send(new CreateMultipartUploadCommand({ Bucket: this.bucket, Key: objectKey }), opt);
      if (!UploadId) throw new SpaceError("unavailable", `S3 gave no upload id for ${key}`);
      try {
        const done: CompletedPart[] = [];
        const inflight = new Set<Promise<void>>();
        let partNumber = 0;
        const upload = (buf: Buffer) => {
          const n = ++partNumber;
          const p = this.client
            .send(new UploadPartCommand({ Bucket: this.bucket, Key: objectKey, UploadId, PartNumber: n, Body: buf, ContentLength: buf.length }), opt)
            .then((r) => {
              done.push({ PartNumber: n, ETag: r.ETag });
            })
            .finally(() => inflight.delete(p));
          inflight.add(p);
          // Surface a failure early; the final Promise.all reports it.
          p.catch(() => {});
        };
        upload(firstBuf);
        let next: IteratorResult<Buffer> = second;
        while (!next.done) {
          hash.update(next.value);
          sizeBytes += next.value.length;
          upload(next.value);
          while (inflight.size >= this.queueSize) await Promise.race(inflight);
          next = await parts.next();
        }
        await Promise.all(inflight);
        done.sort((a, b) => (a.PartNumber ?? 0) - (b.PartNumber ?? 0));
        const sha256 = hash.digest("hex");
        await this.client.send(new CompleteMultipartUploadCommand({ Bucket: this.bucket, Key: objectKey, UploadId, MultipartUpload: { Parts: done } }), opt);
        await this.client.send(
          new PutObjectCommand({ Bucket: this.bucket, Key: this.metaKey(key), Body: JSON.stringify({ sizeBytes, sha256 }), ContentType: "application/json" }),
          opt,
        );
        return { key, sizeBytes, sha256 };
      } catch (e) {
        await this.client.send(new AbortMultipartUploadCommand({ Bucket: this.bucket, Key: objectKey, UploadId })).catch(() => {});
        throw e;
      }
    } catch (e) {
      if (signal?.aborted) throw new SpaceError("canceled", `put ${key} canceled`, { cause: e });
      throw toSpaceError(e, key);
    } finally {
      await parts.return(undefined).catch(() => {});
    }
  }

  async get(key: BlobKey, signal?: AbortSignal): Promise<Readable> {
    const objectKey = this.objectKey(key);
    throwIfAborted(signal);
    try {
      const r = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: objectKey }), signal ? { abortSignal: signal } : {});
      if (!r.Body) throw new SpaceError("internal", `S3 returned no body for ${key}`);
      return r.Body as Readable;
    } catch (e) {
      throw toSpaceError(e, key);
    }
  }

  async head(key: BlobKey, signal?: AbortSignal): Promise<BlobInfo | null> {
    const objectKey = this.objectKey(key);
    const opt = signal ? { abortSignal: signal } : {};
    let sizeBytes: number;
    let sha256: string | undefined;
    try {
      const r = await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: objectKey }), opt);
      sizeBytes = r.ContentLength ?? 0;
      sha256 = r.Metadata?.sha256;
    } catch (e) {
      if (isNotFound(e)) return null;
      throw toSpaceError(e, key);
    }
    if (!sha256) {
      try {
        const r = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: this.metaKey(key) }), opt);
        const meta = JSON.parse((await r.Body?.transformToString()) ?? "{}") as { sizeBytes?: number; sha256?: string };
        if (meta.sizeBytes === sizeBytes) sha256 = meta.sha256;
      } catch (e) {
        if (!isNotFound(e)) throw toSpaceError(e, key);
      }
    }
    if (!sha256) {
      // No checksum recorded (object written by another tool): compute it by reading it.
      const h = createHash("sha256");
      for await (const c of await this.get(key, signal)) h.update(c as Buffer);
      sha256 = h.digest("hex");
    }
    return { key, sizeBytes, sha256 };
  }

  async delete(key: BlobKey, signal?: AbortSignal): Promise<void> {
    const objectKey = this.objectKey(key);
    try {
      await this.client.send(
        new DeleteObjectsCommand({ Bucket: this.bucket, Delete: { Objects: [{ Key: objectKey }, { Key: this.metaKey(key) }], Quiet: true } }),
        signal ? { abortSignal: signal } : {},
      );
    } catch (e) {
      if (isNotFound(e)) return;
      throw toSpaceError(e, key);
    }
  }

  async list(prefix: string, signal?: AbortSignal): Promise<BlobKey[]> {
    checkBlobPrefix(prefix);
    const out: string[] = [];
    let token: string | undefined;
    do {
      throwIfAborted(signal);
      const r = await this.client
        .send(new ListObjectsV2Command({ Bucket: this.bucket, Prefix: this.prefix + prefix, ContinuationToken: token }), signal ? { abortSignal: signal } : {})
        .catch((e: unknown) => {
          throw toSpaceError(e, prefix);
        });
      for (const o of r.Contents ?? []) {
        const k = o.Key?.slice(this.prefix.length);
        if (k && !k.startsWith(META)) out.push(k);
      }
      token = r.IsTruncated ? r.NextContinuationToken : undefined;
    } while (token);
    return out.sort();
  }

  async close(): Promise<void> {
    this.client.destroy();
  }
}

/** Re-chunks a byte stream into Buffers of exactly `size` bytes (the last may be shorter). */
async function* chunked(source: AsyncIterable<Uint8Array | string> | Iterable<Uint8Array>, size: number): AsyncGenerator<Buffer, void, undefined> {
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  for await (const c of source) {
    let chunk = typeof c === "string" ? Buffer.from(c) : Buffer.from(c.buffer, c.byteOffset, c.byteLength);
    while (pendingBytes + chunk.length >= size) {
      const take = size - pendingBytes;
      pending.push(chunk.subarray(0, take));
      yield Buffer.concat(pending, size);
      chunk = chunk.subarray(take);
      pending = [];
      pendingBytes = 0;
    }
    if (chunk.length) {
      // Copy: the source may reuse its buffer.
      pending.push(Buffer.from(chunk));
      pendingBytes += chunk.length;
    }
  }
  if (pendingBytes > 0) yield Buffer.concat(pending, pendingBytes);
}

function isNotFound(e: unknown): boolean {
  const x = e as { name?: string; $metadata?: { httpStatusCode?: number } };
  return x?.name === "NoSuchKey" || x?.name === "NotFound" || x?.$metadata?.httpStatusCode === 404;
}

function toSpaceError(e: unknown, key: string): SpaceError {
  if (e instanceof SpaceError) return e;
  if (isNotFound(e)) {
    const name = (e as { name?: string }).name;
    if (name === "NoSuchBucket") return new SpaceError("unavailable", `S3 bucket does not exist (reading ${key})`, { cause: e });
    return new SpaceError("not_found", `blob ${key} not found`);
  }
  const x = e as { name?: string; message?: string; $metadata?: { httpStatusCode?: number } };
  const status = x?.$metadata?.httpStatusCode;
  if (x?.name === "AbortError") return new SpaceError("canceled", `S3 request for ${key} canceled`, { cause: e });
  if (status === 403 || x?.name === "AccessDenied" || x?.name === "InvalidAccessKeyId" || x?.name === "SignatureDoesNotMatch") {
    return new SpaceError("unavailable", `S3 refused access for ${key}: ${x?.name ?? status}`, { cause: e });
  }
  return new SpaceError("unavailable", `S3 request for ${key} failed: ${x?.name ?? "error"} ${x?.message ?? ""}`.trim(), { cause: e });
}
