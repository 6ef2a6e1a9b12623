/**
 * The node's snapshot reaper: frees local snapshot copies (memory image + read-only disk
 * subvolume) to keep the node cache under its target, but only copies whose every part
 * is durable in the blob store (a restore anywhere can fetch them again), never one a
 * restore is using, never one younger than the grace period. Order: copies unused for
 * `idleMs` go whatever the usage; then, while usage is above `target`, the least
 * recently used. Copies that exist only here (not published) are the control plane's
 * to delete, never the reaper's.
 */
import { statfs } from "node:fs/promises";
import { subvolumeSync } from "../disk/btrfs.ts";
import type { Logger } from "../../core/log.ts";
import type { LocalSnapshot, NodeSnapshots } from "./node-snapshots.ts";

export interface SnapshotReaperOptions {
  /** Fraction of the cache's disk above which copies are freed (release default 0.40). */
  target: number;
  intervalMs: number;
  graceMs: number;
  idleMs: number;
  logger: Logger;
  /** Used fraction of the cache's disk (default: statfs of `cachePath` once btrfs has cleaned deleted subvolumes). */
  usage?: () => Promise<number>;
}

export interface ReapResult {
  usageBefore: number;
  usageAfter: number;
  freed: { snapshotId: string; why: "idle" | "over_target" }[];
}

export class SnapshotReaper {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<unknown> | undefined;
  private readonly usage: () => Promise<number>;

  constructor(
    private readonly snapshots: NodeSnapshots,
    cachePath: string,
    private readonly o: SnapshotReaperOptions,
  ) {
    // btrfs frees a deleted subvolume's extents in the background: wait for it before measuring.
    this.usage =
      o.usage ??
      (async () => {
        await subvolumeSync(cachePath);
        return usedFraction(cachePath);
      });
  }

  start(): void {
    this.timer = setInterval(() => {
      if (this.running) return;
      this.running = this.sweep()
        .catch((e: unknown) => this.o.logger.warn({ err: e }, "snapshot reaper sweep failed"))
        .finally(() => (this.running = undefined));
    }, this.o.intervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.running;
  }

  async sweep(now = Date.now()): Promise<ReapResult> {
    const usageBefore = await this.usage();
    const eligible = (await this.snapshots.listLocal())
      .filter((s) => s.durable && !s.inUse && now - s.createdAt.getTime() >= this.o.graceMs)
      .sort((a, b) => a.lastUsedAt.getTime() - b.lastUsedAt.getTime());
    const freed: ReapResult["freed"] = [];
    const free = async (s: LocalSnapshot, why: "idle" | "over_target") => {
      if (await this.snapshots.reap(s.snapshotId)) freed.push({ snapshotId: s.snapshotId, why });
    };
    const rest: LocalSnapshot[] = [];
    for (const s of eligible) {
      if (now - s.lastUsedAt.getTime() >= this.o.idleMs) await free(s, "idle");
      else rest.push(s);
    }
    let usage = freed.length ? await this.usage() : usageBefore;
    for (const s of rest) {
      if (usage <= this.o.target) break;
      await free(s, "over_target");
      usage = await this.usage();
    }
    if (freed.length) this.o.logger.info({ freed, usageBefore, usageAfter: usage, target: this.o.target }, "snapshot reaper freed local copies");
    return { usageBefore, usageAfter: usage, freed };
  }
}

/** Used fraction of the filesystem holding `path`. */
export async function usedFraction(path: string): Promise<number> {
  const s = await statfs(path);
  return s.blocks > 0 ? 1 - s.bavail / s.blocks : 0;
}
