/**
 * How tagged processes ended, kept after they leave the process table so a client that
 * was detached when a process finished (the control plane's `command.run` after a
 * restart) can still learn its exit status. E2B's protocol forgets a finished process
 * (List shows running ones, Connect to it is not_found); this record is SPACE's own,
 * served on `GET /space/processes/ended?tag=` (see server.ts; wire:
 * src/contract/ended-process.ts). Bounded by count and age.
 * It includes the tail of what the process wrote while nobody listened (E2B drops that
 * output; the record keeps the last DETACHED_OUTPUT_BYTES so a re-attaching client can
 * still store it).
 */
import type { EndedProcess } from "../../contract/ended-process.ts";
import type { EndInfo, OutputStream } from "./manager.ts";

export const ENDED_LIMIT = 256;
export const ENDED_TTL_MS = 15 * 60_000;
export const DETACHED_OUTPUT_BYTES = 64 * 1024;

/** The last `limit` bytes a process wrote while nobody listened. */
export class DetachedOutput {
  readonly chunks: { stream: OutputStream; data: Buffer }[] = [];
  bytes = 0;
  dropped = 0;

  constructor(private readonly limit = DETACHED_OUTPUT_BYTES) {}

  push(stream: OutputStream, data: Buffer): void {
    this.chunks.push({ stream, data });
    this.bytes += data.byteLength;
    while (this.bytes > this.limit) {
      const first = this.chunks[0]!;
      const cut = Math.min(first.data.byteLength, this.bytes - this.limit);
      this.bytes -= cut;
      this.dropped += cut;
      if (cut === first.data.byteLength) this.chunks.shift();
      else first.data = first.data.subarray(cut);
    }
  }
}

export class EndedProcesses {
  /** By tag, oldest first (Map keeps insertion order; a re-used tag moves to the end). */
  readonly #byTag = new Map<string, EndedProcess>();

  constructor(
    private readonly limit = ENDED_LIMIT,
    private readonly ttlMs = ENDED_TTL_MS,
    private readonly now: () => number = Date.now,
  ) {}

  record(tag: string, pid: number, end: EndInfo, detached: DetachedOutput | undefined): void {
    this.#byTag.delete(tag);
    this.#byTag.set(tag, {
      tag,
      pid,
      exit_code: end.exitCode,
      exited: end.exited,
      status: end.status,
      error: end.error ?? null,
      ended_at: new Date(this.now()).toISOString(),
      detached_output: (detached?.chunks ?? []).map((c) => ({ stream: c.stream, data: c.data.toString("base64") })),
      detached_output_dropped_bytes: detached?.dropped ?? 0,
    });
    this.#prune();
  }

  get(tag: string): EndedProcess | undefined {
    this.#prune();
    return this.#byTag.get(tag);
  }

  get size(): number {
    this.#prune();
    return this.#byTag.size;
  }

  #prune(): void {
    const oldest = this.now() - this.ttlMs;
    for (const [tag, r] of this.#byTag) {
      if (this.#byTag.size <= this.limit && Date.parse(r.ended_at) >= oldest) break;
      this.#byTag.delete(tag);
    }
  }
}
