import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Recent } from "./recent.ts";

describe("Recent", () => {
  // A mocked clock: the test asserts the times themselves, not a loaded machine's sleeps.
  it("keeps a value for its time, never longer than the default", (t) => {
    t.mock.timers.enable({ apis: ["Date"] });
    const r = new Recent<string>(40);
    r.set("a", "x");
    r.set("b", "y", 5);
    r.set("c", "z", 60_000);
    assert.equal(r.get("a"), "x");
    t.mock.timers.tick(15);
    assert.equal(r.get("b"), undefined, "its own shorter time");
    assert.equal(r.get("a"), "x");
    t.mock.timers.tick(40);
    assert.equal(r.get("a"), undefined);
    assert.equal(r.get("c"), undefined, "capped at the default");
  });

  it("forgets on delete and clear, and starts over when full", () => {
    const r = new Recent<number>(60_000, 2);
    r.set("a", 1);
    r.set("b", 2);
    r.delete("a");
    assert.equal(r.get("a"), undefined);
    r.set("c", 3); // b and c: at the bound, not past it
    assert.equal(r.get("b"), 2);
    r.set("d", 4); // past the bound: cleared first
    assert.equal(r.get("b"), undefined);
    assert.equal(r.get("d"), 4);
    r.clear();
    assert.equal(r.get("d"), undefined);
  });
});
