/**
 * A node directory placement reads at most every `maxAgeMs` (SPACE_PLACEMENT_DIRECTORY_MAX_AGE_MS):
 * reading every node row per decision costs O(fleet) per create (hundreds of ms at 10,000
 * nodes, docs/scale.md), while what the rows say changes only on heartbeats (every 5 s) and
 * admin actions. One read is shared by every decision within the age (believed-read.ts).
 * `list`/`get` with `{ fresh: true }` read through: a placement that found no room asks
 * again on fresh rows before it refuses, and one that found a node confirms that node's
 * status on its fresh row (a drain since the read). A snapshot cannot show what was started
 * after its read began; the Direct substrate keeps counting those placements as in flight
 * until a newer snapshot (direct-substrate.ts).
 */
import type { NodeDirectory, NodeEntry, NodeListOptions } from "./node-directory.ts";
import { BelievedRead } from "./believed-read.ts";

export interface Snapshot {
  at: number;
  nodes: NodeEntry[];
  byId: ReadonlyMap<string, NodeEntry>;
}

export class CachedNodeDirectory implements NodeDirectory {
  readonly #rows: BelievedRead<Omit<Snapshot, "at">>;

  constructor(
    private readonly inner: NodeDirectory,
    maxAgeMs: number,
    /** The clock snapshots are dated by (ms, monotonic). */
    readonly now: () => number = () => performance.now(),
  ) {
    this.#rows = new BelievedRead(
      async (signal) => {
        const nodes = await inner.list(signal, { fresh: true });
        return { nodes, byId: new Map(nodes.map((n) => [n.id, n])) };
      },
      maxAgeMs,
      now,
    );
  }

  async list(signal: AbortSignal, opts: NodeListOptions = {}): Promise<NodeEntry[]> {
    return (await this.snapshot(signal, opts)).nodes;
  }

  /** The nodes and when (on `now`'s clock) the read they come from started. */
  async snapshot(signal: AbortSignal, opts: NodeListOptions = {}): Promise<Snapshot> {
    const { at, value } = await this.#rows.get(signal, opts);
    return { at, ...value };
  }

  async get(id: string, signal: AbortSignal, opts: NodeListOptions = {}): Promise<NodeEntry | null> {
    const hit = opts.fresh ? undefined : this.#rows.current()?.value.byId.get(id);
    return hit ?? this.inner.get(id, signal);
  }
}
