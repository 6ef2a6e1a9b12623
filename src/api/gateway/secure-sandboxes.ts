/**
 * The running secure sandboxes, for requests that name their sandbox only by a secret
 * (signed file URLs, a bare X-Access-Token): the gateway checks the secret against each
 * one's envd token. A list younger than `ttlMs` answers hits; a miss is never answered
 * from memory: it waits for a list read that started after the request came, so a
 * sandbox created a moment ago (here or in another process) is found. Misses share
 * reads: at most one read runs and one waits behind it, however many misses come.
 */
import type { SandboxRecord, SandboxRepo } from "../../sandboxes/model.ts";
import { isRoutable } from "./route-cache.ts";

type Read = { seq: number; list: Promise<SandboxRecord[]> };

export class SecureSandboxes {
  readonly #repo: Pick<SandboxRepo, "listRunningSecure">;
  readonly #ttlMs: number;
  #list: { at: number; records: SandboxRecord[] } | null = null;
  #running: Read | null = null;
  #queued: Promise<SandboxRecord[]> | null = null;
  /** One counter for request arrivals and read starts: a read serves the misses that arrived before it started. */
  #seq = 0;

  constructor(repo: Pick<SandboxRepo, "listRunningSecure">, ttlMs = 1000) {
    this.#repo = repo;
    this.#ttlMs = ttlMs;
  }

  async find(matches: (rec: SandboxRecord) => boolean): Promise<SandboxRecord | null> {
    const arrived = ++this.#seq;
    const cached = this.#list;
    if (cached && Date.now() - cached.at <= this.#ttlMs) {
      const hit = cached.records.find(matches);
      if (hit) return hit;
    }
    return (await this.#readAfter(arrived)).find(matches) ?? null;
  }

  /** A sandbox that just started: listed at once when secure. */
  publish(rec: SandboxRecord): void {
    if (!this.#list) return;
    const others = this.#list.records.filter((r) => r.id !== rec.id);
    this.#list = { ...this.#list, records: rec.envdAccessToken && isRoutable(rec) ? [...others, rec] : others };
  }

  forget(id: string): void {
    if (this.#list) this.#list = { ...this.#list, records: this.#list.records.filter((r) => r.id !== id) };
  }

  #readAfter(arrived: number): Promise<SandboxRecord[]> {
    const running = this.#running;
    if (!running) return this.#start().list;
    if (running.seq > arrived) return running.list;
    this.#queued ??= running.list
      .catch(() => undefined)
      .then(() => {
        this.#queued = null;
        // A read another miss started once this one ended began after every waiter here came.
        const now = this.#running;
        return (now && now !== running ? now : this.#start()).list;
      });
    return this.#queued;
  }

  #start(): Read {
    const read: Read = {
      seq: ++this.#seq,
      list: this.#repo.listRunningSecure().then((records) => {
        this.#list = { at: Date.now(), records };
        return records;
      }),
    };
    this.#running = read;
    void read.list.catch(() => undefined).finally(() => {
      if (this.#running === read) this.#running = null;
    });
    return read;
  }
}
