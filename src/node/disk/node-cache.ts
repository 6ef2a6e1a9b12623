/**
 * The node cache: one btrfs filesystem holding template subvolumes and sandbox disks.
 * Either an existing btrfs mount (SPACE_NODE_BTRFS_PATH) or a sparse loop image under the
 * node dir, reformatted on each machine boot (a marker under /run records the boot id, so
 * it is formatted once per boot) and mounted nosuid,noatime with quotas enabled: simple
 * quotas on a cache this node formats (an extent is charged to the subvolume that wrote
 * it, so deleting a sandbox disk costs the kernel's cleaner next to nothing, against about
 * 1.8 s of CPU with classic qgroups, `npm run bench -- btrfs-quota`), classic qgroups when
 * the helper or the kernel cannot, and whatever an existing filesystem already has.
 */
import { createHash } from "node:crypto";
import { mkdir, open, readFile, rm, stat, statfs, writeFile } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { exec } from "../../core/exec.ts";
import { SpaceError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import { mkfs, quotaEnable } from "./btrfs.ts";

/**
 * `simple`: a subvolume's qgroup counts only the bytes it wrote, so a sandbox disk's limit
 * and usage are offset by what it was snapshotted from (Disks). `classic`: referenced bytes.
 */
export type QuotaMode = "simple" | "classic";

export interface NodeCache {
  /** Mount point of the btrfs filesystem. */
  mountPath: string;
  templatesDir: string;
  sandboxesDir: string;
  /** Volumes (node/disk/volume-disks.ts): one subvolume each, with its own quota. */
  volumesDir: string;
  /**
   * A second view of `sandboxesDir` mounted without nosuid: sandbox root filesystems are
   * taken from here so `sudo` works inside sandboxes, while the cache itself stays nosuid
   * for the host.
   */
  rootsDir: string;
  /** The loop image, when the node owns one. */
  imagePath?: string;
  /** With a loop image: the file in the run dir saying which boot formatted and mounted it (removed with the mount). */
  bootMarker?: string;
  /** True when this call formatted the filesystem (templates must be imported again). */
  formatted: boolean;
  quotaMode: QuotaMode;
  /** `/sys/fs/btrfs/<fsid>/qgroups`: each qgroup's counters as files (`0_<subvolume id>/referenced`). */
  qgroupsDir: string;
}

export interface NodeCacheOptions {
  nodeDir: string;
  /** Existing btrfs mount; empty = loop image. */
  btrfsPath: string;
  imageGib: number;
  logger: Logger;
  signal: AbortSignal;
  /** Where boot markers live (tmpfs: gone on reboot). */
  runDir?: string;
  /** The simple-quota switch built by scripts/setup.sh (absent: classic qgroups). */
  squotaHelper?: string;
}

export async function readBootId(): Promise<string> {
  return (await readFile("/proc/sys/kernel/random/boot_id", "utf8")).trim();
}

export async function isMountpoint(path: string): Promise<boolean> {
  const abs = resolve(path);
  const info = await readFile("/proc/self/mountinfo", "utf8");
  return info.split("\n").some((l) => l.split(" ")[4] === abs);
}

async function fsType(path: string): Promise<string> {
  const r = await exec("stat", ["-f", "-c", "%T", path], { timeoutMs: 10_000 });
  return r.stdout.trim();
}

export async function ensureNodeCache(o: NodeCacheOptions): Promise<NodeCache> {
  if (o.btrfsPath) {
    const mnt = resolve(o.btrfsPath);
    if ((await fsType(mnt).catch(() => "")) !== "btrfs") {
      throw new SpaceError("failed_precondition", `SPACE_NODE_BTRFS_PATH=${o.btrfsPath} is not a btrfs filesystem`);
    }
    // Data already there was written without owners: simple quotas would not count it.
    if (!(await quotasOf(mnt))) await quotaEnable(mnt, o.signal);
    return layout(mnt, false, o.nodeDir, o.signal);
  }
  const imagePath = resolve(join(o.nodeDir, "cache.img"));
  const mnt = resolve(join(o.nodeDir, "cache"));
  const runDir = o.runDir ?? "/run/space";
  const marker = join(runDir, `node-cache-${createHash("sha256").update(imagePath).digest("hex").slice(0, 16)}.boot`);
  const bootId = await readBootId();
  const mounted = await isMountpoint(mnt);
  const markerBoot = await readFile(marker, "utf8").then((s) => s.trim()).catch(() => "");
  if (mounted && markerBoot === bootId) return layout(mnt, false, o.nodeDir, o.signal, { imagePath, bootMarker: marker });

  // First use in this boot: (re)format. Nothing on it survives a reboot anyway (containers
  // and network namespaces are gone), and a fresh filesystem never carries corruption or
  // leaked subvolumes from before.
  const roots = resolve(join(o.nodeDir, "roots"));
  if (await isMountpoint(roots)) await exec("umount", [roots], { timeoutMs: 60_000, signal: o.signal });
  if (mounted) await exec("umount", [mnt], { timeoutMs: 60_000, signal: o.signal });
  await mkdir(dirname(imagePath), { recursive: true });
  await mkdir(mnt, { recursive: true });
  const started = Date.now();
  const fh = await open(imagePath, "w");
  try {
    await fh.truncate(o.imageGib * 1024 * 1024 * 1024); // sparse
  } finally {
    await fh.close();
  }
  await mkfs(imagePath, o.signal);
  await exec("mount", ["-o", "loop,nosuid,nodev,noatime", imagePath, mnt], { timeoutMs: 60_000, signal: o.signal });
  await enableQuotas(mnt, o);
  await mkdir(runDir, { recursive: true });
  await writeFile(marker, `${bootId}\n`);
  o.logger.info({ imagePath, mnt, gib: o.imageGib, ms: Date.now() - started }, "node cache formatted (first use in this boot)");
  return layout(mnt, true, o.nodeDir, o.signal, { imagePath, bootMarker: marker });
}

/** Simple quotas when the helper and kernel can, else classic qgroups (said in the log). */
async function enableQuotas(mnt: string, o: NodeCacheOptions): Promise<void> {
  if (o.squotaHelper && (await exists(o.squotaHelper))) {
    const r = await exec(o.squotaHelper, [mnt], { timeoutMs: 60_000, signal: o.signal, allowFailure: true });
    if (r.exitCode === 0) return;
    o.logger.warn({ stderr: r.stderr.trim() }, "simple quotas unavailable (kernel < 6.7?): classic qgroups, each deleted sandbox disk costs the btrfs cleaner seconds of CPU");
  } else {
    o.logger.warn({ helper: o.squotaHelper }, "no btrfs-squota helper (scripts/setup.sh builds it): classic qgroups, each deleted sandbox disk costs the btrfs cleaner seconds of CPU");
  }
  await quotaEnable(mnt, o.signal);
}

/** The quota mode the kernel reports for the filesystem at `mnt`, and its qgroups in sysfs; undefined when quotas are off. */
export async function quotasOf(mnt: string): Promise<{ mode: QuotaMode; qgroupsDir: string } | undefined> {
  const uuid = (await exec("findmnt", ["-n", "-o", "UUID", "--mountpoint", mnt], { timeoutMs: 10_000 })).stdout.trim();
  const dir = `/sys/fs/btrfs/${uuid}/qgroups`;
  if (!uuid || (await readFile(join(dir, "enabled"), "utf8").catch(() => "0")).trim() !== "1") return undefined;
  const mode = (await readFile(join(dir, "mode"), "utf8").catch(() => "qgroup")).trim();
  return { mode: mode === "squota" ? "simple" : "classic", qgroupsDir: dir };
}

async function layout(mnt: string, formatted: boolean, nodeDir: string, signal: AbortSignal, image: Pick<NodeCache, "imagePath" | "bootMarker"> = {}): Promise<NodeCache> {
  const templatesDir = join(mnt, "templates");
  const sandboxesDir = join(mnt, "sandboxes");
  const volumesDir = join(mnt, "volumes");
  await mkdir(templatesDir, { recursive: true });
  await mkdir(sandboxesDir, { recursive: true });
  await mkdir(volumesDir, { recursive: true });
  const rootsDir = resolve(join(nodeDir, "roots"));
  if (!(await isMountpoint(rootsDir))) {
    await mkdir(rootsDir, { recursive: true });
    await exec("mount", ["--bind", sandboxesDir, rootsDir], { timeoutMs: 60_000, signal });
    await exec("mount", ["-o", "remount,bind,suid,nodev,noatime", rootsDir], { timeoutMs: 60_000, signal });
  }
  const quotas = await quotasOf(mnt);
  if (!quotas) throw new SpaceError("failed_precondition", `btrfs quotas are off on ${mnt}: sandbox disks could not be limited`);
  return { mountPath: mnt, templatesDir, sandboxesDir, volumesDir, rootsDir, ...image, formatted, quotaMode: quotas.mode, qgroupsDir: quotas.qgroupsDir };
}

/** Unmounts a loop-image cache (tests; `space node` leaves it mounted across restarts). */
export async function unmountNodeCache(cache: NodeCache, signal?: AbortSignal): Promise<void> {
  if (await isMountpoint(cache.rootsDir)) await exec("umount", [cache.rootsDir], { timeoutMs: 60_000, signal });
  if (!cache.imagePath) return;
  if (await isMountpoint(cache.mountPath)) await exec("umount", [cache.mountPath], { timeoutMs: 60_000, signal });
  // Its boot is over for this image: a marker left behind only piles up in /run (one per data dir).
  if (cache.bootMarker) await rm(cache.bootMarker, { force: true });
}

/** Free MiB for admission: the cache filesystem, and for a sparse image also its host filesystem. */
export async function freeMib(cache: NodeCache): Promise<{ freeMib: number; totalMib: number }> {
  const s = await statfs(cache.mountPath);
  let free = (s.bavail * s.bsize) / 1048576;
  const total = (s.blocks * s.bsize) / 1048576;
  if (cache.imagePath) {
    const h = await statfs(dirname(cache.imagePath));
    free = Math.min(free, (h.bavail * h.bsize) / 1048576);
  }
  return { freeMib: Math.floor(free), totalMib: Math.floor(total) };
}

export async function exists(p: string): Promise<boolean> {
  return stat(p).then(
    () => true,
    () => false,
  );
}
