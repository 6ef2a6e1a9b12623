import { test } from "node:test";
import assert from "node:assert/strict";
import { Headers } from "./headers.ts";

// The same operations on envd's Headers and on Node's (undici's): the same answers.
const both = (init?: ConstructorParameters<typeof globalThis.Headers>[0]) => [new Headers(init), new globalThis.Headers(init)] as const;
const view = (h: Headers | globalThis.Headers) => ({
  entries: [...h],
  keys: [...h.keys()],
  values: [...h.values()],
  each: (() => {
    const out: string[] = [];
    h.forEach((v, k) => out.push(`${k}=${v}`));
    return out;
  })(),
  cookies: h.getSetCookie(),
});

test("init from a record, pairs and another Headers; case-insensitive names, sorted iteration", () => {
  for (const init of [{ B: "2", a: " 1 \t", "Content-Type": "x/y" }, [["b", "2"], ["A", "1"], ["a", "3"]], new globalThis.Headers([["z", "9"], ["Set-Cookie", "a=1"], ["set-cookie", "b=2"]])]) {
    const [ours, node] = both(init as [string, string][]);
    assert.deepEqual(view(ours), view(node));
    assert.equal(ours.get("A"), node.get("A"));
    assert.equal(ours.get("missing"), null);
  }
});

test("append joins, set replaces, delete and has; set-cookie stays one entry per value", () => {
  const [ours, node] = both();
  for (const h of [ours, node]) {
    h.append("X-Multi", "one");
    h.append("x-multi", "two");
    h.append("Set-Cookie", "a=1");
    h.append("Set-Cookie", "b=2");
    h.set("X-Single", "first");
    h.set("x-single", "second");
    h.append("gone", "v");
    h.delete("GONE");
  }
  assert.deepEqual(view(ours), view(node));
  assert.equal(ours.get("x-multi"), "one, two");
  assert.equal(ours.get("set-cookie"), node.get("set-cookie"));
  assert.equal(ours.has("Gone"), false);
  assert.equal(ours.has("X-SINGLE"), true);
});

test("invalid names and values are a TypeError, as in Node", () => {
  for (const [k, v] of [["bad name", "v"], ["", "v"], ["ok", "a\r\nb"], ["ok", "a\0b"]] as const) {
    assert.throws(() => new globalThis.Headers([[k, v]]), TypeError);
    assert.throws(() => new Headers([[k, v]]), TypeError);
  }
  assert.throws(() => new Headers([["only-one"]] as unknown as [string, string][]), TypeError);
});
