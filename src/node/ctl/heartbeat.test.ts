/**
 * The heartbeat publishes at once, then on its interval; with `early` it publishes as soon as
 * what it last published is out of date, and host memory moving by a request makes it so.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { startHeartbeat } from "./heartbeat.ts";
import { waitFor } from "../../../test/support/wait.ts";
import { memoryMoved } from "./host-memory.ts";
import { createLogger } from "../../core/log.ts";
import type { NodeInventory } from "../../contract/node-api.ts";

const log = createLogger("silent", "heartbeat");

/** Waits for a beat it expects (a loaded machine delays timers). */
const until = (cond: () => boolean) => waitFor(cond, "the expected beat", 3000, 5);

function inventoryWith(memoryAvailableMib: number): NodeInventory {
  return {
    nodeId: "n1",
    name: "n1",
    runtime: "oci",
    capacity: { networkSlots: 10, vcpu: 2, memoryMib: 24_000, diskMib: 1000 },
    used: { networkSlots: 0, vcpu: 0, memoryMib: 0, diskMib: 0, sandboxes: 0, memoryAvailableMib },
    usableEnvironments: [],
    templates: [],
  };
}

describe("heartbeat", () => {
  test("beats early once what it published is out of date, not before", async () => {
    let available = 10_000;
    const published: number[] = [];
    const hb = startHeartbeat({
      intervalMs: 60_000,
      inventory: async () => inventoryWith(available),
      publish: async (inv) => {
        published.push(inv.used.memoryAvailableMib ?? -1);
      },
      logger: log,
      early: { everyMs: 10, due: async (p) => memoryMoved(p.used, { memoryAvailableMib: available }, 32) },
    });
    try {
      await until(() => published.length === 1);
      await sleep(60);
      assert.deepEqual(published, [10_000], "only the first beat while memory stays put");
      available -= 31;
      await sleep(60);
      assert.deepEqual(published, [10_000], "a move under the threshold is no reason to beat");
      available -= 1;
      await until(() => published.length === 2);
      assert.deepEqual(published, [10_000, 9_968], "a move by the threshold beats before the interval");
      available += 40;
      await until(() => published.length === 3);
      assert.deepEqual(published, [10_000, 9_968, 10_008], "memory coming back beats too");
    } finally {
      await hb.stop();
    }
  });

  test("while publishing fails, a move does not retry it early: the interval does", async () => {
    let available = 10_000;
    let calls = 0;
    let failing = false;
    const hb = startHeartbeat({
      intervalMs: 60_000,
      inventory: async () => inventoryWith(available),
      publish: async () => {
        calls++;
        if (failing) throw new Error("control plane down");
      },
      logger: log,
      early: { everyMs: 10, due: async (p) => memoryMoved(p.used, { memoryAvailableMib: available }, 32) },
    });
    try {
      await until(() => calls === 1);
      available -= 100;
      failing = true;
      await until(() => calls === 2);
      await sleep(30);
      assert.equal(calls, 2, "the move beat once, and that beat failed");
      available -= 100;
      await sleep(80);
      assert.equal(calls, 2, "no early retry while the last beat failed");
    } finally {
      await hb.stop();
    }
  });

  test("without early it beats on its interval only", async () => {
    let available = 10_000;
    let beats = 0;
    const hb = startHeartbeat({
      intervalMs: 60_000,
      inventory: async () => inventoryWith(available),
      publish: async () => {
        beats++;
      },
      logger: log,
    });
    try {
      await until(() => beats === 1);
      available -= 1000;
      await sleep(60);
      assert.equal(beats, 1);
    } finally {
      await hb.stop();
    }
  });

  test("memoryMoved needs both readings", () => {
    assert.equal(memoryMoved({}, { memoryAvailableMib: 1 }, 32), false);
    assert.equal(memoryMoved({ memoryAvailableMib: 100 }, {}, 32), false);
    assert.equal(memoryMoved({ memoryAvailableMib: 100 }, { memoryAvailableMib: 68 }, 32), true);
  });
});
