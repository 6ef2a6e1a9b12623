import assert from "node:assert/strict";
import { availableParallelism } from "node:os";
import { describe, it } from "node:test";
import { BootQueue } from "./boot-queue.ts";

/** A boot that runs until `finish()` is called; `started` says whether the queue let it start. */
function heldBoot(order: string[], name: string) {
  let finish!: () => void;
  const done = new Promise<void>((r) => (finish = r));
  const b = { started: false, finish: () => finish(), run: async () => {
    b.started = true;
    order.push(name);
    await done;
    return name;
  } };
  return b;
}

const tick = () => new Promise((r) => setImmediate(r));

describe("boot queue", () => {
  it("starts at most its limit at once; the next starts when one ends", async () => {
    const queue = new BootQueue(2);
    const order: string[] = [];
    const boots = ["a", "b", "c"].map((n) => heldBoot(order, n));
    const results = boots.map((b) => queue.run(false, AbortSignal.timeout(10_000), b.run));
    await tick();
    assert.deepEqual(order, ["a", "b"]);
    assert.equal(queue.waiting, 1);
    boots[0]!.finish();
    assert.equal(await results[0], "a");
    await tick();
    assert.deepEqual(order, ["a", "b", "c"]);
    boots[1]!.finish();
    boots[2]!.finish();
    assert.deepEqual(await Promise.all(results), ["a", "b", "c"]);
  });

  it("a waiting create goes before waiting warm-pool refills, whatever their arrival order", async () => {
    const queue = new BootQueue(1);
    const order: string[] = [];
    const first = heldBoot(order, "first");
    const refill1 = heldBoot(order, "refill1");
    const refill2 = heldBoot(order, "refill2");
    const create = heldBoot(order, "create");
    const all = [
      queue.run(false, AbortSignal.timeout(10_000), first.run),
      queue.run(true, AbortSignal.timeout(10_000), refill1.run),
      queue.run(true, AbortSignal.timeout(10_000), refill2.run),
      queue.run(false, AbortSignal.timeout(10_000), create.run),
    ];
    for (const b of [first, create, refill1, refill2]) {
      await tick();
      b.finish();
      await tick();
    }
    await Promise.all(all);
    assert.deepEqual(order, ["first", "create", "refill1", "refill2"]);
  });

  it("a boot whose caller gave up while it waited never runs, and frees its turn", async () => {
    const queue = new BootQueue(1);
    const order: string[] = [];
    const running = heldBoot(order, "running");
    const abandoned = heldBoot(order, "abandoned");
    const next = heldBoot(order, "next");
    const caller = new AbortController();
    const r1 = queue.run(false, AbortSignal.timeout(10_000), running.run);
    const r2 = queue.run(false, caller.signal, abandoned.run);
    const r3 = queue.run(false, AbortSignal.timeout(10_000), next.run);
    await tick();
    caller.abort(new Error("create cancelled"));
    await assert.rejects(r2, /create cancelled/);
    running.finish();
    next.finish();
    assert.deepEqual(await Promise.all([r1, r3]), ["running", "next"]);
    assert.equal(abandoned.started, false);
    assert.deepEqual(order, ["running", "next"]);
  });

  it("a failed boot frees its place", async () => {
    const queue = new BootQueue(1);
    await assert.rejects(queue.run(false, AbortSignal.timeout(10_000), () => Promise.reject(new Error("runc run failed"))), /runc run failed/);
    assert.equal(await queue.run(false, AbortSignal.timeout(10_000), async () => "after"), "after");
  });

  it("0 means twice the CPUs", () => {
    assert.equal(new BootQueue(0).concurrency, 2 * availableParallelism());
    assert.equal(new BootQueue(3).concurrency, 3);
  });
});
