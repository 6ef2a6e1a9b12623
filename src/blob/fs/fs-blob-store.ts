/**
 * Filesystem blob store: `<root>/<key>`. Writes go to `<root>/.tmp/` and are renamed into
 * place after fsync, so a reader never sees a partial object. Checksums live in a sidecar
 * `<root>/.meta/<key>.json` ({sizeBytes, sha256}) written after the object; when it is
 * missing or stale (size differs) head() recomputes it from the content.
 */
import { createHash, randomBytes } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, open, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { SpaceError } from "../../core/errors.ts";
import { digestMeter } from "../digest-meter.ts";
import { checkBlobKey, checkBlobPrefix, throwIfAborted, type BlobInfo, type BlobKey, type BlobStore } from "../blob-store.ts";

export class FsBlobStore implements BlobStore {
  readonly kind = "fs" as const;
  private readonly tmpDir: string;
  private readonly metaDir: string;

  constructor(private readonly root: string) {
    this.tmpDir = join(root, ".tmp");
    this.metaDir = join(root, ".meta");
  }

  private path(key: BlobKey): string {
    return join(this.root, checkBlobKey(key));
  }
  private metaPath(key: BlobKey): string {
    return join(this.metaDir, `${key}.json`);
  }

  async put(key: BlobKey, body: Readable | Uint8Array, signal?: AbortSignal): Promise<BlobInfo> {
    const dest = this.path(key);
    throwIfAborted(signal);
    await mkdir(this.tmpDir, { recursive: true });
    const tmp = join(this.tmpDir, `${randomBytes(8).toString("hex")}.part`);
    const meter = digestMeter();
    try {
      const src = body instanceof Uint8Array ? Readable.from([Buffer.from(body.buffer, body.byteOffset, body.byteLength)]) : body;
      await pipeline(src, meter.stream, createWriteStream(tmp, { flags: "wx" }), signal ? { signal } : {});
      const fh = await open(tmp, "r");
      try {
        await fh.sync();
      } finally {
        await fh.close();
      }
      await mkdir(dirname(dest), { recursive: true });
      const info: BlobInfo = { key, ...meter.result() };
      await rename(tmp, dest).catch((e: NodeJS.ErrnoException) => {
        if (e.code === "EISDIR" || e.code === "ENOTDIR" || e.code === "ENOTEMPTY") {
          throw new SpaceError("failed_precondition", `blob key ${key} conflicts with an existing prefix`);
        }
        throw e;
      });
      await this.writeMeta(key, info);
      return info;
    } catch (e) {
      await rm(tmp, { force: true });
      if (signal?.aborted) throw new SpaceError("canceled", `put ${key} canceled`, { cause: e });
      throw SpaceError.from(e);
    }
  }

  private async writeMeta(key: BlobKey, info: BlobInfo): Promise<void> {
    const p = this.metaPath(key);
    await mkdir(dirname(p), { recursive: true });
    const tmp = join(this.tmpDir, `${randomBytes(8).toString("hex")}.meta`);
    await writeFile(tmp, JSON.stringify({ sizeBytes: info.sizeBytes, sha256: info.sha256 }));
    await rename(tmp, p);
  }

  async get(key: BlobKey, signal?: AbortSignal): Promise<Readable> {
    const p = this.path(key);
    throwIfAborted(signal);
    try {
      const fh = await open(p, "r");
      const st = await fh.stat();
      if (!st.isFile()) {
        await fh.close();
        throw Object.assign(new Error("not a file"), { code: "ENOENT" });
      }
      return fh.createReadStream(signal ? { signal } : {});
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT" || (e as NodeJS.ErrnoException).code === "EISDIR") {
        throw new SpaceError("not_found", `blob ${key} not found`);
      }
      throw SpaceError.from(e);
    }
  }

  async head(key: BlobKey, signal?: AbortSignal): Promise<BlobInfo | null> {
    const p = this.path(key);
    throwIfAborted(signal);
    const st = await stat(p).catch(() => null);
    if (!st?.isFile()) return null;
    const meta = await readFile(this.metaPath(key), "utf8")
      .then((s) => JSON.parse(s) as { sizeBytes: number; sha256: string })
      .catch(() => null);
    if (meta && meta.sizeBytes === st.size) return { key, sizeBytes: st.size, sha256: meta.sha256 };
    // Sidecar missing or stale (crash between rename and sidecar write): recompute.
    const hash = createHash("sha256");
    await pipeline(createReadStream(p), hash, signal ? { signal } : {});
    const info = { key, sizeBytes: st.size, sha256: hash.digest("hex") };
    await this.writeMeta(key, info).catch(() => {});
    return info;
  }

  async delete(key: BlobKey, signal?: AbortSignal): Promise<void> {
    const p = this.path(key);
    throwIfAborted(signal);
    const st = await stat(p).catch(() => null);
    if (st && !st.isFile()) return; // a prefix, not a blob: nothing to delete
    await rm(p, { force: true });
    await rm(this.metaPath(key), { force: true });
  }

  async list(prefix: string, signal?: AbortSignal): Promise<BlobKey[]> {
    checkBlobPrefix(prefix);
    const out: string[] = [];
    // Only walk the directory the prefix can live in.
    const slash = prefix.lastIndexOf("/");
    const base = slash >= 0 ? prefix.slice(0, slash) : "";
    const walk = async (dir: string, rel: string): Promise<void> => {
      throwIfAborted(signal);
      const entries = await readdir(dir, { withFileTypes: true }).catch((e: NodeJS.ErrnoException) => {
        if (e.code === "ENOENT" || e.code === "ENOTDIR") return [];
        throw e;
      });
      for (const ent of entries) {
        if (ent.name.startsWith(".")) continue;
        const key = rel ? `${rel}/${ent.name}` : ent.name;
        if (ent.isDirectory()) {
          if (prefix.startsWith(`${key}/`) || key.startsWith(prefix) || `${key}/`.startsWith(prefix)) await walk(join(dir, ent.name), key);
        } else if (ent.isFile() && key.startsWith(prefix)) {
          out.push(key);
        }
      }
    };
    await walk(base ? join(this.root, base) : this.root, base);
    return out.sort();
  }

  async close(): Promise<void> {}
}
