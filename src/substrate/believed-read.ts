/**
 * A read placement believes for up to `maxAgeMs`: one read is shared by every caller within
 * the age; an older value is still served (for up to twice the age) while one refresh runs in
 * the background, so a caller rarely waits for the read; `{ fresh: true }` reads through. A
 * value is dated when its read started (what it reflects), on `now`'s clock.
 */

/** How long one refresh may take before the callers waiting on it fail (its own deadline, shared by them). */
const REFRESH_TIMEOUT_MS = 30_000;

export interface Dated<T> {
  at: number;
  value: T;
}

export class BelievedRead<T> {
  #last: Dated<T> | undefined;
  #reading: Promise<Dated<T>> | undefined;

  constructor(
    private readonly read: (signal: AbortSignal) => Promise<T>,
    private readonly maxAgeMs: number,
    readonly now: () => number = () => performance.now(),
  ) {}

  async get(signal: AbortSignal, opts: { fresh?: boolean } = {}): Promise<Dated<T>> {
    const s = this.#last;
    const age = s ? this.now() - s.at : Infinity;
    if (!opts.fresh && s && age < this.maxAgeMs) return s;
    const reading = this.#refresh();
    if (!opts.fresh && s && age < 2 * this.maxAgeMs) {
      reading.catch(() => {}); // the next caller past the age sees the failure
      return s;
    }
    return abortable(reading, signal);
  }

  /** The last value if it is within the age, without reading. */
  current(): Dated<T> | undefined {
    const s = this.#last;
    return s && this.now() - s.at < this.maxAgeMs ? s : undefined;
  }

  /** One read at a time. */
  #refresh(): Promise<Dated<T>> {
    this.#reading ??= (async () => {
      const at = this.now();
      try {
        const s = { at, value: await this.read(AbortSignal.timeout(REFRESH_TIMEOUT_MS)) };
        if (!this.#last || this.#last.at <= at) this.#last = s;
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
