/**
 * Background rounds on a node or control plane: `Periodic` runs `round` every `intervalMs`,
 * never two at once (a slow round makes the next tick skip, not pile up), and `stop` waits
 * for the round in flight; `forEachLimit` walks items with at most `limit` in flight.
 */
export class Periodic {
  readonly #intervalMs: number;
  readonly #round: () => Promise<void>;
  #timer: NodeJS.Timeout | undefined;
  #inFlight: Promise<void> | undefined;

  constructor(intervalMs: number, round: () => Promise<void>) {
    this.#intervalMs = intervalMs;
    this.#round = round;
  }

  start(): void {
    if (this.#timer) return;
    this.#timer = setInterval(() => {
      this.#inFlight ??= this.#round().finally(() => (this.#inFlight = undefined));
    }, this.#intervalMs);
    this.#timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.#timer);
    this.#timer = undefined;
    await this.#inFlight;
  }
}

/** `fn` over `items`, at most `limit` at a time; rejects with the first failure. */
export async function forEachLimit<T>(items: readonly T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  const queue = [...items];
  const worker = async (): Promise<void> => {
    for (let item = queue.shift(); item !== undefined; item = queue.shift()) await fn(item);
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, queue.length)) }, worker));
}
