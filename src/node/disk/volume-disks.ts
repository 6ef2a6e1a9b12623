/**
 * Volumes on the node cache: one btrfs subvolume each under `volumes/<id>`, its qgroup
 * limited to the volume's size (a write past it fails with EDQUOT, in a sandbox and through
 * the content API alike). Sandboxes get it as a bind mount; the content API (volume-wire.ts)
 * reads and writes it here with no sandbox running.
 *
 * A sandbox may have written symbolic links into a volume, so every content path is
 * resolved one component at a time from an open directory (`/proc/self/fd/<fd>/<name>`,
 * O_NOFOLLOW|O_DIRECTORY), never by a path string the kernel could follow out of the volume.
 */
import { constants, type ReadStream } from "node:fs";
import { chown, lstat, mkdir, open, readdir, readlink, rename, rm, type FileHandle } from "node:fs/promises";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { SpaceError, invalid, notFound } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import type { NodeVolume, VolumeCreateQuery, VolumeEntry, VolumeMetadata } from "../../contract/volume-wire.ts";
import * as btrfs from "./btrfs.ts";
import { exists, type NodeCache } from "./node-cache.ts";

const ID = /^vol_[a-z0-9]{16}$/;
/** Files made through the content API belong to the sandboxes' default user unless the caller says otherwise. */
export const DEFAULT_OWNER = { uid: 1000, gid: 1000 };

/** Maps a filesystem error of a content call to the taxonomy (`what` names the path). */
function fsError(e: unknown, what: string): SpaceError {
  const code = (e as NodeJS.ErrnoException).code;
  if (e instanceof SpaceError) return e;
  if (code === "ENOENT") return notFound(`path ${what} not found`);
  if (code === "ELOOP") return invalid(`path ${what} goes through a symbolic link`, { field: "path" });
  if (code === "ENOTDIR") return invalid(`path ${what}: a part of it is not a directory`, { field: "path" });
  if (code === "EISDIR") return invalid(`path ${what} is a directory`, { field: "path" });
  if (code === "EEXIST") return new SpaceError("already_exists", `path ${what} already exists`);
  if (code === "ENOTEMPTY") return new SpaceError("failed_precondition", `directory ${what} is not empty`);
  if (code === "EDQUOT" || code === "ENOSPC") return new SpaceError("resource_exhausted", `volume is full writing ${what}`);
  return new SpaceError("internal", `volume content ${what}: ${(e as Error).message}`, { cause: e });
}

/** The components of a volume path (`/a/b`, `a/b`); `..` is refused, `.` and empty parts dropped. */
export function volumePathParts(path: string): string[] {
  if (path.includes("\0")) throw invalid(`path ${JSON.stringify(path)} contains a NUL byte`, { field: "path" });
  const parts = path.split("/").filter((p) => p !== "" && p !== ".");
  if (parts.includes("..")) throw invalid(`path ${JSON.stringify(path)} may not contain '..'`, { field: "path" });
  return parts;
}

const fdPath = (dir: FileHandle, name: string) => `/proc/self/fd/${dir.fd}/${name}`;
const DIR_FLAGS = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW;

export class VolumeDisks {
  readonly #cache: NodeCache;
  readonly #log: Logger;

  constructor(cache: NodeCache, o: { logger: Logger }) {
    this.#cache = cache;
    this.#log = o.logger;
  }

  /** The volume's subvolume on this node (what a sandbox bind-mounts). */
  path(id: string): string {
    if (!ID.test(id)) throw invalid(`volume id ${JSON.stringify(id)} is not valid`, { field: "volumeId" });
    return join(this.#cache.volumesDir, id);
  }

  async has(id: string): Promise<boolean> {
    return exists(this.path(id));
  }

  /** Makes the volume when the node does not have it (its root owned by the default user) and (re)applies its quota. */
  async ensure(id: string, sizeMib: number, signal: AbortSignal): Promise<NodeVolume> {
    const path = this.path(id);
    if (!(await exists(path))) {
      const tmp = join(this.#cache.volumesDir, `.new-${id}`);
      await btrfs.subvolumeDelete(tmp, signal, { kernelDropsQgroup: this.#cache.quotaMode === "simple" });
      await btrfs.subvolumeCreate(tmp, signal);
      await chown(tmp, DEFAULT_OWNER.uid, DEFAULT_OWNER.gid);
      await btrfs.qgroupLimit(tmp, sizeMib, signal);
      await rename(tmp, path);
      this.#log.info({ volumeId: id, sizeMib }, "volume created");
    } else {
      await btrfs.qgroupLimit(path, sizeMib, signal);
    }
    return this.status(id, signal);
  }

  async status(id: string, signal: AbortSignal): Promise<NodeVolume> {
    const path = this.path(id);
    if (!(await exists(path))) throw notFound(`volume ${id} is not on this node`);
    const u = await btrfs.qgroupUsage(path, signal).catch(() => undefined);
    return { volumeId: id, sizeMib: u?.limitBytes ? Math.round(u.limitBytes / 1048576) : 0, usedBytes: u?.referencedBytes ?? 0 };
  }

  /** Absent = ok. */
  async deleteVolume(id: string, signal: AbortSignal): Promise<void> {
    await btrfs.subvolumeDelete(this.path(id), signal, { kernelDropsQgroup: this.#cache.quotaMode === "simple" });
  }

  /** The volumes present (metrics). */
  async listVolumes(): Promise<string[]> {
    return (await readdir(this.#cache.volumesDir).catch(() => [] as string[])).filter((n) => ID.test(n));
  }

  /** A read-only snapshot of the volume (a send source); the caller deletes it. */
  async freeze(id: string, signal: AbortSignal): Promise<string> {
    const frozen = join(this.#cache.volumesDir, `.send-${id}`);
    await btrfs.subvolumeDelete(frozen, signal, { kernelDropsQgroup: this.#cache.quotaMode === "simple" });
    await btrfs.snapshotReadonly(this.path(id), frozen, signal);
    return frozen;
  }

  async dropFrozen(frozen: string, signal: AbortSignal): Promise<void> {
    await btrfs.subvolumeDelete(frozen, signal, { kernelDropsQgroup: this.#cache.quotaMode === "simple" });
  }

  /** Where a received stream lands (`btrfs receive` names the subvolume after its source: `.send-<id>`). */
  get receiveDir(): string {
    return this.#cache.volumesDir;
  }

  /** Turns a received `.send-<id>` into the writable volume `id` with its quota. */
  async adoptReceived(id: string, sizeMib: number, signal: AbortSignal): Promise<NodeVolume> {
    const received = join(this.#cache.volumesDir, `.send-${id}`);
    const path = this.path(id);
    await btrfs.subvolumeDelete(path, signal, { kernelDropsQgroup: this.#cache.quotaMode === "simple" });
    await btrfs.snapshot(received, path, signal);
    await btrfs.subvolumeDelete(received, signal, { kernelDropsQgroup: this.#cache.quotaMode === "simple" });
    await btrfs.qgroupLimit(path, sizeMib, signal);
    return this.status(id, signal);
  }

  // --- the content API ---

  /** Opens the volume's root and walks to the directory holding the last part; calls `fn` with it and the last part's name. */
  async #within<T>(id: string, path: string, fn: (dir: FileHandle, name: string | undefined, shown: string) => Promise<T>, o: { makeParents?: boolean; owner?: { uid: number; gid: number } } = {}): Promise<T> {
    const parts = volumePathParts(path);
    const shown = `/${parts.join("/")}`;
    let dir: FileHandle;
    try {
      dir = await open(this.path(id), DIR_FLAGS);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") throw notFound(`volume ${id} is not on this node`);
      throw e;
    }
    try {
      for (const part of parts.slice(0, -1)) {
        let next: FileHandle;
        try {
          next = await open(fdPath(dir, part), DIR_FLAGS);
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code !== "ENOENT" || !o.makeParents) throw e;
          await mkdir(fdPath(dir, part), { mode: 0o755 });
          if (o.owner) await chown(fdPath(dir, part), o.owner.uid, o.owner.gid);
          next = await open(fdPath(dir, part), DIR_FLAGS);
        }
        await dir.close();
        dir = next;
      }
      return await fn(dir, parts.at(-1), shown);
    } catch (e) {
      throw fsError(e, shown);
    } finally {
      await dir.close().catch(() => undefined);
    }
  }

  async #entry(dir: FileHandle, name: string | undefined, shown: string): Promise<VolumeEntry> {
    const p = name === undefined ? `/proc/self/fd/${dir.fd}` : fdPath(dir, name);
    // The root itself: stat the open directory (the magic link is followed to it, nothing else).
    const st = name === undefined ? await dir.stat() : await lstat(p);
    const type = st.isFile() ? "file" : st.isDirectory() ? "directory" : st.isSymbolicLink() ? "symlink" : "unknown";
    return {
      name: name ?? "",
      path: shown,
      type,
      size: st.size,
      mode: st.mode & 0o7777,
      uid: st.uid,
      gid: st.gid,
      atime: st.atime.toISOString(),
      mtime: st.mtime.toISOString(),
      ctime: st.ctime.toISOString(),
      ...(type === "symlink" ? { target: await readlink(p) } : {}),
    };
  }

  getInfo(id: string, path: string): Promise<VolumeEntry> {
    return this.#within(id, path, (dir, name, shown) => this.#entry(dir, name, shown));
  }

  /** The entries of a directory, `depth` levels down (symbolic links are listed, not followed). */
  listDir(id: string, path: string, depth: number): Promise<VolumeEntry[]> {
    return this.#within(id, path, async (parent, name, shown) => {
      const dir = name === undefined ? parent : await open(fdPath(parent, name), DIR_FLAGS);
      try {
        return await this.#walk(dir, shown === "/" ? "" : shown, depth);
      } finally {
        if (dir !== parent) await dir.close();
      }
    });
  }

  async #walk(dir: FileHandle, prefix: string, depth: number): Promise<VolumeEntry[]> {
    const out: VolumeEntry[] = [];
    for (const name of (await readdir(`/proc/self/fd/${dir.fd}`)).sort()) {
      const e = await this.#entry(dir, name, `${prefix}/${name}`);
      out.push(e);
      if (e.type === "directory" && depth > 1) {
        const sub = await open(fdPath(dir, name), DIR_FLAGS);
        try {
          out.push(...(await this.#walk(sub, `${prefix}/${name}`, depth - 1)));
        } finally {
          await sub.close();
        }
      }
    }
    return out;
  }

  makeDir(id: string, q: VolumeCreateQuery): Promise<VolumeEntry> {
    const owner = { uid: q.uid ?? DEFAULT_OWNER.uid, gid: q.gid ?? DEFAULT_OWNER.gid };
    return this.#within(
      id,
      q.path,
      async (dir, name, shown) => {
        if (name === undefined) throw new SpaceError("already_exists", "path / already exists");
        await mkdir(fdPath(dir, name), { mode: q.mode ?? 0o755 });
        await chown(fdPath(dir, name), owner.uid, owner.gid);
        return this.#entry(dir, name, shown);
      },
      { makeParents: q.force === true, owner },
    );
  }

  /** Writes (creates or replaces) a file from `body`; parents are made when `force`. */
  writeFile(id: string, q: VolumeCreateQuery, body: Readable): Promise<VolumeEntry> {
    const owner = { uid: q.uid ?? DEFAULT_OWNER.uid, gid: q.gid ?? DEFAULT_OWNER.gid };
    return this.#within(
      id,
      q.path,
      async (dir, name, shown) => {
        if (name === undefined) throw invalid("path / is a directory", { field: "path" });
        const f = await open(fdPath(dir, name), constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW, q.mode ?? 0o644);
        try {
          await f.chown(owner.uid, owner.gid);
          if (q.mode !== undefined) await f.chmod(q.mode);
        } catch (e) {
          await f.close();
          throw e;
        }
        // The write stream closes the handle when it ends (a stream that keeps its fd open never reports it finished).
        await pipeline(body, f.createWriteStream());
        return this.#entry(dir, name, shown);
      },
      { makeParents: q.force === true, owner },
    );
  }

  /** The file's bytes (a regular file only: a link or a directory is refused). */
  async readFile(id: string, path: string): Promise<{ stream: ReadStream; size: number }> {
    return this.#within(id, path, async (dir, name) => {
      if (name === undefined) throw invalid("path / is a directory", { field: "path" });
      const f = await open(fdPath(dir, name), constants.O_RDONLY | constants.O_NOFOLLOW);
      const st = await f.stat();
      if (!st.isFile()) {
        await f.close();
        throw invalid(`path /${volumePathParts(path).join("/")} is not a regular file`, { field: "path" });
      }
      return { stream: f.createReadStream(), size: st.size };
    });
  }

  updateMetadata(id: string, path: string, m: VolumeMetadata): Promise<VolumeEntry> {
    return this.#within(id, path, async (parent, name, shown) => {
      // Opened without following, so the change lands on the entry itself (a link is refused: ELOOP).
      const h = name === undefined ? parent : await open(fdPath(parent, name), constants.O_RDONLY | constants.O_NOFOLLOW);
      try {
        if (m.uid !== undefined || m.gid !== undefined) {
          const st = await h.stat();
          await h.chown(m.uid ?? st.uid, m.gid ?? st.gid);
        }
        if (m.mode !== undefined) await h.chmod(m.mode);
      } finally {
        if (h !== parent) await h.close();
      }
      return this.#entry(parent, name, shown);
    });
  }

  /** Removes a file, a link or a directory with what it holds. */
  async removePath(id: string, path: string): Promise<void> {
    await this.#within(id, path, async (dir, name) => {
      if (name === undefined) throw invalid("the volume's root cannot be removed; delete the volume instead", { field: "path" });
      const st = await lstat(fdPath(dir, name));
      // rm does not follow links, and works below the open directory the walk reached.
      await rm(fdPath(dir, name), { recursive: st.isDirectory(), force: false });
    });
  }
}
