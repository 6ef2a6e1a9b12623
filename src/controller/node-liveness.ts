/**
 * Node liveness (leader only): a Direct node that stops heartbeating for longer than the
 * grace is marked unavailable (a pending drain survives in drain_mode), so placement
 * stops choosing it, and its sandboxes are reported lost (node-lost.ts), not silently
 * dropped.
 */
import type { Logger } from "../core/log.ts";
import type { Db } from "../store/db.ts";
import { markSilentNodesUnavailable } from "../store/node-fleet.ts";
import { listNodes } from "../store/nodes.ts";
import type { SandboxRepo } from "../sandboxes/model.ts";
import { reportLostSandboxes } from "./node-lost.ts";

export interface NodeLivenessDeps {
  db: Db;
  log: Logger;
  /** A node silent this long becomes unavailable (3 heartbeats by default). */
  graceMs: number;
  intervalMs?: number;
  /** When given, the sandboxes of a node that went silent are reported lost. */
  repo?: SandboxRepo;
}

export function startNodeLiveness(deps: NodeLivenessDeps): { stop(): Promise<void>; tick(): Promise<void> } {
  let running: Promise<void> = Promise.resolve();
  const tick = async () => {
    try {
      const silent = await markSilentNodesUnavailable(deps.db, deps.graceMs);
      for (const n of silent)
        deps.log.warn({ node: n.id, name: n.name, lastHeartbeatAt: n.lastHeartbeatAt }, "node stopped heartbeating: unavailable");
      // Level-triggered: every unavailable node's remaining live sandboxes, so a report
      // interrupted by a leader change is finished by the next leader.
      if (deps.repo)
        for (const n of await listNodes(deps.db, { status: ["unavailable"] }))
          await reportLostSandboxes(deps.db, deps.repo, n, deps.log);
    } catch (e) {
      deps.log.error({ err: e }, "node liveness check failed");
    }
  };
  const timer = setInterval(
    () => {
      running = running.then(tick);
    },
    deps.intervalMs ?? Math.max(250, Math.min(5000, Math.floor(deps.graceMs / 3))),
  );
  timer.unref();
  return {
    tick,
    async stop() {
      clearInterval(timer);
      await running;
    },
  };
}
