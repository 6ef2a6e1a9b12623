/**
 * node-ctl heartbeat: publishes the node's inventory (capacity, usage, usable execution
 * environments, templates) at once and then every interval through `publish`, the
 * control-plane wiring given by the caller. A failed publish is logged and retried on the
 * next beat; beats never overlap.
 */
import type { Logger } from "../../core/log.ts";
import type { NodeInventory } from "../../contract/node-api.ts";

export interface HeartbeatOptions {
  intervalMs: number;
  inventory: () => Promise<NodeInventory>;
  publish: (inventory: NodeInventory) => Promise<void>;
  logger: Logger;
}

export function startHeartbeat(o: HeartbeatOptions): { stop(): Promise<void>; beat(): Promise<void> } {
  let stopped = false;
  let running: Promise<void> | undefined;
  let failures = 0;
  const beat = async () => {
    try {
      await o.publish(await o.inventory());
      if (failures) o.logger.info({ after: failures }, "node inventory published again");
      failures = 0;
    } catch (e) {
      failures++;
      if (failures === 1 || failures % 10 === 0) o.logger.warn({ err: e, failures }, "node inventory publish failed");
    }
  };
  const tick = () => {
    if (stopped || running) return;
    running = beat().finally(() => {
      running = undefined;
    });
  };
  tick();
  const timer = setInterval(tick, o.intervalMs);
  timer.unref();
  return {
    async stop() {
      stopped = true;
      clearInterval(timer);
      await running;
    },
    beat,
  };
}
