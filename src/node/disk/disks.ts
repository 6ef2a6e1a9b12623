/**
 * Sandbox disks on the node cache: a template is a read-only subvolume; a sandbox's disk
 * is a writable snapshot of it (copy-on-write, milliseconds) whose qgroup limits it to
 * `disk_mib`, so writing past it fails inside the sandbox (EDQUOT). Under simple quotas a
 * qgroup counts only what its subvolume wrote: the disk's limit and usage are then offset by
 * its base, the size of what it was snapshotted from, recorded beside it.
 */
import { readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { exec } from "../../core/exec.ts";
import { invalid, notFound, SpaceError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import * as btrfs from "./btrfs.ts";
import { exists, freeMib, type NodeCache } from "./node-cache.ts";
import type { SandboxDisks } from "./sandbox-disks.ts";
import { HOT_FILES, prefetch } from "./prefetch.ts";
import { WarmDisks } from "./warm-disks.ts";

export interface TemplateInfo {
  name: string;
  /** Referenced size of the template's rootfs: the least `disk_mib` that can hold it. */
  rootfsSizeMib: number;
  importedAt: string;
  source: string;
}

const NAME = /^[a-z0-9][a-z0-9._-]{0,62}$/;
const DISK_NOTES = ["base", "parent"] as const;
export type DiskNote = (typeof DISK_NOTES)[number];
/** Warm disks are made again once no create took one for this long (off a burst's path). */
const WARM_QUIET_MS = 100;
/** Templates that keep warm disks (the most recently used). */
const WARM_TEMPLATES = 8;

/** The whole size of the files under `path` (what simple quotas do not say of a snapshot), at least 1 MiB. */
export async function treeSizeMib(path: string, signal: AbortSignal): Promise<number> {
  const du = await exec("du", ["-s", "-x", "--block-size=1M", path], { timeoutMs: 300_000, signal });
  return Number(du.stdout.split(/\s+/)[0]) || 1;
}

export class Disks implements SandboxDisks {
  readonly rootfsFormat = "btrfs-subvolume" as const;
  readonly cache: NodeCache;
  private readonly reserveMib: number;
  private readonly logger: Logger;
  private readonly templates = new Map<string, TemplateInfo>();

  private readonly keepMs: number;
  /** Disks of suspended sandboxes kept for a restore here: id → the snapshot they equal, and the timer that releases them. */
  readonly #kept = new Map<string, { snapshotId: string; timer: NodeJS.Timeout }>();
  /** Deletions in flight: a restore of the id waits for them. */
  readonly #releasing = new Map<string, Promise<void>>();

  /** Warm disks: disks made ahead of the templates creates used (warm-disks.ts). */
  readonly warm: WarmDisks;
  /** Warm disks of snapshot disks many sandboxes start from (a template's capture after boot), by the source's path. */
  readonly warmFrom: WarmDisks;

  /**
   * `keepMs`: how long a disk released with `keepFor` stays for a restore here (0: released at once).
   * `warmDisks`: disks made ahead per template used (0: none).
   */
  constructor(cache: NodeCache, o: { reserveMib: number; logger: Logger; keepMs?: number; warmDisks?: number }) {
    this.cache = cache;
    this.reserveMib = o.reserveMib;
    this.logger = o.logger;
    this.keepMs = o.keepMs ?? 0;
    this.warm = new WarmDisks({
      size: o.warmDisks ?? 0,
      dir: cache.sandboxesDir,
      quietMs: WARM_QUIET_MS,
      templates: WARM_TEMPLATES,
      make: (template, path, signal) => this.#makeWarm(this.templatePath(template), path, signal),
      identity: async (template) => (await stat(this.templatePath(template)).catch(() => undefined))?.dev,
      remove: (path) => this.#deleteSubvolume(path, AbortSignal.timeout(60_000)),
      logger: o.logger,
    });
    this.warmFrom = new WarmDisks({
      size: o.warmDisks ?? 0,
      dir: cache.sandboxesDir,
      prefix: ".warmsrc-",
      quietMs: WARM_QUIET_MS,
      templates: WARM_TEMPLATES,
      make: (from, path, signal) => this.#makeWarm(from, path, signal),
      identity: async (from) => (await stat(from).catch(() => undefined))?.dev,
      remove: (path) => this.#deleteSubvolume(path, AbortSignal.timeout(60_000)),
      logger: o.logger,
    });
  }

  templatePath(name: string): string {
    return join(this.cache.templatesDir, name);
  }
  sandboxPath(id: string): string {
    return join(this.cache.sandboxesDir, id);
  }

  async templateInfo(name: string): Promise<TemplateInfo | undefined> {
    const known = this.templates.get(name);
    if (known) return known;
    if (!NAME.test(name)) return undefined;
    const info = await readFile(join(this.cache.templatesDir, `${name}.json`), "utf8")
      .then((t) => JSON.parse(t) as TemplateInfo)
      .catch(() => undefined);
    if (info && (await exists(this.templatePath(name)))) {
      this.templates.set(name, info);
      return info;
    }
    return undefined;
  }

  /** Drops the remembered metadata of `name` (re-written, re-pointed or deleted). */
  forgetTemplate(name: string): void {
    this.templates.delete(name);
    this.warm.drop(name);
  }

  async listTemplates(): Promise<TemplateInfo[]> {
    const names = (await readdir(this.cache.templatesDir)).filter((f) => f.endsWith(".json")).map((f) => f.slice(0, -5));
    const out: TemplateInfo[] = [];
    for (const n of names) {
      const t = await this.templateInfo(n);
      if (t) out.push(t);
    }
    return out;
  }

  /** Imports a rootfs tarball as the read-only template subvolume `name` (exists = ok). */
  /** `boot`: what sandboxes of it boot with (start and ready commands: node/sandboxes/template-boot.ts), kept in its metadata. */
  async ensureTemplateFromTar(name: string, tarPath: string, signal: AbortSignal, boot: Record<string, string> = {}): Promise<TemplateInfo> {
    const have = await this.templateInfo(name);
    if (have) return have;
    if (!NAME.test(name)) throw invalid(`template name ${JSON.stringify(name)} is not valid`);
    const started = Date.now();
    const tmp = join(this.cache.templatesDir, `.import-${name}-${process.pid}`);
    await btrfs.subvolumeDelete(tmp, signal);
    await btrfs.subvolumeCreate(tmp, signal);
    try {
      await exec("tar", ["--numeric-owner", "--xattrs", "--acls", "-xpf", tarPath, "-C", tmp], { timeoutMs: 10 * 60_000, signal });
      await btrfs.sync(this.cache.mountPath, signal);
      const usage = await btrfs.qgroupUsage(tmp, signal);
      const rootfsSizeMib = Math.ceil((usage?.referencedBytes ?? 0) / 1048576);
      await btrfs.setReadonly(tmp, signal);
      await rename(tmp, this.templatePath(name));
      const info: TemplateInfo = { ...boot, name, rootfsSizeMib, importedAt: new Date().toISOString(), source: tarPath };
      await writeFile(join(this.cache.templatesDir, `${name}.json`), JSON.stringify(info, null, 2));
      this.templates.set(name, info);
      this.logger.info({ template: name, rootfsSizeMib, ms: Date.now() - started }, "template imported into the node cache");
      return info;
    } catch (e) {
      await btrfs.subvolumeDelete(tmp).catch(() => undefined);
      throw e;
    }
  }

  /**
   * Refuses at once (no disk work) a disk smaller than the template's rootfs, naming both
   * sizes, and a disk the node cannot hold while keeping its reservation.
   */
  async admit(template: string, diskMib: number): Promise<TemplateInfo> {
    const t = await this.templateInfo(template);
    if (!t) throw notFound(`template ${template} is not in this node's cache`);
    if (diskMib < t.rootfsSizeMib) {
      throw invalid(`rootfs_size_mb=${diskMib} is smaller than cloned rootfs size ${t.rootfsSizeMib} MiB`, {
        field: "diskMib",
        diskMib,
        rootfsSizeMib: t.rootfsSizeMib,
      });
    }
    // Thin provisioning: a snapshot costs nothing until written, so admission checks that the
    // new disk's headroom fits in what is free beyond the reservation, not the sum of limits.
    const { freeMib: free } = await freeMib(this.cache);
    const headroom = diskMib - t.rootfsSizeMib;
    if (free - this.reserveMib < headroom) {
      throw new SpaceError(
        "resource_exhausted",
        `node disk is full: ${free} MiB free, ${this.reserveMib} MiB reserved, a ${diskMib} MiB disk may need ${headroom} MiB more`,
      );
    }
    return t;
  }

  /** The sandbox's root filesystem as the runtime sees it (suid allowed; see NodeCache.rootsDir). */
  sandboxRoot(id: string): string {
    return join(this.cache.rootsDir, id);
  }

  /**
   * Snapshot now; the qgroup limit lands in `limited`, so callers can overlap it with the
   * runtime start (nothing in the sandbox writes before envd is ready, and the caller awaits
   * `limited` before reporting ready). The caller releases the disk if `limited` fails.
   */
  async snapshotSandboxDisk(id: string, template: string, diskMib: number, signal: AbortSignal): Promise<{ root: string; limited: Promise<void> }> {
    await this.takeKeptDisk(id, undefined, signal);
    if (await exists(this.sandboxPath(id))) return { root: this.sandboxRoot(id), limited: Promise.resolve() };
    const baseMib = async () => (await this.templateInfo(template))?.rootfsSizeMib ?? 0;
    if (await this.#placeWarm(id, await this.warm.take(template), signal)) return this.#limited(id, diskMib, baseMib, signal);
    return this.sandboxDiskFrom(id, this.templatePath(template), diskMib, baseMib, signal);
  }

  /**
   * Sandbox `id`'s disk as a writable snapshot of `from` (a template, or a snapshot's disk),
   * its limit landing in `limited` as `snapshotSandboxDisk`'s does. `baseMib`: `from`'s
   * size, for the limit (limitSandboxDisk). `warm`: `from` is a source many sandboxes start
   * from (a template's capture after boot): a disk made ahead of it is taken when there is one.
   */
  async sandboxDiskFrom(id: string, from: string, diskMib: number, baseMib: () => Promise<number>, signal: AbortSignal, o: { warm?: boolean } = {}): Promise<{ root: string; limited: Promise<void> }> {
    if (!(o.warm && (await this.#placeWarm(id, await this.warmFrom.take(from), signal)))) await btrfs.snapshot(from, this.sandboxPath(id), signal);
    return this.#limited(id, diskMib, baseMib, signal);
  }

  /** A warm disk: a writable snapshot of `from` with the files every start reads in its own page cache. */
  async #makeWarm(from: string, path: string, signal: AbortSignal): Promise<void> {
    await btrfs.snapshot(from, path, signal);
    await prefetch(path, HOT_FILES, signal);
  }

  /** Renames a warm disk into place as sandbox `id`'s; false (the disk deleted) when there was none or it could not be moved. */
  async #placeWarm(id: string, made: string | undefined, signal: AbortSignal): Promise<boolean> {
    if (!made) return false;
    return rename(made, this.sandboxPath(id)).then(
      () => true,
      async (e: unknown) => {
        this.logger.warn({ sandboxId: id, err: e }, "a warm disk could not be moved into place; snapshotting instead");
        await this.#deleteSubvolume(made, signal).catch(() => undefined);
        return false;
      },
    );
  }

  #limited(id: string, diskMib: number, baseMib: () => Promise<number>, signal: AbortSignal): { root: string; limited: Promise<void> } {
    const limited = (async () => this.limitSandboxDisk(id, diskMib, await baseMib(), signal))();
    limited.catch(() => undefined); // observed by the caller; never an unhandled rejection
    return { root: this.sandboxRoot(id), limited };
  }

  /**
   * Sandbox `id`'s disk made now from snapshot `snapshotId`'s (at `from`) and limited, then
   * kept as a suspend's is, for a restore of that snapshot as `id` here to take
   * (`takeKeptDisk`): a fork's disk made while its source's memory is dumped. Nothing is
   * made when disks are not kept (keepMs 0); a failure leaves nothing.
   */
  async keepDiskFrom(id: string, snapshotId: string, from: string, diskMib: number, baseMib: () => Promise<number>, signal: AbortSignal): Promise<void> {
    if (this.keepMs <= 0) return;
    const { limited } = await this.sandboxDiskFrom(id, from, diskMib, baseMib, signal);
    await limited.catch(async (e: unknown) => {
      await this.releaseSandboxDisk(id, AbortSignal.timeout(60_000));
      throw e;
    });
    await this.releaseSandboxDisk(id, signal, { keepFor: snapshotId });
  }

  /**
   * Limits a sandbox disk to diskMib in all. `baseMib`: the size of what it was snapshotted
   * from, already counted against the disk under simple quotas but not charged to its qgroup.
   */
  async limitSandboxDisk(id: string, diskMib: number, baseMib: number, signal: AbortSignal): Promise<void> {
    if (this.cache.quotaMode === "classic") {
      await btrfs.qgroupLimit(this.sandboxPath(id), diskMib, signal);
      return;
    }
    await this.writeNote(id, "base", String(baseMib));
    // A restored disk may already hold more than diskMib: then it is full, not unlimited.
    await btrfs.qgroupLimit(this.sandboxPath(id), Math.max(1, diskMib - baseMib), signal);
  }

  /** The size a sandbox disk started from that its qgroup does not count (0: classic qgroups). */
  async baseMib(id: string): Promise<number> {
    if (this.cache.quotaMode === "classic") return 0;
    return Number((await this.note(id, "base")) ?? "0") || 0;
  }

  /**
   * A note kept beside a sandbox's disk in the cache, gone with the disk: `base`, the size
   * it started from; `parent`, the subvolume it descends from (NodeSnapshots). On the cache,
   * not the node dir, as the disk is: its files cost no inode of the node dir's filesystem on
   * a create (docs/capacity.md) and never outlive the disk.
   */
  async writeNote(id: string, kind: DiskNote, text: string): Promise<void> {
    await writeFile(this.notePath(id, kind), text);
  }

  async note(id: string, kind: DiskNote): Promise<string | undefined> {
    return readFile(this.notePath(id, kind), "utf8").catch(() => undefined);
  }

  async removeNote(id: string, kind: DiskNote): Promise<void> {
    await rm(this.notePath(id, kind), { force: true });
  }

  private notePath(id: string, kind: DiskNote): string {
    return join(this.cache.sandboxesDir, `.${kind}-${id}`);
  }

  /**
   * Absent = ok. `keepFor` (a suspend): the disk equals that snapshot's (the processes were
   * frozen from its disk snapshot to their end), so it stays for `keepMs` for a restore of
   * the snapshot here to take back (`takeKeptDisk`) instead of snapshotting it again.
   */
  async releaseSandboxDisk(id: string, signal: AbortSignal, o: { keepFor?: string } = {}): Promise<void> {
    const kept = this.#kept.get(id);
    if (kept) clearTimeout(kept.timer);
    this.#kept.delete(id);
    if (o.keepFor && this.keepMs > 0) {
      const timer = setTimeout(() => {
        this.#kept.delete(id);
        void this.releaseSandboxDisk(id, AbortSignal.timeout(60_000)).catch((e: unknown) => this.logger.warn({ sandboxId: id, err: e }, "releasing a kept sandbox disk failed"));
      }, this.keepMs);
      timer.unref();
      this.#kept.set(id, { snapshotId: o.keepFor, timer });
      return;
    }
    const run = this.deleteSandboxDisk(id, signal);
    this.#releasing.set(id, run);
    try {
      await run;
    } finally {
      if (this.#releasing.get(id) === run) this.#releasing.delete(id);
    }
  }

  /**
   * Takes back the disk kept for `id` when it equals `snapshotId`'s; otherwise releases what
   * is kept (or waits for a deletion in flight) and says false.
   */
  async takeKeptDisk(id: string, snapshotId: string | undefined, signal: AbortSignal): Promise<boolean> {
    const kept = this.#kept.get(id);
    if (kept && kept.snapshotId === snapshotId) {
      clearTimeout(kept.timer);
      this.#kept.delete(id);
      return true;
    }
    if (kept) await this.releaseSandboxDisk(id, signal);
    else await this.#releasing.get(id)?.catch(() => undefined);
    return false;
  }

  private async deleteSandboxDisk(id: string, signal: AbortSignal): Promise<void> {
    this.#subvolumes.delete(id);
    await this.#deleteSubvolume(this.sandboxPath(id), signal);
    await Promise.all(DISK_NOTES.map((kind) => this.removeNote(id, kind)));
  }

  async #deleteSubvolume(path: string, signal: AbortSignal): Promise<void> {
    const simple = this.cache.quotaMode === "simple";
    await btrfs.subvolumeDelete(path, signal, { kernelDropsQgroup: simple });
    if (!simple) this.scheduleQgroupReap();
  }

  private reapTimer: NodeJS.Timeout | undefined;
  private reaping: Promise<void> | undefined;

  /**
   * A deleted subvolume is dropped by the kernel's cleaner later; only then can its qgroup
   * go. Debounced, off the kill path: wait for the cleaner, then clear stale qgroups.
   */
  private scheduleQgroupReap(): void {
    if (this.reapTimer) return;
    this.reapTimer = setTimeout(() => {
      this.reapTimer = undefined;
      void this.reapQgroups().catch((e: unknown) => this.logger.warn({ err: e }, "clearing stale qgroups failed"));
    }, 500);
    this.reapTimer.unref();
  }

  /** Waits for deleted subvolumes to be dropped and removes their qgroups. */
  async reapQgroups(signal: AbortSignal = AbortSignal.timeout(120_000)): Promise<void> {
    if (this.reaping) return this.reaping;
    this.reaping = btrfs.clearStaleQgroups(this.cache.mountPath, signal).finally(() => {
      this.reaping = undefined;
    });
    return this.reaping;
  }

  /** Stops background work (agent stop). */
  async close(): Promise<void> {
    await Promise.all([this.warm.close(), this.warmFrom.close()]);
    if (this.reapTimer) {
      clearTimeout(this.reapTimer);
      this.reapTimer = undefined;
    }
    await this.reaping?.catch(() => undefined);
  }

  /**
   * The disk's referenced bytes, read from its qgroup's sysfs files: the node samples every
   * sandbox's disk (sandbox-metrics.ts), and a `btrfs qgroup show` process per sample was
   * most of an idle node's cost. The subvolume's id takes one `btrfs` call per disk; it is
   * kept while the subvolume at the path is the same one (its device number: each btrfs
   * subvolume has its own), and forgotten when the disk is released.
   */
  async usage(id: string, signal: AbortSignal): Promise<{ referencedBytes: number } | undefined> {
    const [referenced, base] = await Promise.all([this.#referenced(id, signal).catch(() => undefined), this.baseMib(id)]);
    return referenced === undefined ? undefined : { referencedBytes: referenced + base * 1048576 };
  }

  readonly #subvolumes = new Map<string, { dev: number; subvolumeId: number }>();

  async #referenced(id: string, signal: AbortSignal): Promise<number> {
    const path = this.sandboxPath(id);
    const { dev } = await stat(path);
    let known = this.#subvolumes.get(id);
    if (known?.dev !== dev) {
      known = { dev, subvolumeId: await btrfs.subvolumeId(path, signal) };
      this.#subvolumes.set(id, known);
    }
    const text = await readFile(join(this.cache.qgroupsDir, `0_${known.subvolumeId}`, "referenced"), "utf8");
    return Number(text.trim());
  }

  async listSandboxDisks(): Promise<string[]> {
    return (await readdir(this.cache.sandboxesDir).catch(() => [] as string[])).filter((n) => !n.startsWith("."));
  }
}
