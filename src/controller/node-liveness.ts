/**
 * Node liveness (leader only): a node that stops heartbeating for longer than the grace
 * is marked unavailable, so placement stops choosing it. Its sandboxes are reported,
 * not silently dropped (the Direct fleet issue acts on them).
 */
import type { Logger } from "../core/log.ts";
import type { Db } from "../store/db.ts";
import { markUnavailableNodes } from "../store/nodes.ts";

export interface NodeLivenessDeps {
  db: Db;
  log: Logger;
  /** A node silent this long becomes unavailable (3 heartbeats by default). */
  graceMs: number;
  intervalMs?: number;
}

export function startNodeLiveness(deps: NodeLivenessDeps): { stop(): Promise<void> } {
  let running: Promise<void> = Promise.resolve();
  const tick = async () => {
    try {
      const lost = await markUnavailableNodes(deps.db, deps.graceMs);
      for (const n of lost) deps.log.warn({ node: n.id, name: n.name, lastHeartbeatAt: n.lastHeartbeatAt }, "node stopped heartbeating: unavailable");
    } catch (e) {
      deps.log.error({ err: e }, "node liveness check failed");
    }
  };
  const timer = setInterval(() => {
    running = running.then(tick);
  }, deps.intervalMs ?? Math.max(1000, Math.floor(deps.graceMs / 3)));
  timer.unref();
  return {
    async stop() {
      clearInterval(timer);
      await running;
    },
  };
}
