/**
 * Reads ahead, into the page cache of a disk made ahead (warm-disks.ts), the files every
 * sandbox reads before its first command answers: the dynamic loader and the libraries of the
 * Node.js that runs envd (mounted from the host, linked against the rootfs's libraries), and
 * `bash -l`'s. A btrfs snapshot's files are inodes of their own, whose pages are not the
 * template's: a fresh disk read them from the device, checksums checked, on the create's path
 * (measured in a fresh snapshot: `node -e 0` ~5 ms slower the first time, `bash -l` ~1–4 ms).
 *
 * Paths are resolved inside the disk and never followed out of it (an absolute symlink is
 * resolved by the host, so it is skipped); only regular files are opened. Best effort: a file
 * the template lacks is skipped, and nothing here fails a disk.
 */
import { open, realpath } from "node:fs/promises";
import { constants } from "node:fs";
import { join } from "node:path";

/** The multiarch directory of this machine's libraries (Debian's layout); sandboxes run this architecture. */
const TRIPLET = process.arch === "arm64" ? "aarch64-linux-gnu" : "x86_64-linux-gnu";
const LOADER = process.arch === "arm64" ? "ld-linux-aarch64.so.1" : "ld-linux-x86-64.so.2";
/** Node.js's DT_NEEDED (`ldd node`) and bash's. */
const LIBRARIES = [LOADER, "libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "libstdc++.so.6", "libgcc_s.so.1", "libtinfo.so.6"];

/** Paths inside a rootfs, relative: both the merged-/usr layout and the older one (the same file once resolved). */
export const HOT_FILES: readonly string[] = [
  "etc/ld.so.cache",
  ...[`usr/lib/${TRIPLET}`, `lib/${TRIPLET}`].flatMap((dir) => LIBRARIES.map((lib) => `${dir}/${lib}`)),
  "usr/bin/bash",
  "bin/bash",
  "etc/profile",
  "etc/bash.bashrc",
  "etc/passwd",
  "etc/group",
];

/** A file this large is not one of the above: not read (a template's odd file costs no time). */
const MAX_FILE_BYTES = 32 * 1024 * 1024;
const CHUNK = 256 * 1024;

/** Reads `files` (relative to `root`) once; resolves to the files read, by their path inside `root`. */
export async function prefetch(root: string, files: readonly string[] = HOT_FILES, signal?: AbortSignal): Promise<string[]> {
  const top = await realpath(root);
  const tried = new Set<string>();
  const read: string[] = [];
  const buffer = Buffer.allocUnsafe(CHUNK);
  for (const rel of files) {
    if (signal?.aborted) break;
    const path = await realpath(join(top, rel)).catch(() => undefined);
    if (!path || !path.startsWith(`${top}/`) || tried.has(path)) continue;
    tried.add(path);
    // O_NONBLOCK: a FIFO opened by mistake returns at once instead of waiting for a writer.
    const fd = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK).catch(() => undefined);
    if (!fd) continue;
    try {
      const st = await fd.stat();
      if (!st.isFile() || st.size > MAX_FILE_BYTES) continue;
      while ((await fd.read(buffer, 0, CHUNK, null)).bytesRead > 0 && !signal?.aborted);
      read.push(path.slice(top.length + 1));
    } catch {
      // best effort: an unreadable file is only not read ahead
    } finally {
      await fd.close();
    }
  }
  return read;
}
