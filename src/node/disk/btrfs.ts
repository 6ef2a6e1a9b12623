/**
 * btrfs adapter: the argv of every btrfs operation the node uses and the classification
 * of their failures; nothing else in the node spawns `btrfs`. Subvolumes are named after
 * what they hold (template name, sandbox id) so a startup sweep can reclaim orphans.
 * Best-effort calls (the cleaner waits, a read-only probe, a listing) ignore a failing
 * exit and say so; every other failure is classified.
 */
import { existsSync } from "node:fs";
import { basename, dirname } from "node:path";
import { loadNodeAddon } from "../../core/addons.ts";
import { exec, ExecError } from "../../core/exec.ts";
import { SpaceError } from "../../core/errors.ts";
import { pipeInto, spawnStream, type SpawnedStream } from "./pipes.ts";

const T = 60_000;

/** Maps btrfs stderr to the error taxonomy (unit-tested). */
export function classifyBtrfsError(stderr: string, what: string): SpaceError {
  if (/No space left|ENOSPC|quota exceeded|Disk quota/i.test(stderr)) return new SpaceError("resource_exhausted", `${what}: node cache is full: ${stderr.trim()}`);
  if (/No such file|not found|does not exist|ENOENT/i.test(stderr)) return new SpaceError("not_found", `${what}: ${stderr.trim()}`);
  if (/File exists|EEXIST/i.test(stderr)) return new SpaceError("already_exists", `${what}: ${stderr.trim()}`);
  if (/not a btrfs|Inappropriate ioctl|ENOTTY/i.test(stderr)) return new SpaceError("failed_precondition", `${what}: not on btrfs: ${stderr.trim()}`);
  return new SpaceError("internal", `${what}: ${stderr.trim()}`);
}

async function btrfs(args: string[], what: string, signal?: AbortSignal, timeoutMs = T): Promise<string> {
  try {
    const r = await exec("btrfs", args, { timeoutMs, signal });
    return r.stdout;
  } catch (e) {
    if (e instanceof ExecError) throw classifyBtrfsError(e.result.stderr || e.message, what);
    throw e;
  }
}

/** The create path's two operations as ioctls (native/btrfs-ioctl.c), when the addon is built: no `btrfs` process. */
interface BtrfsIoctl {
  snapshot(src: string, dir: string, name: string): Promise<void>;
  qgroupLimit(path: string, bytes: number): Promise<void>;
  subvolumeId(path: string): Promise<number>;
}

let ioctls: BtrfsIoctl | null | undefined;
function ioctl(): BtrfsIoctl | null {
  return (ioctls ??= loadNodeAddon<BtrfsIoctl>("btrfs-ioctl") ?? null);
}

/** An ioctl's failure classified as the CLI's (its message names the errno: EEXIST, ENOSPC, …). */
async function viaIoctl<T>(call: Promise<T>, what: string): Promise<T> {
  try {
    return await call;
  } catch (e) {
    throw classifyBtrfsError(e instanceof Error ? e.message : String(e), what);
  }
}

export const subvolumeCreate = (path: string, signal?: AbortSignal) => btrfs(["subvolume", "create", path], `create subvolume ${path}`, signal);
export async function snapshot(src: string, dst: string, signal?: AbortSignal): Promise<void> {
  const what = `snapshot ${src} to ${dst}`;
  const native = ioctl();
  if (native) await viaIoctl(native.snapshot(src, dirname(dst), basename(dst)), what);
  // The CLI would snapshot into an existing directory; the ioctl refuses the name, as here.
  else if (existsSync(dst)) throw classifyBtrfsError(`${dst}: EEXIST`, what);
  else await btrfs(["subvolume", "snapshot", src, dst], what, signal);
}
/** A read-only snapshot (a send source, a frozen copy). `timeoutMs`: the caller's bound, default 60 s. */
export const snapshotReadonly = (src: string, dst: string, signal?: AbortSignal, timeoutMs = T) =>
  btrfs(["subvolume", "snapshot", "-r", src, dst], `read-only snapshot ${src} to ${dst}`, signal, timeoutMs);
export const setReadonly = (path: string, signal?: AbortSignal) => btrfs(["property", "set", "-ts", path, "ro", "true"], `make ${path} read-only`, signal);
/** A new filesystem on `device` (a loop image), replacing whatever it held. */
export async function mkfs(device: string, signal?: AbortSignal): Promise<void> {
  await exec("mkfs.btrfs", ["-f", "-q", device], { timeoutMs: 120_000, signal });
}
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
  const what = `subvolume id of ${path}`;
  const native = ioctl();
  if (native) return viaIoctl(native.subvolumeId(path), what);
  const out = await btrfs(["inspect-internal", "rootid", path], what, signal);
  return Number(out.trim());
}

/** Sets the referenced-bytes limit of a subvolume's qgroup (the sandbox's disk size). */
export async function qgroupLimit(path: string, mib: number, signal?: AbortSignal): Promise<void> {
  const what = `limit ${path} to ${mib} MiB`;
  const native = ioctl();
  if (native) await viaIoctl(native.qgroupLimit(path, mib * 1024 * 1024), what);
  else await btrfs(["qgroup", "limit", `${mib}M`, path], what, signal);
}

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

/** Waits until the cleaner has dropped every deleted subvolume. Best effort: a failure is ignored, a timeout throws. */
export async function subvolumeSync(mnt: string, signal?: AbortSignal): Promise<void> {
  await exec("btrfs", ["subvolume", "sync", mnt], { timeoutMs: 120_000, signal, allowFailure: true });
}

/**
 * Removes the qgroups of deleted subvolumes. The kernel drops one itself once the cleaner
 * has dropped the subvolume and a transaction commits: sync kicks both, clear-stale
 * catches the rest. Best effort like subvolumeSync.
 */
export async function clearStaleQgroups(mnt: string, signal?: AbortSignal): Promise<void> {
  const run = (args: string[], timeoutMs: number) => exec("btrfs", args, { timeoutMs, signal, allowFailure: true });
  await run(["filesystem", "sync", mnt], T);
  await subvolumeSync(mnt, signal);
  await run(["filesystem", "sync", mnt], T);
  await run(["qgroup", "clear-stale", mnt], T);
}

/** Whether a subvolume is read-only (false when it cannot be told: not a subvolume, gone). */
export async function isReadonly(path: string): Promise<boolean> {
  const r = await exec("btrfs", ["property", "get", "-ts", path, "ro"], { timeoutMs: T, allowFailure: true });
  return /ro=true/.test(r.stdout);
}

/** Parses `btrfs subvolume show` (unit-tested): the identity `btrfs send` writes for a parent, its received uuid, else its uuid. */
export function parseSendIdentity(stdout: string): string | undefined {
  const rec = /Received UUID:\s+(\S+)/.exec(stdout)?.[1];
  if (rec && rec !== "-") return rec;
  return /^\s*UUID:\s+(\S+)/m.exec(stdout)?.[1];
}

/** The identity a send stream records for `path` as its parent (and a receive looks for). */
export async function sendIdentity(path: string, signal?: AbortSignal): Promise<string> {
  const out = await btrfs(["subvolume", "show", path], `show subvolume ${path}`, signal);
  const id = parseSendIdentity(out);
  if (!id) throw new SpaceError("internal", `no UUID in btrfs subvolume show ${path}`);
  return id;
}

export interface ReceivedSubvolume {
  /** Path relative to the filesystem root. */
  path: string;
  uuid: string;
  receivedUuid: string;
}

/** Parses `btrfs subvolume list -u -R` (unit-tested): the received subvolumes (an unreceived row's `-` is padded and not matched). */
export function parseReceivedSubvolumes(stdout: string): ReceivedSubvolume[] {
  const out: ReceivedSubvolume[] = [];
  for (const line of stdout.split("\n")) {
    const m = /received_uuid (\S+) uuid (\S+) path (.+)$/.exec(line);
    if (m) out.push({ receivedUuid: m[1]!, uuid: m[2]!, path: m[3]! });
  }
  return out;
}

/** The subvolumes of the filesystem at `mnt` received from a send stream (none when it cannot be listed). */
export async function listReceivedSubvolumes(mnt: string, signal?: AbortSignal): Promise<ReceivedSubvolume[]> {
  const r = await exec("btrfs", ["subvolume", "list", "-u", "-R", mnt], { timeoutMs: T, signal, allowFailure: true });
  return parseReceivedSubvolumes(r.stdout);
}

/** `btrfs send` of a read-only subvolume: whole, or against `parent` (which the receiver must have). */
export function send(path: string, o: { parent?: string }, signal: AbortSignal): SpawnedStream {
  return spawnStream(["btrfs", "send", "-q", ...(o.parent ? ["-p", o.parent] : []), path], signal);
}

/** `btrfs receive` of a send stream into `dir`; rejects (failed_precondition) when btrfs refuses the stream. */
export function receive(stream: NodeJS.ReadableStream, dir: string, signal: AbortSignal): Promise<void> {
  return pipeInto(stream, ["btrfs", "receive", "-q", dir], signal);
}

export async function listSubvolumes(mnt: string, signal?: AbortSignal): Promise<string[]> {
  const out = await btrfs(["subvolume", "list", "-o", mnt], `list subvolumes of ${mnt}`, signal).catch(() => "");
  return out
    .split("\n")
    .map((l) => /\spath\s+(.+)$/.exec(l)?.[1])
    .filter((p): p is string => Boolean(p));
}
