/**
 * The node table's nft scripts, batched: a script that arrives while another runs waits for
 * it, and all that waited then run as one script (one `nft` process, one transaction). Most
 * of an `nft` run is its own start and its read of the table, not the script: a burst of
 * creates, kills or name bindings then pays for a few runs, not one each. A batch that fails
 * (one script's objects missing fails the whole transaction) runs each of its scripts alone,
 * so every caller gets its own answer.
 */

interface Waiting {
  script: string;
  resolve: () => void;
  reject: (e: unknown) => void;
  /** Removes the caller's abort listener. */
  settled: () => void;
}

/** Scripts joined into one run at most: one transaction stays small enough to fail cheaply. */
const MAX_BATCH = 64;

export class NftBatch {
  readonly #run: (script: string, signal: AbortSignal) => Promise<void>;
  readonly #timeoutMs: number;
  #waiting: Waiting[] = [];
  #running = false;

  /** `run` applies one script (e.g. `nft -f -`), rejecting when nft refuses it. */
  constructor(run: (script: string, signal: AbortSignal) => Promise<void>, timeoutMs: number) {
    this.#run = run;
    this.#timeoutMs = timeoutMs;
  }

  /**
   * Applies `script`, alone or with others. An abort while it waits takes it out of the
   * batch; once its batch has started it runs to the end under the batch's own deadline.
   */
  apply(script: string, signal: AbortSignal): Promise<void> {
    if (signal.aborted) return Promise.reject(signal.reason);
    return new Promise<void>((resolve, reject) => {
      const onAbort = () => {
        const i = this.#waiting.indexOf(w);
        if (i < 0) return;
        this.#waiting.splice(i, 1);
        reject(signal.reason);
      };
      const w: Waiting = { script, resolve, reject, settled: () => signal.removeEventListener("abort", onAbort) };
      signal.addEventListener("abort", onAbort, { once: true });
      this.#waiting.push(w);
      if (!this.#running) void this.#drain();
    });
  }

  /** Whether `script` applies: false when nft refuses it (objects already gone); an abort still throws. */
  applies(script: string, signal: AbortSignal): Promise<boolean> {
    return this.apply(script, signal).then(
      () => true,
      (e: unknown) => {
        if (signal.aborted) throw e;
        return false;
      },
    );
  }

  async #drain(): Promise<void> {
    this.#running = true;
    try {
      while (this.#waiting.length) {
        const batch = this.#waiting.splice(0, MAX_BATCH);
        for (const w of batch) w.settled();
        if (batch.length === 1 || !(await this.#tryAll(batch))) {
          for (const w of batch) await this.#one(w);
        }
      }
    } finally {
      this.#running = false;
    }
  }

  async #tryAll(batch: Waiting[]): Promise<boolean> {
    try {
      await this.#run(batch.map((w) => w.script).join(""), AbortSignal.timeout(this.#timeoutMs));
    } catch {
      return false;
    }
    for (const w of batch) w.resolve();
    return true;
  }

  async #one(w: Waiting): Promise<void> {
    try {
      await this.#run(w.script, AbortSignal.timeout(this.#timeoutMs));
      w.resolve();
    } catch (e) {
      w.reject(e);
    }
  }
}
