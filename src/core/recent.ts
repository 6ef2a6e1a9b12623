/**
 * Values believed for a short while after they were read: for hot-path reads whose answer
 * may lag the store briefly (auth, template and pool lookups). Bounded: cleared when full.
 */
export class Recent<V> {
  readonly #entries = new Map<string, { until: number; value: V }>();

  constructor(
    private readonly ms: number,
    private readonly max = 1000,
  ) {}

  get(key: string): V | undefined {
    const e = this.#entries.get(key);
    if (!e) return undefined;
    if (e.until > Date.now()) return e.value;
    this.#entries.delete(key);
    return undefined;
  }

  /** Keeps `value` for the default time, or less (`ms`). */
  set(key: string, value: V, ms = this.ms): void {
    if (this.#entries.size >= this.max) this.#entries.clear();
    this.#entries.set(key, { until: Date.now() + Math.min(ms, this.ms), value });
  }

  delete(key: string): void {
    this.#entries.delete(key);
  }

  clear(): void {
    this.#entries.clear();
  }
}
