/**
 * A node directory placement reads at most every `maxAgeMs` (SPACE_PLACEMENT_DIRECTORY_MAX_AGE_MS):
 * reading every node row per decision costs O(fleet) per create (hundreds of ms at 10,000
 * nodes, docs/scale.md), while what the rows say changes only on heartbeats (every 5 s) and
 * admin actions. One read is shared by every decision within the age; an older snapshot is
 * still served (for up to twice the age) while one refresh runs in the background, so a
 * decision rarely waits for the read. `list`/`get` with `{ fresh: true }` read through: a
 * placement that found no room asks again on fresh rows before it refuses, and one that
 * found a node confirms that node's status on its fresh row (a drain since the read). A snapshot cannot
 * show what was started after its read began; the Direct substrate keeps counting those
 * placements as in flight until a newer snapshot (direct-substrate.ts).
 */
import type { NodeDirectory, NodeEntry, NodeListOptions } from "./node-directory.ts";

/** How long one refresh may take before the callers waiting on it fail (its own deadline, shared by them). */
const REFRESH_TIMEOUT_MS = 30_000;

export interface Snapshot {
  at: number;
  nodes: NodeEntry[];
  byId: ReadonlyMap<string, NodeEntry>;
}

export class CachedNodeDirectory implements NodeDirectory {
  #snapshot: Snapshot | undefined;
  #reading: Promise<Snapshot> | undefined;

  constructor(
    private readonly inner: NodeDirectory,
    private readonly maxAgeMs: number,
    /** The clock snapshots are dated by (ms, monotonic). */
    readonly now: () => number = () => performance.now(),
  ) {}

  async list(signal: AbortSignal, opts: NodeListOptions = {}): Promise<NodeEntry[]> {
    return (await this.snapshot(signal, opts)).nodes;
  }

  /** The nodes and when (on `now`'s clock) the read they come from started. */
  async snapshot(signal: AbortSignal, opts: NodeListOptions = {}): Promise<Snapshot> {
    const s = this.#snapshot;
    const age = s ? this.now() - s.at : Infinity;
    if (!opts.fresh && s && age < this.maxAgeMs) return s;
    const reading = this.#refresh();
    if (!opts.fresh && s && age < 2 * this.maxAgeMs) {
      reading.catch(() => {}); // the next caller past the age sees the failure
      return s;
    }
    return abortable(reading, signal);
  }

  async get(id: string, signal: AbortSignal, opts: NodeListOptions = {}): Promise<NodeEntry | null> {
    const s = this.#snapshot;
    const hit = !opts.fresh && s && this.now() - s.at < this.maxAgeMs ? s.byId.get(id) : undefined;
    return hit ?? this.inner.get(id, signal);
  }

  /** One read at a time; the snapshot is dated when the read started (what it reflects). */
  #refresh(): Promise<Snapshot> {
    this.#reading ??= (async () => {
      const at = this.now();
      try {
        const nodes = await this.inner.list(AbortSignal.timeout(REFRESH_TIMEOUT_MS), { fresh: true });
        const s = { at, nodes, byId: new Map(nodes.map((n) => [n.id, n])) };
        if (!this.#snapshot || this.#snapshot.at <= at) this.#snapshot = s;
        return s;
      } finally {
        this.#reading = undefined;
      }
    })();
    return this.#reading;
  }
}

function abortable<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}
