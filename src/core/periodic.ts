import { setTimeout as sleep } from "node:timers/promises";

/**
 * Background rounds on a node or control plane: `Periodic` runs `round` every `intervalMs`,
 * never two at once (a slow round makes the next tick skip, not pile up), and `stop` aborts
 * the round's signal and waits for the round in flight; `forEachLimit` walks items with at
 * most `limit` in flight, `forEachPaced` the same spread over a span.
 */
export class Periodic {
  readonly #intervalMs: number;
  readonly #round: (signal: AbortSignal) => Promise<void>;
  #timer: NodeJS.Timeout | undefined;
  #inFlight: Promise<void> | undefined;
  #stopping = new AbortController();

  constructor(intervalMs: number, round: (signal: AbortSignal) => Promise<void>) {
    this.#intervalMs = intervalMs;
    this.#round = round;
  }

  start(): void {
    if (this.#timer) return;
    this.#stopping = new AbortController();
    const signal = this.#stopping.signal;
    this.#timer = setInterval(() => {
      this.#inFlight ??= this.#round(signal).finally(() => (this.#inFlight = undefined));
    }, this.#intervalMs);
    this.#timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.#stopping.abort();
    await this.#inFlight;
  }
}

/**
 * `fn` over `items`, at most `limit` at a time, item i started no sooner than
 * `spanMs * i / items.length` after the first: a round over hundreds of sandboxes spread
 * over its interval instead of a burst that holds the process's event loop (and the
 * commands waiting on it) for hundreds of milliseconds. No item starts once `signal` aborts.
 */
export async function forEachPaced<T>(items: readonly T[], limit: number, spanMs: number, signal: AbortSignal, fn: (item: T) => Promise<void>): Promise<void> {
  const t0 = performance.now();
  const gapMs = items.length ? spanMs / items.length : 0;
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length && !signal.aborted) {
      const i = next++;
      const waitMs = t0 + i * gapMs - performance.now();
      if (waitMs > 0) await sleep(waitMs, undefined, { signal }).catch(() => undefined);
      if (signal.aborted) return;
      await fn(items[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, worker));
}

/** `fn` over `items`, at most `limit` at a time; rejects with the first failure. */
export async function forEachLimit<T>(items: readonly T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  const queue = [...items];
  const worker = async (): Promise<void> => {
    for (let item = queue.shift(); item !== undefined; item = queue.shift()) await fn(item);
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, queue.length)) }, worker));
}
