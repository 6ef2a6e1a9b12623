/**
 * In-process notice that a sandbox row changed: every write this process makes through
 * the service's repo wakes whoever waits on that sandbox, so a wait (a connect during a
 * suspend, a retried create during the first attempt) ends at once instead of at the
 * next poll. A change another process makes is still seen by a slow poll.
 */
import { EventEmitter } from "node:events";
import type { SandboxId } from "../core/ids.ts";
import type { ListQuery, SandboxPatch, SandboxRecord, SandboxRepo, SandboxState } from "./model.ts";

export class SandboxChanges {
  readonly #emitter = new EventEmitter();

  constructor() {
    this.#emitter.setMaxListeners(0);
  }

  notify(id: SandboxId): void {
    this.#emitter.emit(id);
  }

  /**
   * Resolves on the next change of `id` or after `ms`, whichever comes first. Subscribe
   * before reading the row, so a change between the read and the wait is not missed.
   */
  next(id: SandboxId, ms: number): { changed: Promise<void>; cancel(): void } {
    let cancel = () => {};
    const changed = new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.#emitter.off(id, done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.#emitter.on(id, done);
      cancel = done;
    });
    return { changed, cancel };
  }

  /**
   * Reads the sandbox until it is gone or out of `states`, waking on each change and at
   * least every `pollMs`; at `deadline` (epoch ms) the row is returned as it is.
   */
  async awaitLeaving(
    id: SandboxId,
    states: readonly SandboxState[],
    read: () => Promise<SandboxRecord | null>,
    deadline: number,
    pollMs: number,
  ): Promise<SandboxRecord | null> {
    for (;;) {
      const wake = this.next(id, Math.max(0, Math.min(pollMs, deadline - Date.now())));
      const rec = await read().catch((e: unknown) => {
        wake.cancel();
        throw e;
      });
      if (!rec || !states.includes(rec.state) || Date.now() > deadline) {
        wake.cancel();
        return rec;
      }
      await wake.changed;
    }
  }
}

/**
 * `repo` with every write announced on `changes`, and every write that leaves the
 * sandbox running handed to `onRunning`: the one place a route is published, whichever
 * path made it running (create, fork, resume, restore, evacuation, a failed suspend
 * brought back, Native start) and whatever a write changed that routing reads (node,
 * network settings, tokens).
 */
export function announcingRepo(repo: SandboxRepo, changes: SandboxChanges, onRunning: (rec: SandboxRecord) => void): SandboxRepo {
  const announce = <T extends SandboxRecord | null>(id: SandboxId, r: T): T => {
    if (r) {
      changes.notify(id);
      if (r.state === "running") onRunning(r);
    }
    return r;
  };
  return {
    insert: async (rec: SandboxRecord) => {
      await repo.insert(rec);
      changes.notify(rec.id);
    },
    get: (tenantId, id) => repo.get(tenantId, id),
    getById: (id) => repo.getById(id),
    list: (tenantId, q: ListQuery) => repo.list(tenantId, q),
    transition: async (id, from, to, patch?: SandboxPatch) => announce(id, await repo.transition(id, from, to, patch)),
    update: async (id, patch) => announce(id, await repo.update(id, patch)),
    listExpired: (now, limit) => repo.listExpired(now, limit),
    nextEndAt: () => repo.nextEndAt(),
    listRunningSecure: () => repo.listRunningSecure(),
  };
}
