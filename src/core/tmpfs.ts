/**
 * Directories whose files live only as long as the host's boot (the node's bundles and its
 * network slots' records, CRIU's feature cache) belong on tmpfs, as /run is on most hosts. On
 * a disk they cost a burst of creates its inodes: on an ext4 without a journal (this
 * project's test VMs) each new inode is checked against the recently deleted ones, and a cold
 * burst of 100 after another one's teardown used ~15% more CPU with them there
 * (docs/capacity.md).
 */
import { mkdir, readdir, statfs } from "node:fs/promises";
import { exec } from "./exec.ts";

const TMPFS_MAGIC = 0x01021994;

export async function isTmpfs(dir: string): Promise<boolean> {
  return (await statfs(dir)).type === TMPFS_MAGIC;
}

/**
 * Makes `dir` and, unless it is on tmpfs already, mounts a tmpfs of its own there (root only,
 * no devices, setuid or exec). A directory that holds files (but those its user writes anew
 * at each start, `regenerated`) is left as it is: what is in it (a previous version's
 * containers, say) must stay reachable. Resolves whether `dir` is on tmpfs now; a failed
 * mount rejects (the caller decides whether that is fatal).
 */
export async function ensureTmpfs(dir: string, o: { name: string; sizeMib: number; regenerated?: readonly string[]; signal?: AbortSignal }): Promise<boolean> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  if (await isTmpfs(dir)) return true;
  if ((await readdir(dir)).some((f) => !o.regenerated?.includes(f))) return false;
  await exec("mount", ["-t", "tmpfs", "-o", `size=${o.sizeMib}m,mode=0700,nosuid,nodev,noexec`, o.name, dir], { timeoutMs: 30_000, ...(o.signal ? { signal: o.signal } : {}) });
  return true;
}
