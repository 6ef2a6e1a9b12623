/**
 * Sandbox end-time enforcement (leader only). Sleeps until the earliest end time (capped
 * at `maxSleepMs`, so refreshes and new sandboxes are seen), then ends every sandbox
 * past it per `lifecycle.onTimeout` (SandboxService.expire). A `poke()` wakes it early
 * (e.g. after a timeout is shortened), keeping enforcement well within a second.
 */
import type { Logger } from "../core/log.ts";
import type { SandboxService } from "../sandboxes/service.ts";

export interface TimeoutEnforcerDeps {
  sandboxes: SandboxService;
  log: Logger;
  /** Longest sleep between sweeps. Default 250 ms. */
  maxSleepMs?: number;
  /** Sandboxes ended concurrently per sweep. Default 16. */
  concurrency?: number;
}

export interface TimeoutEnforcer {
  stop(): Promise<void>;
  /** Sweep now. */
  poke(): void;
}

export function startTimeoutEnforcer(deps: TimeoutEnforcerDeps): TimeoutEnforcer {
  const { sandboxes, log } = deps;
  const repo = sandboxes.repo;
  const maxSleepMs = deps.maxSleepMs ?? 250;
  const concurrency = deps.concurrency ?? 16;
  let stopped = false;
  let wake: (() => void) | null = null;
  /** Ids being ended now: a slow node kill is not started twice. */
  const busy = new Set<string>();
  const pending = new Set<Promise<void>>();

  async function sweep(): Promise<void> {
    const expired = await repo.listExpired(new Date(), 200);
    const queue = expired.filter((r) => !busy.has(r.id));
    const workers = Array.from({ length: Math.min(concurrency, queue.length) }, async () => {
      for (let rec = queue.shift(); rec; rec = queue.shift()) {
        busy.add(rec.id);
        const p = sandboxes
          .expire(rec)
          .then(() => log.info({ sandboxId: rec!.id, onTimeout: rec!.lifecycle.onTimeout }, "sandbox timed out"))
          .catch((e: unknown) => log.warn({ err: e, sandboxId: rec!.id }, "timeout enforcement failed; retrying next sweep"))
          .finally(() => busy.delete(rec!.id));
        pending.add(p);
        p.finally(() => pending.delete(p)).catch(() => {});
        await p;
      }
    });
    await Promise.all(workers);
  }

  async function loop(): Promise<void> {
    while (!stopped) {
      // One statement per wake while nothing is due (the earliest end time); the sweep's list
      // only when something is: an idle control plane wakes four times a second.
      let sleepMs = maxSleepMs;
      try {
        const next = await repo.nextEndAt();
        const dueInMs = next ? next.getTime() - Date.now() : Infinity;
        // After a sweep, a short pause: what it could not end yet (a slow kill) is still due.
        if (dueInMs <= 0) await sweep();
        sleepMs = Math.max(20, Math.min(maxSleepMs, dueInMs));
      } catch (e) {
        log.warn({ err: e }, "timeout sweep failed");
      }
      if (stopped) break;
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, sleepMs);
        wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
      wake = null;
    }
  }

  const running = loop();
  return {
    poke() {
      wake?.();
    },
    async stop() {
      stopped = true;
      wake?.();
      await running;
      await Promise.allSettled([...pending]);
    },
  };
}
