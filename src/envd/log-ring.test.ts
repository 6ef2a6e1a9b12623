import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { EnvdLogRing } from "./log-ring.ts";

describe("envd's log ring", () => {
  it("timestamps strictly increase, fields are strings, the oldest go past the bound", () => {
    const ring = new EnvdLogRing(3);
    for (let i = 0; i < 5; i++) ring.push("info", `m${i}`, { n: i, s: "x", obj: { a: 1 }, gone: undefined });
    const page = ring.page(0, 100);
    assert.equal(page.head, 5);
    assert.deepEqual(page.entries.map((e) => [e.seq, e.message]), [[3, "m2"], [4, "m3"], [5, "m4"]]);
    assert.deepEqual(page.entries[0]!.fields, { n: "2", s: "x", obj: '{"a":1}' });
    const t = page.entries.map((e) => Date.parse(e.timestamp));
    assert.ok(t.every((x, i) => i === 0 || x > t[i - 1]!), t.join(","));
  });

  it("pages after a sequence number, bounded by limit; the boot id is stable", () => {
    const ring = new EnvdLogRing(10);
    for (let i = 0; i < 6; i++) ring.push("debug", `m${i}`);
    assert.deepEqual(ring.page(2, 2).entries.map((e) => e.seq), [3, 4]);
    assert.deepEqual(ring.page(6, 10).entries, []);
    assert.equal(ring.page(0, 1).boot, ring.page(3, 1).boot);
    assert.notEqual(new EnvdLogRing().boot, ring.boot);
  });

  it("long messages and values are cut", () => {
    const ring = new EnvdLogRing();
    const e = ring.push("info", "x".repeat(10_000), { v: "y".repeat(10_000) });
    assert.ok(e.message.length < 5000 && e.fields.v!.length < 5000);
  });
});
