/**
 * Warm disks: for each template a create used on this node, a few writable
 * snapshots of it made ahead, so the next create renames one into place (a rename, tens of
 * µs) instead of waiting for `btrfs subvolume snapshot` (15–25 ms here: a transaction
 * commit, longer with more qgroups). A disk is made of the template as it is at that
 * moment and tagged with the template subvolume's identity (its device number: each
 * subvolume has its own, and a template swapped in place is a new subvolume); one whose
 * template changed since is deleted, never handed out. The maker (Disks) also reads the files
 * every start reads into the new disk's page cache (prefetch.ts). Refills wait for a quiet moment
 * (no disk taken for `quietMs`), one disk at a time per template, so a burst of creates is
 * not slowed by their snapshots. Each disk is given out once. Only the `templates` most
 * recently used keep warm disks: a node serving many templates does not hold disks for
 * all of them.
 */
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { randomId } from "../../core/ids.ts";
import type { Logger } from "../../core/log.ts";

export interface WarmDisksOptions {
  /** Disks kept per template; 0: none. */
  size: number;
  /** Templates that keep warm disks: the most recently used ones. */
  templates: number;
  /** Where warm disks wait: the directory sandbox disks are renamed into (one filesystem). */
  dir: string;
  /** A refill starts once no disk of the template was taken for this long. */
  quietMs: number;
  /** Names this kind's disks (`<prefix><key>-<random>`; default `.warm-`): each kind sweeps only its own leftovers, so no prefix may start another. */
  prefix?: string;
  /** Makes a writable snapshot of `template` at `path`. */
  make(template: string, path: string, signal: AbortSignal): Promise<void>;
  /** The template subvolume's identity now; undefined when it is gone. */
  identity(template: string): Promise<number | undefined>;
  /** Deletes a warm disk (absent = ok). */
  remove(path: string): Promise<void>;
  logger: Logger;
}

const PREFIX = ".warm-";
/** A key as a file name (template names already are one; a path is not). */
const fileSafe = (key: string) => key.replace(/[^A-Za-z0-9._-]/g, "_").slice(-80);

interface Made {
  path: string;
  identity: number;
}

export class WarmDisks {
  readonly #o: WarmDisksOptions;
  readonly #ready = new Map<string, Made[]>();
  readonly #timers = new Map<string, NodeJS.Timeout>();
  readonly #filling = new Map<string, Promise<void>>();
  readonly #stop = new AbortController();
  /** Templates by last use, oldest first: those beyond `templates` lose their disks. */
  readonly #used = new Set<string>();
  /** Bumped by each drop: a disk whose make began before the drop is deleted, never kept. */
  readonly #drops = new Map<string, number>();
  /** Leftovers of an earlier agent (a crash leaves them) are deleted before the first fill. */
  #swept: Promise<void> | undefined;

  constructor(o: WarmDisksOptions) {
    this.#o = o;
  }

  /** Disks ready per template (tests, metrics). */
  readyCount(template: string): number {
    return this.#ready.get(template)?.length ?? 0;
  }

  /** Disks ready, by template (the node's metrics). */
  ready(): Map<string, number> {
    return new Map([...this.#ready].map(([t, made]) => [t, made.length]));
  }

  /**
   * A warm disk of `template` as it is now, taken (the caller renames
   * it into place and owns it), or undefined. Schedules the refill either way.
   */
  async take(template: string): Promise<string | undefined> {
    if (this.#o.size <= 0) return undefined;
    this.#use(template);
    this.#schedule(template);
    if (!this.#ready.get(template)?.length) return undefined;
    const identity = await this.#o.identity(template);
    const made = this.#ready.get(template)?.shift();
    if (!made) return undefined;
    if (made.identity !== identity) {
      this.#discard([made]);
      this.drop(template);
      this.#schedule(template);
      return undefined;
    }
    return made.path;
  }

  /** Deletes `template`'s disks, and the one being made (it was re-pointed, rewritten, evicted or deleted); the next use fills again. */
  drop(template: string): void {
    this.#drops.set(template, (this.#drops.get(template) ?? 0) + 1);
    clearTimeout(this.#timers.get(template));
    this.#timers.delete(template);
    const made = this.#ready.get(template);
    this.#ready.delete(template);
    if (made?.length) this.#discard(made);
  }

  /** Stops refills and deletes every warm disk. */
  async close(): Promise<void> {
    this.#stop.abort();
    for (const t of this.#timers.values()) clearTimeout(t);
    this.#timers.clear();
    await Promise.allSettled(this.#filling.values());
    const all = [...this.#ready.values()].flat();
    this.#ready.clear();
    await Promise.allSettled(all.map((m) => this.#o.remove(m.path)));
  }

  #use(template: string): void {
    this.#used.delete(template);
    this.#used.add(template);
    for (const oldest of this.#used) {
      if (this.#used.size <= this.#o.templates) break;
      this.#used.delete(oldest);
      clearTimeout(this.#timers.get(oldest));
      this.#timers.delete(oldest);
      this.drop(oldest);
    }
  }

  #schedule(template: string): void {
    if (this.#stop.signal.aborted) return;
    clearTimeout(this.#timers.get(template));
    const timer = setTimeout(() => {
      this.#timers.delete(template);
      const drops = this.#drops.get(template);
      // After a fill still under way (it stops at its next disk: a take came), never beside it.
      const before = this.#filling.get(template);
      const run: Promise<void> = (async () => {
        await before;
        await this.#fill(template, drops);
      })().finally(() => {
        if (this.#filling.get(template) === run) this.#filling.delete(template);
      });
      this.#filling.set(template, run);
    }, this.#o.quietMs);
    timer.unref();
    this.#timers.set(template, timer);
  }

  /** `drops`: the template's drop count when the fill was due; a drop since ends it. */
  async #fill(template: string, drops: number | undefined): Promise<void> {
    this.#swept ??= this.#sweep();
    await this.#swept;
    const signal = this.#stop.signal;
    try {
      // Stops at the size, at close, at a drop, when a take arrives (it schedules the next fill) and when the template is no longer among the recent.
      const current = () => !signal.aborted && this.#used.has(template) && this.#drops.get(template) === drops;
      while (current() && !this.#timers.has(template) && this.readyCount(template) < this.#o.size) {
        const identity = await this.#o.identity(template);
        if (identity === undefined) return;
        const path = join(this.#o.dir, `${this.#o.prefix ?? PREFIX}${fileSafe(template)}-${randomId(8)}`);
        try {
          await this.#o.make(template, path, signal);
        } catch (e) {
          await this.#o.remove(path).catch(() => undefined);
          throw e;
        }
        if (!current()) {
          await this.#o.remove(path);
          return;
        }
        const list = this.#ready.get(template) ?? [];
        list.push({ path, identity });
        this.#ready.set(template, list);
      }
    } catch (e: unknown) {
      if (!signal.aborted) this.#o.logger.warn({ template, err: e }, "making a warm disk failed; creates snapshot their own");
    }
  }

  #discard(made: Made[]): void {
    for (const m of made) void this.#o.remove(m.path).catch((e: unknown) => this.#o.logger.warn({ path: m.path, err: e }, "deleting a warm disk failed"));
  }

  async #sweep(): Promise<void> {
    const names = await readdir(this.#o.dir).catch(() => [] as string[]);
    const prefix = this.#o.prefix ?? PREFIX;
    await Promise.allSettled(names.filter((n) => n.startsWith(prefix)).map((n) => this.#o.remove(join(this.#o.dir, n))));
  }
}
