import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { ForegroundActivity } from "./foreground-activity.ts";

/** Settles `p` into "resolved" or "pending" after `ms`. */
const stateAfter = async (p: Promise<void>, ms: number) => Promise.race([p.then(() => "resolved"), sleep(ms).then(() => "pending")]);

describe("the node's foreground activity", () => {
  it("is quiet only `quietMs` after the last foreground call ended; a waiter resolves then", async () => {
    const a = new ForegroundActivity(60);
    assert.equal(a.quiet, true);
    let end!: () => void;
    const call = a.run(() => new Promise<void>((r) => (end = r)));
    assert.equal(a.quiet, false);
    const waited = a.untilQuiet(10_000);
    assert.equal(await stateAfter(waited, 30), "pending", "a call in flight: not quiet");
    end();
    await call;
    assert.equal(await stateAfter(waited, 20), "pending", "just ended: not quiet yet");
    assert.equal(await stateAfter(waited, 200), "resolved");
    assert.equal(a.quiet, true);
  });

  it("a call starting within the quiet window keeps the node busy", async () => {
    const a = new ForegroundActivity(60);
    await a.run(async () => undefined);
    await sleep(30);
    const waited = a.untilQuiet(10_000);
    let end!: () => void;
    const call = a.run(() => new Promise<void>((r) => (end = r)));
    assert.equal(await stateAfter(waited, 100), "pending", "the second call is in flight");
    end();
    await call;
    assert.equal(await stateAfter(waited, 200), "resolved");
  });

  it("a waiter never waits longer than it asked, nor past its signal; a failed call ends like one that succeeded", async () => {
    const a = new ForegroundActivity(60);
    let end!: (e: Error) => void;
    const call = a.run(() => new Promise<void>((_, rej) => (end = rej)));
    const t0 = performance.now();
    await a.untilQuiet(50);
    assert.ok(performance.now() - t0 >= 45, "bounded by its own wait");
    assert.equal(a.quiet, false);
    const c = new AbortController();
    const aborted = a.untilQuiet(10_000, c.signal);
    c.abort();
    assert.equal(await stateAfter(aborted, 20), "resolved");
    end(new Error("create failed"));
    await assert.rejects(call, /create failed/);
    assert.equal(await stateAfter(a.untilQuiet(10_000), 200), "resolved");
  });
});
