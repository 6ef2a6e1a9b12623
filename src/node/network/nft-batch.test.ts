/**
 * The node table's scripts batched while one runs (nft-batch.ts), against a runner that
 * records each run and refuses scripts naming "bad".
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { NftBatch } from "./nft-batch.ts";

function recorder() {
  const runs: string[] = [];
  let release: (() => void) | undefined;
  let gate = Promise.resolve();
  return {
    runs,
    /** Holds the next run until `open()`. */
    hold() {
      gate = new Promise((r) => (release = r));
    },
    open: () => release?.(),
    run: async (script: string) => {
      runs.push(script);
      await gate;
      if (script.includes("bad")) throw new Error(`nft refused: ${script.trim().split("\n").join(" | ")}`);
    },
  };
}
const never = () => new AbortController().signal;

test("a script alone runs at once; those that arrive while it runs go together in one run, in order", async () => {
  const r = recorder();
  const batch = new NftBatch(r.run, 1000);
  r.hold();
  const first = batch.apply("add a\n", never());
  assert.deepEqual(r.runs, ["add a\n"], "the first script did not wait");
  const rest = ["add b\n", "add c\n", "add d\n"].map((s) => batch.apply(s, never()));
  r.open();
  await Promise.all([first, ...rest]);
  assert.deepEqual(r.runs, ["add a\n", "add b\nadd c\nadd d\n"]);
});

test("a batch nft refuses runs each script alone: only the refused one fails, with its own error", async () => {
  const r = recorder();
  const batch = new NftBatch(r.run, 1000);
  r.hold();
  const first = batch.apply("add a\n", never());
  const results = Promise.allSettled(["add b\n", "add bad\n", "add c\n"].map((s) => batch.apply(s, never())));
  r.open();
  await first;
  const [b, bad, c] = (await results) as [PromiseSettledResult<void>, PromiseSettledResult<void>, PromiseSettledResult<void>];
  assert.equal(b.status, "fulfilled");
  assert.equal(c.status, "fulfilled");
  assert.equal(bad.status, "rejected");
  assert.match(String((bad as PromiseRejectedResult).reason), /add bad/);
  assert.doesNotMatch(String((bad as PromiseRejectedResult).reason), /add b\b|add c/, "the error is its own script's");
  assert.deepEqual(r.runs, ["add a\n", "add b\nadd bad\nadd c\n", "add b\n", "add bad\n", "add c\n"]);
  assert.equal(await batch.applies("add bad again\n", never()), false, "applies: a refusal is false");
  assert.equal(await batch.applies("add e\n", never()), true);
});

test("a script aborted while it waits leaves the batch and rejects; an abort of applies() throws, not false", async () => {
  const r = recorder();
  const batch = new NftBatch(r.run, 1000);
  r.hold();
  const first = batch.apply("add a\n", never());
  const ac = new AbortController();
  const aborted = batch.apply("add x\n", ac.signal);
  const kept = batch.apply("add y\n", never());
  const ac2 = new AbortController();
  const abortedMaybe = batch.applies("delete z\n", ac2.signal);
  ac.abort(new Error("caller gave up"));
  ac2.abort(new Error("caller gave up too"));
  await assert.rejects(aborted, /caller gave up/);
  await assert.rejects(abortedMaybe, /caller gave up too/);
  r.open();
  await Promise.all([first, kept]);
  assert.deepEqual(r.runs, ["add a\n", "add y\n"], "the aborted scripts never ran");
  await assert.rejects(batch.apply("add w\n", AbortSignal.abort(new Error("already aborted"))), /already aborted/);
});
