// Periodic rounds and their walks: a paced walk spreads its starts, and stopping ends a round's pacing.
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { describe, it } from "node:test";
import { forEachPaced, Periodic } from "./periodic.ts";

describe("forEachPaced", () => {
  it("starts item i no sooner than span * i / n after the first, a few at a time", async () => {
    const t0 = performance.now();
    const starts: number[] = [];
    let running = 0;
    let most = 0;
    await forEachPaced([0, 1, 2, 3, 4], 2, 200, new AbortController().signal, async (i) => {
      starts[i] = performance.now() - t0;
      most = Math.max(most, ++running);
      await sleep(5);
      running--;
    });
    assert.equal(starts.length, 5);
    // Timers count whole milliseconds on the loop's cached clock: a few ms of slack against
    // performance.now (78.9 ms was seen for 80). Unpaced, every item would start at ~0 ms.
    starts.forEach((at, i) => assert.ok(at >= i * 40 - 5, `item ${i} started at ${at.toFixed(1)} ms, before ${i * 40} ms`));
    assert.ok(most <= 2);
  });

  it("starts nothing more once its signal aborts, and returns without waiting out the span", async () => {
    const ac = new AbortController();
    const ran: number[] = [];
    setTimeout(() => ac.abort(), 50);
    const t0 = performance.now();
    // Item 1 is due at 1 s: far after the abort even on a loaded machine.
    await forEachPaced([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], 4, 10_000, ac.signal, async (i) => {
      ran.push(i);
    });
    assert.deepEqual(ran, [0]);
    assert.ok(performance.now() - t0 < 900, "it waited for the paced starts after the abort");
  });

  it("without a span is a plain walk", async () => {
    const ran: number[] = [];
    await forEachPaced([1, 2, 3], 8, 0, new AbortController().signal, async (i) => {
      ran.push(i);
    });
    assert.deepEqual(ran.sort(), [1, 2, 3]);
  });
});

describe("Periodic", () => {
  it("stop aborts the round's signal and waits for the round", async () => {
    let ended = false;
    const p = new Periodic(10, async (signal) => {
      await sleep(10_000, undefined, { signal }).catch(() => undefined);
      ended = true;
    });
    p.start();
    await sleep(30);
    const t0 = performance.now();
    await p.stop();
    assert.ok(ended, "the round ended before stop resolved");
    assert.ok(performance.now() - t0 < 1000);
  });
});
