/**
 * The node's copy of each sandbox's logs: envd's ring (src/envd/log-ring.ts) pulled by
 * sequence number into a bounded ring per sandbox, written to `<node dir>/sandbox-logs/<id>.json`
 * so it outlives the sandbox (kill, suspend) and the node agent, and deleted `retentionMs`
 * after the sandbox left the node.
 *
 * Cursor rules: envd's `boot` changes when envd starts afresh (stop/start, a boot from
 * disk), and then the cursor starts again at 0. A sandbox restored from another sandbox's
 * checkpoint (a fork, a template's capture) starts at envd's head: its envd remembers
 * the source's lines, which are not this sandbox's. A restore of the sandbox itself (on any
 * node) keeps envd's ring, so a node that never saw it gets its whole history.
 */
import { mkdir, readdir, readFile, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "../../core/log.ts";
import { WholeFiles } from "../../core/whole-files.ts";
import { LOG_TEXT_MAX, type EnvdLogsPage, type SandboxLogEntry } from "../../contract/envd-logs.ts";
import { selectLogs, type LogQuery } from "../../contract/sandbox-logs.ts";

/** Where envd of a running sandbox answers. */
export interface EnvdTarget {
  host: string;
  port: number;
  accessToken: string | undefined;
}

/** One page of sandbox `id`'s log ring after `after` (at most `limit` entries; envd's page size when absent), from its envd at `t`. */
export type FetchPage = (id: string, t: EnvdTarget, after: number, limit?: number) => Promise<EnvdLogsPage>;

interface Ring {
  boot?: string;
  seq: number;
  entries: SandboxLogEntry[];
  /** When the sandbox left the node (ms since epoch); undefined while it is here. */
  endedAt?: number;
  /** The next pull starts the cursor at envd's head (restored from another sandbox's checkpoint). */
  skipInherited?: boolean;
}

export interface SandboxLogStoreOptions {
  dir: string;
  /** Entries kept per sandbox (oldest dropped first). */
  maxEntries: number;
  /** How long a sandbox's logs stay after it left the node. */
  retentionMs: number;
  fetchPage: FetchPage;
  logger: Logger;
  now?: () => number;
}

const ID = /^[a-z0-9]{20}$/;
/** Pages one pull reads at most (a ring is at most LOGS_PAGE_MAX per page). */
const PAGES_PER_PULL = 5;

export class SandboxLogStore {
  readonly #o: SandboxLogStoreOptions;
  readonly #rings = new Map<string, Ring>();
  readonly #pulls = new Map<string, Promise<void>>();
  /** Arrivals of sandboxes whose ring is not loaded yet (value: inherited), applied when it loads. */
  readonly #arrivals = new Map<string, boolean>();
  readonly #now: () => number;
  readonly #files = new WholeFiles();

  constructor(o: SandboxLogStoreOptions) {
    this.#o = o;
    this.#now = o.now ?? Date.now;
  }

  #path(id: string): string {
    return join(this.#o.dir, `${id}.json`);
  }

  async #ring(id: string): Promise<Ring> {
    let r = this.#rings.get(id);
    if (r) return r;
    const raw = await readFile(this.#path(id), "utf8").catch(() => undefined);
    let loaded: Ring = { seq: 0, entries: [] };
    if (raw !== undefined) {
      try {
        const j = JSON.parse(raw) as Ring;
        if (Array.isArray(j.entries) && typeof j.seq === "number") loaded = j;
      } catch {
        /* a torn file: start over */
      }
    }
    r = this.#rings.get(id) ?? loaded;
    this.#rings.set(id, r);
    const inherited = this.#arrivals.get(id);
    if (inherited !== undefined) {
      this.#arrivals.delete(id);
      arrive(r, inherited);
    }
    return r;
  }

  /** Whole (core/whole-files.ts): a few lines' ring fits in a page and is rewritten in place. */
  async #save(id: string, r: Ring): Promise<void> {
    await mkdir(this.#o.dir, { recursive: true });
    await this.#files.write(this.#path(id), JSON.stringify(r));
  }

  /**
   * The sandbox is (again) on this node; `inherited`: restored from another sandbox's
   * checkpoint. No I/O (it is on the create path): a ring not loaded yet gets it when it loads.
   */
  arrived(id: string, inherited: boolean): void {
    const r = this.#rings.get(id);
    if (r) arrive(r, inherited);
    else this.#arrivals.set(id, inherited || this.#arrivals.get(id) === true);
  }

  /** The sandbox left the node: its logs are kept `retentionMs` from now. */
  async left(id: string): Promise<void> {
    await this.#pulls.get(id);
    const r = await this.#ring(id);
    r.endedAt = this.#now();
    await this.#save(id, r);
  }

  /** Reads what envd has beyond the cursor; one pull per sandbox at a time (a second caller waits for it). */
  pull(id: string, target: EnvdTarget): Promise<void> {
    const inFlight = this.#pulls.get(id);
    if (inFlight) return inFlight;
    const p = this.#pull(id, target).finally(() => this.#pulls.delete(id));
    this.#pulls.set(id, p);
    return p;
  }

  /** A pull that starts after any in flight has ended (the last one before a checkpoint or an end). */
  async pullFresh(id: string, target: EnvdTarget): Promise<void> {
    await this.#pulls.get(id)?.catch(() => undefined);
    await this.pull(id, target);
  }

  async #pull(id: string, target: EnvdTarget): Promise<void> {
    const r = await this.#ring(id);
    if (r.skipInherited) {
      // Restored from another sandbox's checkpoint: every line envd holds now is the source's.
      // Only its boot and head are wanted (no entries), and nothing lies beyond that head yet.
      const page = await this.#o.fetchPage(id, target, 0, 0);
      r.boot = page.boot;
      r.seq = page.head;
      delete r.skipInherited;
      await this.#save(id, r);
      return;
    }
    let added = false;
    for (let i = 0; i < PAGES_PER_PULL; i++) {
      const after = r.seq;
      let page = await this.#o.fetchPage(id, target, after);
      if (page.boot !== r.boot) {
        r.boot = page.boot;
        r.seq = 0;
        added = true;
        if (after !== 0) page = await this.#o.fetchPage(id, target, 0);
      }
      const fresh = page.entries.filter((e) => e.seq > r.seq);
      if (fresh.length === 0) break;
      for (const e of fresh) r.entries.push(toEntry(e));
      r.seq = fresh[fresh.length - 1]!.seq;
      added = true;
      if (page.head <= r.seq) break;
    }
    if (r.entries.length > this.#o.maxEntries) r.entries.splice(0, r.entries.length - this.#o.maxEntries);
    if (added) await this.#save(id, r);
  }

  async query(id: string, q: LogQuery): Promise<SandboxLogEntry[]> {
    if (!ID.test(id)) return [];
    return selectLogs((await this.#ring(id)).entries, q);
  }

  /** Deletes the logs of sandboxes gone longer than the retention (also files a restarted agent never loaded). */
  async sweep(isHere: (id: string) => boolean): Promise<void> {
    const now = this.#now();
    for (const [id, r] of this.#rings) {
      if (r.endedAt !== undefined && now - r.endedAt > this.#o.retentionMs && !this.#pulls.has(id) && !isHere(id)) {
        this.#rings.delete(id);
        this.#files.forget(this.#path(id));
        await rm(this.#path(id), { force: true });
      }
    }
    for (const f of await readdir(this.#o.dir).catch(() => [] as string[])) {
      const id = f.replace(/\.json(\.tmp|\.new)?$/, "");
      if (!ID.test(id) || this.#rings.has(id) || isHere(id)) continue;
      const st = await stat(join(this.#o.dir, f)).catch(() => undefined);
      if (st && now - st.mtimeMs > this.#o.retentionMs) await rm(join(this.#o.dir, f), { force: true });
    }
  }
}

function arrive(r: Ring, inherited: boolean): void {
  delete r.endedAt;
  if (inherited) r.skipInherited = true;
}

/** Characters one kept entry may hold (message, field names and values): a sandbox's copy stays under ~8 MiB at 1000 entries. */
const ENTRY_CHARS_MAX = 2 * LOG_TEXT_MAX;

/** envd's entry as kept: no sequence number, texts bounded (envd is the sandbox's, not trusted). */
function toEntry(e: EnvdLogsPage["entries"][number]): SandboxLogEntry {
  const message = e.message.slice(0, LOG_TEXT_MAX);
  let left = ENTRY_CHARS_MAX - message.length;
  const fields: Record<string, string> = {};
  for (const [k, v] of Object.entries(e.fields).slice(0, 32)) {
    const key = k.slice(0, 64);
    const value = v.slice(0, Math.max(0, left - key.length));
    if (left - key.length <= 0) break;
    fields[key] = value;
    left -= key.length + value.length;
  }
  const t = Date.parse(e.timestamp);
  return { timestamp: Number.isFinite(t) ? new Date(t).toISOString() : new Date().toISOString(), level: e.level, message, fields };
}
