/**
 * Notice that a sandbox row changed, so a wait (a connect during a suspend, a retried
 * create during the first attempt) ends at once instead of at the next poll. Two sources:
 * every write this process makes through the service's repo (in-process, no round trip;
 * the only source for the in-memory repo), and the store's change feed (a NOTIFY per
 * changed row, from any process: another replica's dispatcher, the controller, another
 * connection). The feed is subscribed on the first wait.
 */
import { EventEmitter } from "node:events";
import type { SandboxId } from "../core/ids.ts";
import type { ListQuery, SandboxPatch, SandboxRecord, SandboxRepo, SandboxState } from "./model.ts";

/** Calls `fn` with the id of each changed sandbox row; resolves to an unsubscribe. */
export type SandboxChangeFeed = (fn: (id: SandboxId) => void) => Promise<() => Promise<void>>;

export class SandboxChanges {
  readonly #emitter = new EventEmitter();
  readonly #feed: SandboxChangeFeed | undefined;
  #subscribed: Promise<void> | undefined;

  constructor(feed?: SandboxChangeFeed) {
    this.#emitter.setMaxListeners(0);
    this.#feed = feed;
  }

  /**
   * Subscribes to the feed once, for the life of the process. A failed subscription is
   * retried by the next wait; meanwhile waits fall back to their poll.
   */
  #subscribe(): Promise<void> {
    if (!this.#feed) return Promise.resolve();
    this.#subscribed ??= this.#feed((id) => this.notify(id)).then(
      () => undefined,
      () => {
        this.#subscribed = undefined;
      },
    );
    return this.#subscribed;
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
   * least every `pollMs`; at `deadline` (epoch ms) the row is returned as it is. The poll
   * is only a safety net: a notification sent while the store's listening connection is
   * down (it reconnects) is lost, and a poll bounds how long that can delay a wait.
   */
  async awaitLeaving(
    id: SandboxId,
    states: readonly SandboxState[],
    read: () => Promise<SandboxRecord | null>,
    deadline: number,
    pollMs: number,
  ): Promise<SandboxRecord | null> {
    await this.#subscribe();
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
    insert: async (rec, executionId) => announce(rec.id, await repo.insert(rec, executionId)),
    get: (tenantId, id) => repo.get(tenantId, id),
    getById: (id) => repo.getById(id),
    list: (tenantId, q: ListQuery) => repo.list(tenantId, q),
    transition: async (id, from, to, patch?: SandboxPatch) => announce(id, await repo.transition(id, from, to, patch)),
    update: async (id, patch) => announce(id, await repo.update(id, patch)),
    listExpired: (now, limit) => repo.listExpired(now, limit),
    nextEndAt: () => repo.nextEndAt(),
    listRunningSecure: () => repo.listRunningSecure(),
    ...(repo.checkQuota ? { checkQuota: repo.checkQuota.bind(repo) } : {}),
  };
}
