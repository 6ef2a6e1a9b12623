/**
 * The gateway's memory of where running sandboxes are. Only routable records (running,
 * on a node) are kept, for `ttlMs`; a miss (unknown, paused, resuming, killed) is never
 * kept: the next request reads the store again, so a sandbox is routable the moment it
 * runs, whichever process resumed it. Published records (SandboxService `started`) and
 * `forget` (ended) win over a read that was already in flight when they came: such a
 * read answers its own callers but does not overwrite the cache.
 */
import type { SandboxId } from "../../core/ids.ts";
import type { SandboxRecord, SandboxRepo } from "../../sandboxes/model.ts";

const SANDBOX_ID = /^[a-z0-9]{20}$/;
const MAX_ENTRIES = 10_000;

export function isRoutable(rec: SandboxRecord): boolean {
  return rec.state === "running" && rec.nodeId !== null;
}

export class RouteCache {
  readonly #repo: Pick<SandboxRepo, "getById">;
  readonly #ttlMs: number;
  readonly #routes = new Map<string, { rec: SandboxRecord; until: number }>();
  /** Reads in flight per id (concurrent lookups share one) with the change count they started at. */
  readonly #reads = new Map<string, { changes: number; rec: Promise<SandboxRecord | null> }>();
  /** Counts publishes and forgets, so a read that started before one never overwrites it. */
  #changes = 0;

  constructor(repo: Pick<SandboxRepo, "getById">, ttlMs: number) {
    this.#repo = repo;
    this.#ttlMs = ttlMs;
  }

  /** The sandbox's record: cached when routable, else as the store has it now (null when unknown). */
  async lookup(id: string): Promise<SandboxRecord | null> {
    const hit = this.#routes.get(id);
    if (hit && hit.until > Date.now()) return hit.rec;
    if (!SANDBOX_ID.test(id)) return null;
    let read = this.#reads.get(id);
    if (!read) {
      const started = { changes: this.#changes, rec: this.#repo.getById(id as SandboxId) };
      read = started;
      this.#reads.set(id, started);
      void started.rec
        .then((rec) => {
          if (this.#changes !== started.changes) return;
          if (rec && isRoutable(rec)) this.#keep(rec);
          else this.#routes.delete(id);
        })
        .catch(() => undefined)
        .finally(() => {
          if (this.#reads.get(id) === started) this.#reads.delete(id);
        });
    }
    return read.rec;
  }

  /** A record fresh from a write: routable → kept, else forgotten. */
  publish(rec: SandboxRecord): void {
    this.#changes++;
    if (isRoutable(rec)) this.#keep(rec);
    else this.#routes.delete(rec.id);
  }

  forget(id: string): void {
    this.#changes++;
    this.#routes.delete(id);
  }

  #keep(rec: SandboxRecord): void {
    const now = Date.now();
    this.#routes.set(rec.id, { rec, until: now + this.#ttlMs });
    if (this.#routes.size > MAX_ENTRIES) for (const [k, v] of this.#routes) if (v.until <= now) this.#routes.delete(k);
  }
}
