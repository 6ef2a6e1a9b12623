/**
 * How many sandboxes start at once on this node: the span from the runtime start (or CRIU
 * restore) to envd's readiness, the CPU-heavy part of a boot (a Node.js start is ~90 ms of
 * CPU). A burst of 100 cold creates on a 2-core node started all 100 inits together: each
 * got 1/50 of a core, none was ready before most were, and some missed envd's ready
 * deadline (503). Queued, they are ready in arrival order at the same total CPU, and the
 * deadline counts from a boot's own start.
 *
 * Requests someone waits for go first; background boots (warm pool refills) take what is
 * left. The disk and network set-up before the queue stay concurrent (I/O and short execs).
 */
import { availableParallelism } from "node:os";
import PQueue from "p-queue";

const FOREGROUND = 1;
const BACKGROUND = 0;

export class BootQueue {
  readonly #queue: PQueue;

  /** `limit` 0 = twice the CPUs this process may use. */
  constructor(limit: number) {
    this.#queue = new PQueue({ concurrency: limit > 0 ? limit : 2 * availableParallelism() });
  }

  get concurrency(): number {
    return this.#queue.concurrency;
  }

  /** Boots waiting for their turn. */
  get waiting(): number {
    return this.#queue.size;
  }

  /** Runs `boot` when a place is free; a signal aborted while waiting rejects without running it. */
  run<T>(background: boolean, signal: AbortSignal, boot: () => Promise<T>): Promise<T> {
    return this.#queue.add(boot, { priority: background ? BACKGROUND : FOREGROUND, signal });
  }
}
