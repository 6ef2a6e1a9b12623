/**
 * node-ctl heartbeat: publishes the node's inventory (capacity, usage, usable execution
 * environments, templates) at once and then every interval through `publish`, the
 * control-plane wiring given by the caller. A failed publish is logged and retried on the
 * next beat; beats never overlap. With `early`, it also beats as soon as what it last
 * published is out of date (checked every `everyMs`): placement admits by the last
 * published measurement, and on a node near its memory target a few seconds of drift
 * is room it does not have.
 */
import type { Logger } from "../../core/log.ts";
import type { NodeInventory } from "../../contract/node-api.ts";

export interface HeartbeatOptions {
  intervalMs: number;
  inventory: () => Promise<NodeInventory>;
  publish: (inventory: NodeInventory) => Promise<void>;
  logger: Logger;
  early?: { everyMs: number; due: (published: NodeInventory) => Promise<boolean> };
}

export function startHeartbeat(o: HeartbeatOptions): { stop(): Promise<void>; beat(): Promise<void> } {
  let stopped = false;
  let running: Promise<void> | undefined;
  let failures = 0;
  let published: NodeInventory | undefined;
  const beat = async () => {
    try {
      const inv = await o.inventory();
      await o.publish(inv);
      published = inv;
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
  const early = o.early;
  let checking = false;
  const check = async () => {
    // A failing control plane is retried on the interval only, not at every move.
    if (!early || checking || running || !published || failures) return;
    checking = true;
    try {
      if (await early.due(published)) tick();
    } finally {
      checking = false;
    }
  };
  const watch = early ? setInterval(() => void check().catch(() => undefined), early.everyMs) : undefined;
  watch?.unref();
  return {
    async stop() {
      stopped = true;
      clearInterval(timer);
      clearInterval(watch);
      await running;
    },
    beat,
  };
}
