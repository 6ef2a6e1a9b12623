/**
 * btrfs adapter: the argv of every btrfs operation the node uses and the classification
 * of their failures. Subvolumes are named after what they hold (template name, sandbox id)
 * so a startup sweep can reclaim orphans.
 */
import { exec, ExecError } from "../../core/exec.ts";
import { SpaceError } from "../../core/errors.ts";

const T = 60_000;

/** Maps btrfs stderr to the error taxonomy (unit-tested). */
export function classifyBtrfsError(stderr: string, what: string): SpaceError {
  if (/No space left|ENOSPC|quota exceeded|Disk quota/i.test(stderr)) return new SpaceError("resource_exhausted", `${what}: node cache is full: ${stderr.trim()}`);
  if (/No such file|not found|does not exist|ENOENT/i.test(stderr)) return new SpaceError("not_found", `${what}: ${stderr.trim()}`);
  if (/File exists|EEXIST/i.test(stderr)) return new SpaceError("already_exists", `${what}: ${stderr.trim()}`);
  if (/not a btrfs|Inappropriate ioctl|ENOTTY/i.test(stderr)) return new SpaceError("failed_precondition", `${what}: not on btrfs: ${stderr.trim()}`);
  return new SpaceError("internal", `${what}: ${stderr.trim()}`);
}

async function btrfs(args: string[], what: string, signal?: AbortSignal): Promise<string> {
  try {
    const r = await exec("btrfs", args, { timeoutMs: T, signal });
    return r.stdout;
  } catch (e) {
    if (e instanceof ExecError) throw classifyBtrfsError(e.result.stderr || e.message, what);
    throw e;
  }
}

export const subvolumeCreate = (path: string, signal?: AbortSignal) => btrfs(["subvolume", "create", path], `create subvolume ${path}`, signal);
export const snapshot = (src: string, dst: string, signal?: AbortSignal) => btrfs(["subvolume", "snapshot", src, dst], `snapshot ${src} to ${dst}`, signal);
export const setReadonly = (path: string, signal?: AbortSignal) => btrfs(["property", "set", "-ts", path, "ro", "true"], `make ${path} read-only`, signal);
export const quotaEnable = (mnt: string, signal?: AbortSignal) => btrfs(["quota", "enable", mnt], `enable quotas on ${mnt}`, signal);

/**
 * Deletes a subvolume and its qgroup (so 100 create/kill cycles leave no stale qgroups). Absent = ok.
 * `kernelDropsQgroup`: simple quotas, where the kernel removes a dropped subvolume's qgroup itself.
 */
export async function subvolumeDelete(path: string, signal?: AbortSignal, o: { kernelDropsQgroup?: boolean } = {}): Promise<void> {
  if (o.kernelDropsQgroup) {
    await btrfs(["subvolume", "delete", path], `delete subvolume ${path}`, signal).catch((e: unknown) => {
      if (!(e instanceof SpaceError && e.code === "not_found")) throw e;
    });
    return;
  }
  const id = await subvolumeId(path, signal).catch((e: unknown) => {
    if (e instanceof SpaceError && e.code === "not_found") return undefined;
    throw e;
  });
  if (id === undefined) return;
  await btrfs(["subvolume", "delete", path], `delete subvolume ${path}`, signal);
  await exec("btrfs", ["qgroup", "destroy", `0/${id}`, mountRootOf(path)], { timeoutMs: T, signal, allowFailure: true });
}

/** The filesystem root a node-cache path belongs to: the caller passes paths as <mnt>/<kind>/<name>. */
function mountRootOf(path: string): string {
  return path.split("/").slice(0, -2).join("/") || "/";
}

export async function subvolumeId(path: string, signal?: AbortSignal): Promise<number> {
  const out = await btrfs(["inspect-internal", "rootid", path], `subvolume id of ${path}`, signal);
  return Number(out.trim());
}

/** Sets the referenced-bytes limit of a subvolume's qgroup (the sandbox's disk size). */
export const qgroupLimit = (path: string, mib: number, signal?: AbortSignal) =>
  btrfs(["qgroup", "limit", `${mib}M`, path], `limit ${path} to ${mib} MiB`, signal);

export interface QgroupUsage {
  referencedBytes: number;
  exclusiveBytes: number;
  limitBytes: number | null;
}

/** Parses `btrfs qgroup show -r -e -f --raw <path>` (unit-tested). */
export function parseQgroupShow(stdout: string): QgroupUsage | undefined {
  for (const line of stdout.split("\n")) {
    const m = /^\s*0\/\d+\s+(\d+)\s+(\d+)\s+(\S+)/.exec(line);
    if (m) return { referencedBytes: Number(m[1]), exclusiveBytes: Number(m[2]), limitBytes: /^\d+$/.test(m[3]!) ? Number(m[3]) : null };
  }
  return undefined;
}

export async function qgroupUsage(path: string, signal?: AbortSignal): Promise<QgroupUsage | undefined> {
  const out = await btrfs(["qgroup", "show", "-r", "-e", "-f", "--raw", path], `usage of ${path}`, signal);
  return parseQgroupShow(out);
}

export const sync = (mnt: string, signal?: AbortSignal) => btrfs(["filesystem", "sync", mnt], `sync ${mnt}`, signal);

export async function listSubvolumes(mnt: string, signal?: AbortSignal): Promise<string[]> {
  const out = await btrfs(["subvolume", "list", "-o", mnt], `list subvolumes of ${mnt}`, signal).catch(() => "");
  return out
    .split("\n")
    .map((l) => /\spath\s+(.+)$/.exec(l)?.[1])
    .filter((p): p is string => Boolean(p));
}
