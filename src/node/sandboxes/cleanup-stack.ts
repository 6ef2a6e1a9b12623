/**
 * LIFO, run-once cleanup: register each release on the line after its acquire; on
 * failure `run()` undoes everything in reverse order and aggregates errors; on success
 * `move()` hands the releases to their new owner (the sandbox).
 */
export type Release = () => Promise<void> | void;

export class CleanupStack {
  private releases: { name: string; fn: Release }[] = [];
  private done = false;

  defer(name: string, fn: Release): void {
    if (this.done) throw new Error("CleanupStack already ran");
    this.releases.push({ name, fn });
  }

  /** Takes the releases out (this stack becomes empty). */
  move(): CleanupStack {
    const s = new CleanupStack();
    s.releases = this.releases;
    this.releases = [];
    return s;
  }

  async run(): Promise<void> {
    if (this.done) return;
    this.done = true;
    const errors: unknown[] = [];
    while (this.releases.length) {
      const r = this.releases.pop()!;
      try {
        await r.fn();
      } catch (e) {
        errors.push(new Error(`cleanup ${r.name}: ${e instanceof Error ? e.message : String(e)}`, { cause: e }));
      }
    }
    if (errors.length === 1) throw errors[0];
    if (errors.length > 1) throw new AggregateError(errors, `${errors.length} cleanups failed`);
  }
}
