/**
 * Files a process rewrites whole again and again (a sandbox's record, its copy of envd's
 * log lines), so that a crash mid-save leaves the old content or the new, never a torn file
 * a restart would skip. Content that fits in a page is rewritten in place with one write of
 * at least the old file's length, padded with spaces (JSON allows them at the end): the
 * kernel copies a page whole or not at all, and no file is made or deleted. Larger content,
 * and a file's first save, is written beside it and renamed over it.
 *
 * Why not always rename: on ext4 without a journal (this VM's root, and common on cloud
 * images) each new inode is checked against every inode deleted in the last half minute, so
 * a burst of creates paid more per file the more files the burst before it had replaced
 * (docs/capacity.md).
 */
import { rename, stat, writeFile } from "node:fs/promises";

/** One page: a write at offset 0 up to this size is copied whole or not at all. */
const IN_PLACE_MAX = 4096;

export class WholeFiles {
  /** Each file's length as this process last wrote it (a save in place pads to it). */
  readonly #sizes = new Map<string, number>();

  /** Replaces `path`'s content with `json` (JSON text: it may be padded with trailing spaces). */
  async write(path: string, json: string, mode = 0o600): Promise<void> {
    const data = Buffer.from(json);
    const old = this.#sizes.get(path) ?? (await stat(path).then((st) => st.size, () => 0));
    const size = Math.max(data.length, old);
    if (old > 0 && size <= IN_PLACE_MAX) {
      const padded = Buffer.alloc(size, " ");
      data.copy(padded);
      const written = await writeFile(path, padded, { flag: "r+" }).then(
        () => true,
        (e: NodeJS.ErrnoException) => {
          if (e.code === "ENOENT") return false; // removed behind us: made anew below
          throw e;
        },
      );
      if (written) {
        this.#sizes.set(path, size);
        return;
      }
    }
    await writeFile(`${path}.new`, data, { mode });
    await rename(`${path}.new`, path);
    this.#sizes.set(path, data.length);
  }

  /** The file was removed (by its owner): its length is no longer known. */
  forget(path: string): void {
    this.#sizes.delete(path);
  }
}
