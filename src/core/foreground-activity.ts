/**
 * What the node's background rounds yield to: the creates and adoptions (`init`) a caller
 * is waiting for. The telemetry's samples and log pulls and the health watchdog's checks
 * are work nobody waits for; inside a burst of creates each one took the cores the burst's
 * restores and first commands wait for (a cold create was sampled and pulled ~1 s after it
 * ran, and every round met the burst's sandboxes). They now wait until no such operation
 * has run for `quietMs`, but never longer than the wait they ask for: deferred, not starved.
 */
export class ForegroundActivity {
  readonly #quietMs: number;
  #inFlight = 0;
  #quiet = true;
  #quietTimer: NodeJS.Timeout | undefined;
  readonly #waiters = new Set<() => void>();

  constructor(quietMs = DEFAULT_QUIET_MS) {
    this.#quietMs = quietMs;
  }

  /** Runs `fn` as foreground work: the node is not quiet until `quietMs` after the last such call ended. */
  async run<T>(fn: () => Promise<T>): Promise<T> {
    this.#inFlight++;
    this.#quiet = false;
    clearTimeout(this.#quietTimer);
    try {
      return await fn();
    } finally {
      if (--this.#inFlight === 0) {
        this.#quietTimer = setTimeout(() => this.#becomeQuiet(), this.#quietMs);
      }
    }
  }

  get quiet(): boolean {
    return this.#quiet;
  }

  /** Resolves once the node is quiet, after `maxWaitMs` at the latest, or at once when `signal` aborts. */
  untilQuiet(maxWaitMs: number, signal?: AbortSignal): Promise<void> {
    if (this.#quiet || maxWaitMs <= 0 || signal?.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.#waiters.delete(done);
        signal?.removeEventListener("abort", done);
        resolve();
      };
      const timer = setTimeout(done, maxWaitMs);
      this.#waiters.add(done);
      signal?.addEventListener("abort", done, { once: true });
    });
  }

  #becomeQuiet(): void {
    this.#quiet = true;
    for (const w of [...this.#waiters]) w();
  }
}

/** A burst's creates arrive tens of milliseconds apart at most; a gap this long ends it. */
export const DEFAULT_QUIET_MS = 300;
